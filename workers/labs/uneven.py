"""Lab uneven (failures): ranks with different numbers of batches agree when to stop.

Every rank trains a DDP model on its own list of batches, of a length that differs from
rank to rank: random, from the seed, with the shortest rank chosen at random, and at 3
ranks one rank with no batch at all. DDP's backward all-reduces on every rank, so a rank
that stops alone leaves the others waiting in backward forever. The reader's loop must
make every rank stop after the same number of steps, as many as the shortest list has,
taking its batches in order (a hook sees each forward pass); rank 0 checks the weights
against one process that trains on every rank's batches of those steps, which is what
DDP computes. Join (model.join(), or Join([...])) lets every rank use all of its batches
instead, and is named as the mistake here, as is any collective but all_reduce.

The contract (labs/uneven.py), clause by clause, and what checks each:

- Every rank takes as many steps as the rank with the fewest batches, none included: batch
  counts drawn per rank, a rank with no batch at 3 ranks; a forward hook sees each step.
- Batches in order from the first: which batch each forward was.
- Every rank returns that number, an int: the value returned, and its type.
- The weights DDP computes: one process trained on every rank's batches of those steps.
- One all_reduce of a flag before each step, and one more to stop (MIN of "I have a
  batch", MAX of "I am out", or any reduction that agrees, such as a SUM compared with the
  world size): each rank's all_reduce calls, counted; the step counts at 2 and 3 ranks
  judge the reduction; agreeing through another channel fails.
- No Join, no other collective: Join's constructor is watched, other calls fail.
- async_op=True is waited for before the flag is read: every Work followed; and with
  wait(), not a loop of is_completed() (its answers of False are counted).
"""

from __future__ import annotations

import re

from workers.labs.harness import Finding, forbidden_finding, list_of, wait_findings
from workers.verdicts import counted

CHAPTER = "failures"
FUNCTION = "train_uneven"
ASKS = "ranks with different batch counts agree when to stop: no hang, same steps"
REREAD = '"Uneven inputs" in the failures chapter'
PASSED = "stops every rank together, after the shortest rank's batches"
WORLD_SIZES = (2, 3)  # the page runs 2 ranks
GROUP = True
PRELOAD = ("torch._dynamo", "torch.distributed.algorithms.join")
TIMEOUT = 8.0
TOLERANCE = 1e-10


def setup(world_size: int, rng) -> dict:
    counts = [rng.randint(1, 6) for _ in range(world_size)]
    while world_size > 1 and len(set(counts)) == 1:
        counts[rng.randrange(world_size)] = rng.randint(1, 6)
    if world_size >= 3:  # a rank with nothing to train on
        counts[rng.randrange(world_size)] = 0
    return {"counts": counts, "seed": rng.randrange(1_000_000)}


def describe(world_size: int, given: dict) -> str:
    return f", batches per rank {given['counts']}"


def model(seed: int):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Linear(8, 1).double()


def batches(seed: int, rank: int, count: int) -> list:
    import torch

    generator = torch.Generator().manual_seed(seed + rank)
    return [torch.randn(4, 8, generator=generator, dtype=torch.float64)
            for _ in range(count)]


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    import torch
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP

    counts, seed = given["counts"], given["seed"]
    ddp = DDP(model(seed))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    mine = batches(seed, rank, counts[rank])
    known = list(mine)  # the reader's code may take batches out of the list it is given
    used, joined = [], []

    def counted(module, args):  # which batch each forward is: the log says where a rank is
        inputs = args[0] if args else None
        index = next((i for i, batch in enumerate(known) if inputs is batch or (
            isinstance(inputs, torch.Tensor) and inputs.shape == batch.shape
            and torch.equal(inputs, batch))), -1)
        used.append(index)
        calls.note(f"phase in your function, step {len(used)} of its {counts[rank]} "
                   f"batches")

    backward, join_init = torch.Tensor.backward, Join.__init__

    def logged_backward(tensor, *args, **kwargs):  # DDP's backward waits for every rank
        with calls.logged(f"DDP's backward of step {len(used)}, whose all-reduce waits "
                          f"for every rank"):
            return backward(tensor, *args, **kwargs)

    def noted_join(self, *args, **kwargs):
        joined.append(True)
        return join_init(self, *args, **kwargs)

    ddp.module.register_forward_pre_hook(counted)
    torch.Tensor.backward, Join.__init__ = logged_backward, noted_join
    try:
        with calls.reader():
            returned = solution(ddp, optimizer, mine)
    finally:
        torch.Tensor.backward, Join.__init__ = backward, join_init
    result = {"returned": returned, "steps": len(used), "used": used,
              "joined": bool(joined),
              "weights": [p.detach().clone() for p in ddp.parameters()]}
    if rank == 0:  # one process, every rank's batches of the shortest rank's steps
        result["single"] = one_process(seed, counts, world_size)
        result["mistaken"] = {mistake: one_process(seed, counts, world_size, mistake)
                              for mistake in MISTAKES}
    return result


