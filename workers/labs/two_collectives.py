"""Lab two_collectives (collectives): all_reduce from a reduce-scatter and an all-gather.

Every rank starts from a tensor of whole numbers of its own and must end with the sum
dist.all_reduce gives, having called one reduce-scatter and one all-gather and nothing
else: the pair a ring all-reduce is made of, each rank handling 1/N of the tensor. The
tensor has 10 elements, so at world size 3 it must be padded.
"""

from __future__ import annotations

from workers.labs.harness import Finding, all_reduced_in_place, integer_values, list_of

CHAPTER = "collectives"
FUNCTION = "all_reduce_from_two"
ASKS = "all_reduce from one reduce_scatter and one all_gather, any tensor length"
REREAD = '"Every collective, before and after" in the collectives chapter'
PASSED = "is an all-reduce from a reduce-scatter and an all-gather"
WORLD_SIZES = (2, 3, 5)  # 10 elements: 3 does not divide them
GROUP = True
PRELOAD = ()
TIMEOUT = 6.0
NUMEL = 10
SCATTERS = ("reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single")
GATHERS = ("all_gather", "all_gather_into_tensor", "all_gather_single")


def setup(world_size: int) -> dict:
    return {"numel": NUMEL}


def describe(world_size: int, given: dict) -> str:
    return f", {given['numel']} elements"


def start_values(rank: int, numel: int):
    return integer_values(2000 + rank, numel)


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    return all_reduced_in_place(rank, 2000, given["numel"], solution, calls)


def judge(world_size: int, outcome, given: dict) -> list:
    import torch

    n = world_size
    names = [call["name"] for call in outcome.calls(0)]
    others = sorted(set(names) - set(SCATTERS) - set(GATHERS))
    if others == ["broadcast", "reduce"] or others == ["reduce", "broadcast"]:
        return [Finding(False, "called reduce and broadcast: every byte goes through one "
                               "rank, which receives and sends N-1 whole tensors; this lab "
                               "asks for reduce_scatter then all_gather")]
    if others:
        return [Finding(False, f"called {list_of(others)}: this lab asks for one "
                               f"reduce-scatter and one all-gather, and nothing else")]
    scatters = [c for c in outcome.calls(0) if c["name"] in SCATTERS]
    gathers = [c for c in outcome.calls(0) if c["name"] in GATHERS]
    if len(scatters) != 1 or len(gathers) != 1:
        return [Finding(False, f"called a reduce-scatter {len(scatters)} time(s) and an "
                               f"all-gather {len(gathers)} time(s): once each")]
    findings = []
    for rank, result in sorted(outcome.results.items()):
        got, expected = result["result"], result["expected"]
        if torch.equal(got, expected):
            continue
        if torch.equal(got, start_values(rank, given["numel"])):
            findings.append(Finding(False, f"rank {rank}'s tensor is unchanged: write the "
                                           f"result into the tensor given (tensor.copy_); "
                                           f"assigning to the name does not"))
        elif torch.allclose(got * n, expected):
            findings.append(Finding(False, f"rank {rank} holds the mean, not the sum: "
                                           f"all_reduce sums (do not divide by the world "
                                           f"size)"))
        else:
            findings.append(Finding(False, f"rank {rank} holds a wrong sum: which part of "
                                           f"the gathered tensor belongs where?"))
        break
    else:
        findings.append(Finding(True, "every rank holds the sum dist.all_reduce gives"))
    part_bytes = 4 * -(-given["numel"] // n)  # 1/N of the padded tensor
    if gathers[0]["sent"] != part_bytes:
        findings.append(Finding(False, f"the all-gather sent {gathers[0]['sent']} bytes "
                                       f"per rank: each rank's part is 1/N of the padded "
                                       f"tensor, {part_bytes} bytes"))
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
