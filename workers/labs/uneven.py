"""Lab uneven (failures): ranks with different numbers of batches agree when to stop.

Every rank trains a DDP model on its own list of batches, of a length that differs from
rank to rank (the shortest is not always rank 0's). DDP's backward all-reduces on every
rank, so a rank that stops alone leaves the others waiting in backward forever. The
reader's loop must make every rank stop after the same number of steps, as many as the
shortest list has; rank 0 checks the weights against one process that trains on every
rank's batches of those steps, which is what DDP computes.
"""

from __future__ import annotations

import re

from workers.labs.harness import Finding

CHAPTER = "failures"
FUNCTION = "train_uneven"
ASKS = "ranks with different batch counts agree when to stop: no hang, same steps"
REREAD = '"Uneven inputs" in the failures chapter'
PASSED = "stops every rank together, after the shortest rank's batches"
WORLD_SIZES = (2, 3)  # the page runs 2 ranks
GROUP = True
PRELOAD = ("torch._dynamo",)
TIMEOUT = 8.0
COUNTS = (4, 3, 5)  # batches of rank r: COUNTS[r % 3]; rank 1 has the fewest
TOLERANCE = 1e-10


def setup(world_size: int) -> dict:
    return {"counts": [COUNTS[rank % len(COUNTS)] for rank in range(world_size)]}


def describe(world_size: int, given: dict) -> str:
    return f", batches per rank {given['counts']}"


def model():
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Linear(8, 1).double()


def batches(rank: int, count: int) -> list:
    import torch

    generator = torch.Generator().manual_seed(rank)
    return [torch.randn(4, 8, generator=generator, dtype=torch.float64)
            for _ in range(count)]


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    counts = given["counts"]
    ddp = DDP(model())
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    steps = []

    def counted(module, args):  # which batch each forward is: the log says where a rank is
        steps.append(len(steps) + 1)
        calls.note(f"phase in your function, step {len(steps)} of its {counts[rank]} "
                   f"batches")

    ddp.module.register_forward_pre_hook(counted)
    with calls.reader():
        returned = solution(ddp, optimizer, batches(rank, counts[rank]))
    result = {"returned": returned, "steps": len(steps),
              "weights": [p.detach().clone() for p in ddp.parameters()]}
    if rank == 0:  # one process, every rank's batches of the shortest rank's steps
        single = model()
        optimizer = torch.optim.SGD(single.parameters(), lr=0.1)
        every = [batches(r, counts[r]) for r in range(world_size)]
        for step in range(min(counts)):
            optimizer.zero_grad()
            single(torch.cat([b[step] for b in every])).pow(2).mean().backward()
            optimizer.step()
        result["single"] = [p.detach().clone() for p in single.parameters()]
    return result


def per_rank(rank: int, result: dict, given: dict) -> str:
    return f"{result['steps']} steps, returned {result['returned']!r}"


def judge(world_size: int, outcome, given: dict) -> list:
    shortest = min(given["counts"])
    steps = {rank: result["steps"] for rank, result in outcome.results.items()}
    if len(set(steps.values())) > 1:
        return [Finding(False, f"the ranks took {steps} steps: they must agree")]
    taken = steps[0]
    if taken != shortest:
        few = "too few" if taken < shortest else "too many"
        return [Finding(False, f"every rank took {taken} steps; the rank with the fewest "
                               f"batches has {shortest}: {few} (an off-by-one in when to "
                               f"stop?)")]
    findings = [Finding(True, f"every rank returned, after {taken} steps: as many as the "
                              f"shortest rank's {shortest} batches")]
    wrong = [rank for rank, result in outcome.results.items()
             if result["returned"] != taken]
    if wrong:
        returned = outcome.results[wrong[0]]["returned"]
        findings.append(Finding(False, f"rank {wrong[0]} returned {returned!r}, not the "
                                       f"number of steps taken, {taken}"))
    first = outcome.results[0]
    worst = max((w - s).abs().max().item() for result in outcome.results.values()
                for w, s in zip(result["weights"], first["single"]))
    if worst > TOLERANCE:
        findings.append(Finding(False, f"the weights are {worst:.1e} from one process's on "
                                       f"every rank's batches of those steps"))
    else:
        findings.append(Finding(True, "every rank's weights equal one process's trained on "
                                      "all the ranks' batches of those steps"))
    return findings


def step_of(where: str):
    found = re.search(r"step (\d+) of its (\d+) batches", where)
    return (int(found.group(1)), int(found.group(2))) if found else None


def explain(world_size: int, outcome, given: dict) -> list:
    counts = given["counts"]
    for rank, error in sorted(outcome.raised.items()):
        if error["type"] in ("IndexError", "StopIteration"):
            return [f"rank {rank} ran past its last batch ({counts[rank]}): stop when the "
                    f"first rank runs out (agree with ReduceOp.MIN), not the last"]
    last = {}
    for rank, lines in outcome.logs.items():
        for line in lines:
            if step_of(line):
                last[rank] = step_of(line)
    stuck = [rank for rank in outcome.waiting if rank in last]
    gone = [rank for rank in outcome.results]
    if stuck and gone:
        rank = stuck[0]
        step, count = last[rank]
        done = outcome.results[gone[0]]["steps"]
        return [f"rank {gone[0]} returned after {done} steps while rank {rank} went on to "
                f"step {step} of its {count}, where DDP's backward waits for every rank: "
                f"agree before each step whether every rank still has a batch"]
    return []