MISTAKES = {  # what one process computes with the mistake: the weights name it
    "sum": "the loss is summed over the batch: use .pow(2).mean(), as the lab says (a sum "
           "scales every gradient by the batch's size)",
    "accumulate": "the gradients add up from step to step: call optimizer.zero_grad() "
                  "before each step's backward",
}


def one_process(seed: int, counts: list, world_size: int, mistake: str = "") -> list:
    """The weights one process gets on every rank's batches of the shortest rank's steps
    (DDP's average is the mean over the ranks' equal batches); with ``mistake``, the weights
    a loop with that mistake gives."""
    import torch

    single = model(seed)
    optimizer = torch.optim.SGD(single.parameters(), lr=0.1)
    every = [batches(seed, r, counts[r]) for r in range(world_size)]
    for step in range(min(counts)):
        if mistake != "accumulate":
            optimizer.zero_grad()
        out = single(torch.cat([b[step] for b in every])).pow(2)
        # DDP averages each rank's sum over its own batch: a mean of the ranks' sums
        (out.sum() / world_size if mistake == "sum" else out.mean()).backward()
        optimizer.step()
    return [p.detach().clone() for p in single.parameters()]


def per_rank(rank: int, result: dict, given: dict) -> str:
    return f"{counted(result['steps'], 'step')}, returned {result['returned']!r}"


