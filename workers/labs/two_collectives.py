"""Lab two_collectives (collectives): all_reduce from a reduce-scatter and an all-gather.

Every rank starts from a tensor of whole numbers of its own and must end with the sum
dist.all_reduce gives, having called one reduce-scatter and one all-gather and nothing
else, however it reached them: the pair a ring all-reduce is made of, each rank handling
1/N of the tensor. Any of their names counts: reduce_scatter_tensor or
reduce_scatter_single (the flat forms' names from PyTorch 2.13), all_gather_into_tensor or
all_gather_single, the list forms, and the same calls reached through the process-group
object or the functional collectives. The length is random: one the world size does not
divide (so the tensor must be padded) at 2 ranks, one shorter than the world size at 3 (a
part is all padding), a multiple of it at 5 (so it must not be padded).

The contract (labs/two_collectives.py), clause by clause, and what checks each:

- Every rank's tensor holds the sum, exactly, in place: compared with dist.all_reduce of
  the same start, read through a view of the tensor taken before the call (rebinding
  ``tensor.data`` fails, writing beside the tensor fails).
- Any length: one N does not divide at 2 ranks (padding needed; an odd length whose half
  rounds down, 4m + 1, so a share rounded, or floored, instead of rounded up leaves the
  last element out), one or two elements at 3 (shorter than N: a whole part of padding), a
  multiple of N at 5 (no padding).
- One reduce-scatter and one all-gather, by any of their names or roads; nothing else.
- Each rank's part is 1/N of the padded tensor: the all-gather's bytes.
- With async_op=True, wait() before the result is used: every Work followed.
"""

from __future__ import annotations

from workers.labs.harness import (
    FAMILIES,
    Finding,
    all_reduced_in_place,
    forbidden_finding,
    in_place_finding,
    integer_values,
    wait_findings,
)

CHAPTER = "collectives"
FUNCTION = "all_reduce_from_two"
ASKS = "all_reduce from one reduce_scatter and one all_gather, any tensor length"
REREAD = '"Every collective, before and after" in the collectives chapter'
PASSED = "is an all-reduce from a reduce-scatter and an all-gather"
WORLD_SIZES = (2, 3, 5)
GROUP = True
PRELOAD = ()
TIMEOUT = 6.0
SCATTERS = FAMILIES["reduce_scatter"]
GATHERS = FAMILIES["all_gather"]


def setup(world_size: int, rng) -> dict:
    if world_size % 5 == 0:  # a length that divides: padding it would send too much
        numel = world_size * rng.randint(2, 8)
    elif world_size == 3:  # shorter than N: a part is all padding, and some parts hold none
        numel = rng.choice([1, 2])
    else:
        # at 2 ranks 4m + 1: round(numel / 2) rounds half to even, down, like numel // 2
        numel = rng.choice([n for n in range(7, 41) if n % world_size and
                            (world_size != 2 or n % 4 == 1)])
    return {"numel": numel, "seed": rng.randrange(1_000_000)}


def describe(world_size: int, given: dict) -> str:
    return f", {given['numel']} element{'s' * (given['numel'] != 1)}"


def start_values(rank: int, given: dict):
    return integer_values(given["seed"] + rank, given["numel"])


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    return all_reduced_in_place(rank, given["seed"], given["numel"], solution, calls)


def judge(world_size: int, outcome, given: dict) -> list:
    import torch

    n = world_size
    names = {call["name"] for call in outcome.all_calls()}
    if {"reduce", "broadcast"} <= names:
        return [Finding(False, "called reduce and broadcast: the whole sum gathers on "
                               "one rank before the broadcast, and each collective moves "
                               "about a whole tensor per rank; this lab asks for "
                               "reduce_scatter then all_gather (2(N-1)/N per rank in all)")]
    forbidden = forbidden_finding(outcome, (*SCATTERS, *GATHERS),
                                  "this lab builds all_reduce from one reduce-scatter and "
                                  "one all-gather, and calls nothing else")
    if forbidden:
        return [forbidden]
    for rank, result in sorted(outcome.results.items()):
        scatters = [c for c in result["calls"] if c["name"] in SCATTERS]
        gathers = [c for c in result["calls"] if c["name"] in GATHERS]
        if len(scatters) != 1 or len(gathers) != 1:
            return [Finding(False, f"rank {rank} called a reduce-scatter {len(scatters)} "
                                   f"time(s) and an all-gather {len(gathers)} time(s): "
                                   f"once each")]
    findings = [finding for finding in wait_findings(outcome) if not finding.held]
    if findings:
        return findings
    for rank, result in sorted(outcome.results.items()):
        got, expected = result["result"], result["expected"]
        placed = in_place_finding(rank, result, start_values(rank, given))
        if placed:
            findings.append(placed)
        elif torch.equal(got, expected):
            continue
        elif torch.allclose(got * n, expected):
            findings.append(Finding(False, f"rank {rank} holds the mean, not the sum: "
                                           f"all_reduce sums (do not divide by the world "
                                           f"size)"))
        else:
            start = start_values(rank, given).to(got.dtype)
            wrong = (got != expected).nonzero().flatten().tolist()
            tail = wrong == list(range(wrong[0], len(got))) and torch.equal(
                got[wrong[0]:], start[wrong[0]:])
            findings.append(Finding(False, (
                f"rank {rank}'s last {len(wrong)} element(s) kept their start values: "
                f"the padded tensor was shorter than the tensor; each part is "
                f"ceil(length / N) elements") if tail else (
                f"rank {rank} holds a wrong sum: which part of the gathered tensor "
                f"belongs where?")))
        break
    else:
        findings.append(Finding(True, "every rank holds the sum dist.all_reduce gives"))
    gathers = [c for c in outcome.calls(0) if c["name"] in GATHERS]
    part_bytes = 4 * -(-given["numel"] // n)  # 1/N of the padded tensor
    if gathers[0]["sent"] != part_bytes:
        extra = (f": {given['numel']} elements already divide by {n}, so pad by "
                 f"(-length) % N, which is 0 here" if given["numel"] % n == 0 else "")
        findings.append(Finding(False, f"the all-gather sent {gathers[0]['sent']} bytes "
                                       f"per rank: each rank's part is 1/N of the padded "
                                       f"tensor, {part_bytes} bytes{extra}"))
    else:
        findings.append(Finding(True, "one reduce-scatter, then one all-gather of 1/N of "
                                      "the tensor per rank"))
    return findings


def explain(world_size: int, outcome, given: dict) -> list:
    if outcome.raised and given["numel"] % world_size:
        return [f"{given['numel']} elements do not divide by {world_size}: pad the tensor "
                f"with zeros to a multiple of the world size, and drop the padding at the "
                f"end"]
    return []
