"""Lab zero1 (sharding): a ZeRO-1 optimizer step: Adam state sharded over the ranks.

Every rank trains the same small float64 tower on its own data with the reader's step;
rank 0 also trains it in one process on every rank's data with a whole Adam, which is
what DDP computes. After three steps the weights must equal that to 1e-10 on every rank,
and the Adam state (exp_avg and exp_avg_sq) the ranks hold must add up to one copy: each
rank about 1/N of it, none the whole. The checker finds the optimizers in each rank's
memory (the garbage collector's list of objects): instrumentation, not lesson code.
"""

from __future__ import annotations

from workers.labs.harness import Finding

CHAPTER = "sharding"
FUNCTION = "zero1_optimizer"
ASKS = "a ZeRO-1 step: weights equal DDP's with Adam, Adam state 1/N per rank"
REREAD = '"Part 2: ZeRO-1 and ZeRO-2, by hand" in the sharding chapter'
PASSED = "is ZeRO-1: DDP's weights, 1/N of the Adam state per rank"
WORLD_SIZES = (2, 3)  # the page runs 2 and 4 ranks
GROUP = True
PRELOAD = ("torch._dynamo",)
TIMEOUT = 10.0
STEPS = 3
LR = 0.01
TOLERANCE = 1e-10


def setup(world_size: int) -> dict:
    return {}


def describe(world_size: int, given: dict) -> str:
    return f", {STEPS} Adam steps"


def tower():
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 4)).double()


def inputs(rank: int, step: int):
    import torch

    generator = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(6, 8, generator=generator, dtype=torch.float64)


def adam_state_values() -> int:
    """How many numbers the optimizers in this process hold as state (steps not counted)."""
    import gc

    import torch

    found = [o for o in gc.get_objects() if issubclass(type(o), torch.optim.Optimizer)]
    return sum(value.numel() for optimizer in found for state in optimizer.state.values()
               for key, value in state.items()
               if isinstance(value, torch.Tensor) and key != "step")


def single(world_size: int, scale: float = 1.0):
    """One process, every rank's inputs at once, a whole Adam: DDP's computation.
    ``scale``: the gradients times this (N: summed over ranks instead of averaged)."""
    import torch

    model = tower()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    for step in range(STEPS):
        batch = torch.cat([inputs(rank, step) for rank in range(world_size)])
        optimizer.zero_grad()
        (model(batch).pow(2).mean() * scale).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    model = tower()
    before = adam_state_values()
    with calls.reader():
        step = solution(model, LR)
    if not callable(step):
        raise TypeError(f"zero1_optimizer returned {type(step).__name__}, not a function "
                        f"step()")
    for s in range(STEPS):
        for parameter in model.parameters():
            parameter.grad = None
        model(inputs(rank, s)).pow(2).mean().backward()
        with calls.reader():
            step()
    result = {"weights": [p.detach().clone() for p in model.parameters()],
              "state": adam_state_values() - before,
              "values": sum(p.numel() for p in model.parameters()),
              "tensors": len(list(model.parameters()))}
    if rank == 0:
        result["single"] = single(world_size)
        result["summed"] = single(world_size, scale=world_size)
    return result


def per_rank(rank: int, result: dict, given: dict) -> str:
    return f"Adam state {result['state']} numbers"


def largest_difference(weights, others) -> float:
    return max((a - b).abs().max().item() for a, b in zip(weights, others))


def judge(world_size: int, outcome, given: dict) -> list:
    n = world_size
    results = outcome.results
    first = results[0]
    apart = max(largest_difference(r["weights"], first["weights"])
                for r in results.values())
    if apart > 0:
        return [Finding(False, f"after a step the ranks' weights differ by up to "
                               f"{apart:.1e}: each rank updated only its own shard; "
                               f"all-gather the updated shards so every rank has them all")]
    findings = []
    off = largest_difference(first["weights"], first["single"])
    if off > TOLERANCE:
        if largest_difference(first["weights"], first["summed"]) <= TOLERANCE:
            text = (f"the weights are {off:.1e} from DDP's: they match Adam on gradients "
                    f"summed over the ranks, not averaged: divide by the world size (Adam "
                    f"hides most of the factor, not all of it)")
        else:
            text = (f"after {STEPS} steps the weights are {off:.1e} from DDP's with Adam "
                    f"(one process, every rank's data)")
        return [Finding(False, text)]
    findings.append(Finding(True, f"after {STEPS} Adam steps every rank's weights equal "
                                  f"DDP's to {off:.0e} (float64)"))
    whole = 2 * first["values"]  # exp_avg and exp_avg_sq for every value
    held = {rank: result["state"] for rank, result in results.items()}
    padding = 2 * first["tensors"] * n  # what padding each tensor to N parts may add
    if max(held.values()) >= whole:
        rank = max(held, key=held.get)
        findings.append(Finding(False, f"rank {rank} holds {held[rank]} numbers of Adam "
                                       f"state, the whole {whole} (2 per weight): ZeRO-1 "
                                       f"keeps about 1/N on each rank, {whole // n}"))
    elif sum(held.values()) == 0:
        findings.append(Finding(False, "no rank holds Adam state: build a torch.optim.Adam "
                                       "over this rank's shard"))
    elif sum(held.values()) > whole + padding:
        findings.append(Finding(False, f"the ranks hold {sum(held.values())} numbers of "
                                       f"Adam state together, more than one copy "
                                       f"({whole}): a value's state lives on one rank"))
    else:
        shares = ", ".join(f"{held[r]}" for r in sorted(held))
        findings.append(Finding(True, f"Adam state per rank: {shares} numbers, of "
                                      f"{whole} for the whole model (1/N: "
                                      f"{whole / n:.0f})"))
    return findings