def judge(world_size: int, outcome, given: dict) -> list:
    shortest = min(given["counts"])
    joined = [rank for rank, result in sorted(outcome.results.items()) if result["joined"]]
    if joined:
        return [Finding(False, f"rank {joined[0]} used Join (model.join(), or "
                               f"Join([...])): Join lets every rank go on to the end of "
                               f"its own batches, shadowing the others' all-reduces; this "
                               f"lab stops every "
                               f"rank at the shortest rank's {shortest}, agreeing with one "
                               f"all_reduce per step")]
    forbidden = forbidden_finding(outcome, ("all_reduce",), "this lab agrees with "
                                  "all_reduce (ReduceOp.MIN of a flag), nothing else")
    if forbidden:
        return [forbidden]
    waits = [finding for finding in wait_findings(outcome) if not finding.held]
    if waits:
        return waits
    steps = {rank: result["steps"] for rank, result in outcome.results.items()}
    if len(set(steps.values())) > 1:
        return [Finding(False, f"the ranks took {steps} steps: they must agree")]
    taken = steps[0]
    if taken != shortest:
        few = "too few" if taken < shortest else "too many"
        return [Finding(False, f"every rank took {counted(taken, 'step')}; the rank with "
                               f"the fewest "
                               f"batches has {shortest}: {few} (an off-by-one in when to "
                               f"stop?)")]
    for rank, result in sorted(outcome.results.items()):
        used = result["used"]
        runs = [i for p, i in enumerate(used) if p == 0 or used[p - 1] != i]
        if runs != list(range(taken)):
            named = [str(i) if i >= 0 else "a tensor that is none of them" for i in runs]
            return [Finding(False, f"rank {rank} trained on its batches {list_of(named)}, "
                                   f"in that order: each step takes the next batch, from "
                                   f"the first")]
    agreed = agreement_finding(outcome, taken)
    if agreed:
        return [agreed]
    steps, batches = counted(taken, "step"), counted(shortest, "batch")
    findings = [Finding(True, f"every rank returned, after {steps}: as many as the "
                              f"shortest rank's {batches}, agreeing before each step with "
                              "one all_reduce")]
    wrong = [rank for rank, result in outcome.results.items()
             if result["returned"] != taken]
    if wrong:
        returned = outcome.results[wrong[0]]["returned"]
        findings.append(Finding(False, f"rank {wrong[0]} returned {returned!r}, not the "
                                       f"number of steps taken, {taken}"))
    else:
        kinds = {rank: type(result["returned"]) for rank, result in outcome.results.items()
                 if type(result["returned"]) is not int}
        if kinds:
            rank, kind = min(kinds.items())
            findings.append(Finding(False, f"rank {rank} returned a {kind.__name__} equal "
                                           f"to {taken}, not an int: return a number "
                                           f"(int(flag.item()) or a count of your own)"))
    first = outcome.results[0]
    worst = max((w - s).abs().max().item() for result in outcome.results.values()
                for w, s in zip(result["weights"], first["single"]))
    apart = max((w - v).abs().max().item() for result in outcome.results.values()
                for w, v in zip(result["weights"], first["weights"]))
    mistaken = [text for mistake, text in MISTAKES.items()
                if max((w - s).abs().max().item() for w, s in
                       zip(first["weights"], first["mistaken"][mistake])) <= TOLERANCE]
    if worst > TOLERANCE and apart > TOLERANCE:
        findings.append(Finding(False, f"the ranks' weights differ by up to {apart:.1e}: "
                                       f"their gradients were never averaged; call the DDP "
                                       f"model, model(batch), not model.module, whose "
                                       f"forward skips DDP's all-reduce in backward"))
    elif worst > TOLERANCE and mistaken:
        findings.append(Finding(False, f"the weights are {worst:.1e} from one process's on "
                                       f"every rank's batches of those steps, and equal "
                                       f"what a loop gets where {mistaken[0]}"))
    elif worst > TOLERANCE:
        findings.append(Finding(False, f"the weights are {worst:.1e} from one process's on "
                                       f"every rank's batches of those steps"))
    else:
        findings.append(Finding(True, "every rank's weights equal one process's trained on "
                                      "all the ranks' batches of those steps"))
    return findings


def agreement_finding(outcome, taken: int) -> Finding | None:
    """The agreement the contract asks for, made: before each of the ``taken`` steps, and
    once more to stop, one all_reduce of a flag on every rank (ReduceOp.MIN in the
    contract's "How", or whatever reduction agrees: the step counts judged it)."""
    for rank, result in sorted(outcome.results.items()):
        reduces = [call for call in result["calls"] if call["name"] == "all_reduce"]
        if not reduces:
            return Finding(False, f"rank {rank} never called all_reduce: the ranks must "
                                  f"agree through one all_reduce of a flag (ReduceOp.MIN) "
                                  f"before each step, not through another channel")
        # MIN of "I have a batch", MAX of "I am out", a SUM compared with the world
        # size: any reduction that agrees is the reader's choice, and the step counts at
        # 2 and 3 ranks (a rank with none at 3) have already judged it
        if len(reduces) != taken + 1:
            return Finding(False, f"rank {rank} called all_reduce {len(reduces)} times "
                                  f"for {counted(taken, 'step')}: agree once before each "
                                  "step, and "
                                  f"once more to learn that it is time to stop "
                                  f"({taken + 1} in all)")
    return None


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
    waiting_agree = [rank for rank, where in outcome.waiting.items()
                     if where.startswith("waiting in all_reduce")]
    if gone and waiting_agree and not stuck:
        rank = gone[0]
        return [f"rank {rank} returned ({counts[rank]} batches, "
                f"{outcome.results[rank]['steps']} steps) without joining the all_reduce "
                f"the other ranks were waiting in: every rank takes part in every "
                f"agreement, the last one that says stop too"]
    if stuck and gone:
        rank = stuck[0]
        step, count = last[rank]
        done = outcome.results[gone[0]]["steps"]
        return [f"rank {gone[0]} returned after {counted(done, 'step')} while rank {rank} "
                "went on to "
                f"step {step} of its {count}, where DDP's backward waits for every rank: "
                f"agree before each step whether every rank still has a batch"]
    return []
