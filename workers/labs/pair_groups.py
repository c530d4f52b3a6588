"""Lab pair_groups (process_groups): groups of two with new_group, each summing its own.

Rank r starts from 2**r times a few random whole numbers (the same on every rank), so a
sum says exactly which ranks it added up. Ranks 2k and 2k+1 must end with their two values
summed, by an all_reduce in a group of their own that dist.new_group made: a swap with the
partner (isend/irecv), a world-wide all_gather_object or an all_reduce of every rank's
values gets the numbers right and fails here. The checker also compares every rank's
new_group calls: PyTorch requires every rank to make the same calls in the same order,
even for the groups it is not in (each rank names a new group from a count of the groups
it made, so ranks that skip one disagree on every later name; nothing waits in new_group
unless TORCH_DIST_INIT_BARRIER=1 asks for a barrier); with use_local_synchronization=True
(PyTorch 2.1 and later) only a group's members take part, and a rank may make only its own
pair's group.

The contract (labs/pair_groups.py), clause by clause, and what checks each:

- Ranks 2k and 2k+1 both hold their two tensors' sum, in place, and nothing of another
  rank's: starts of 2**r times whole numbers, so a sum names the ranks it added.
- Through dist.new_group and an all_reduce with group=: the groups each rank's all_reduce
  ran in; a swap with the partner or a world-wide collective fails.
- Every rank makes every pair's group, the same calls in the same order, or only its own
  with use_local_synchronization=True and every member making it: each rank's new_group
  calls, compared (dist.new_subgroups(group_size=2) and dist.new_subgroups_by_enumeration
  make them for the reader, and pass).
- An even world size: 2, 4 and 6 ranks.
- Any tensor: float32 at 2 and 6 ranks, float64 at 4, whose values need all of float64's
  digits (a float32 copy on the way loses them); at 6 ranks a transposed view, dense but
  not contiguous (reshape copies it, and a sum written into the copy is lost; gloo sums a
  dense tensor as it lies in memory, the same on every rank).
"""

from __future__ import annotations

import re

from workers.labs.harness import BadInput, Finding, forbidden_finding, how_called, list_of

CHAPTER = "process_groups"
FUNCTION = "pair_sum"
ASKS = "groups of two ranks with new_group, each summing its own pair only"
REREAD = '"The idea" and "What goes wrong: a rank that skips new_group" in the process ' \
    'groups chapter'
PASSED = "sums each pair in its own group"
WORLD_SIZES = (2, 4, 6)  # the page's exercise has 8 ranks
GROUP = True
PRELOAD = ()
TIMEOUT = 6.0
ALLOWED = ("new_group", "all_reduce")


def setup(world_size: int, rng) -> dict:
    if world_size % 2:
        raise BadInput(f"pair_groups needs an even world size, got {world_size}")
    strided = world_size == 6  # transposed, with two rows or more: not contiguous
    count = max(rng.randint(1, 4), 2 if strided else 1)
    return {"factors": [rng.randint(1, 9) for _ in range(count)],
            "dtype": "float64" if world_size == 4 else "float32", "strided": strided}


def start(given: dict):
    """The factors rank r's tensor is 2**r times: whole numbers in float32, and in float64
    times 1 + 2**-40, which float32 cannot hold (sums of them stay exact)."""
    import torch

    dtype = getattr(torch, given["dtype"])
    fine = 1 + 2.0 ** -40 if dtype == torch.float64 else 1.0
    return torch.tensor(given["factors"], dtype=dtype) * fine


def describe(world_size: int, given: dict) -> str:
    view = ", a transposed view" if given.get("strided") else ""
    return f", {world_size // 2} pair{'s' * (world_size > 2)}, {given['dtype']}{view}"


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    import torch

    tensor = start(given) * 2.0 ** rank
    if given.get("strided"):
        tensor = torch.stack([tensor, tensor]).t()  # n rows of 2, columns n apart
    with calls.reader():
        solution(tensor)
    return {"result": tensor.t().flatten() if given.get("strided") else tensor}


def summed(value: float) -> list[int]:
    """The ranks whose 2**r make up ``value``."""
    bits = int(round(value))
    return [r for r in range(bits.bit_length()) if bits >> r & 1]


def group_calls(calls, local: bool = False) -> list:
    return [call.get("ranks") for call in calls
            if call["name"] == "new_group" and call.get("local", False) == local]


def judge(world_size: int, outcome, given: dict) -> list:
    import torch

    every = outcome.all_calls()
    if not any(call["name"] == "new_group" for call in every):
        others = sorted({how_called(call) for call in every})
        used = f" (it used {list_of(others)})" if others else ""
        return [Finding(False, f"no rank made a group with dist.new_group{used}: this lab "
                               f"sums each pair in a group of its own, "
                               f"new_group([2k, 2k+1]), with all_reduce(..., group=)")]
    forbidden = forbidden_finding(outcome, ALLOWED, "this lab sums each pair with "
                                  "all_reduce in the pair's own group, and calls nothing "
                                  "else")
    if forbidden:
        return [forbidden]
    made = {rank: group_calls(outcome.calls(rank)) for rank in outcome.results}
    if len({repr(groups) for groups in made.values()}) > 1:
        return [Finding(False, different_groups(made))]
    factors = start(given).repeat(2 if given.get("strided") else 1)  # both columns
    for rank, result in sorted(outcome.results.items()):
        pair = [rank - rank % 2, rank - rank % 2 + 1]
        got = result["result"] / factors
        if torch.equal(got, torch.full_like(got, 2.0 ** pair[0] + 2.0 ** pair[1])):
            continue
        right = factors * (2.0 ** pair[0] + 2.0 ** pair[1])
        if factors.dtype == torch.float64 and torch.allclose(result["result"], right,
                                                             rtol=1e-6, atol=0):
            return [Finding(False, f"rank {rank} holds its pair's sum to float32's "
                                   f"precision only, not the float64 tensor's own: "
                                   f"all-reduce the tensor itself, not a float32 copy")]
        value = got[0].item()
        if abs(value - round(value)) > 0 or value < 1 or not torch.all(got == got[0]):
            return [Finding(False, f"rank {rank} holds {result['result'].tolist()}, not a "
                                   f"sum of the ranks' values")]
        ranks = summed(value)
        if ranks == [rank] and result.get("unwaited"):
            return [Finding(False, f"rank {rank}'s tensor is unchanged: it never waited "
                                   f"for the Work of its {result['unwaited'][0]}, and the "
                                   f"sum is there only once wait() has returned; call "
                                   f"work.wait() before pair_sum returns")]
        if ranks == [rank]:
            view = " (a transposed view, not contiguous)" if given.get("strided") else ""
            return [Finding(False, f"rank {rank}'s tensor{view} is unchanged: the pair's "
                                   f"sum never reached it (written into a copy, as reshape "
                                   f"or contiguous() make of a tensor that is not "
                                   f"contiguous, or into a new tensor, or not yet waited "
                                   f"for); it must end in the tensor given, in place")]
        if ranks == list(range(world_size)):
            return [Finding(False, f"rank {rank} holds the sum of all {world_size} ranks, "
                                   f"not of its pair: pass group= to all_reduce")]
        return [Finding(False, f"rank {rank} holds the sum of rank{'s' * (len(ranks) > 1)} "
                               f"{list_of(ranks)}: its pair is ranks {pair[0]} and "
                               f"{pair[1]}")]
    for rank, result in sorted(outcome.results.items()):
        pair = [rank - rank % 2, rank - rank % 2 + 1]
        for call in result["calls"]:
            if call["name"] != "all_reduce":
                continue
            if call["group"] is None:
                return [Finding(True, "every rank holds the sum of its pair"),
                        Finding(False, "an all_reduce ran without group=, over every rank "
                                       "(at world size 2 every rank is one pair, by "
                                       "chance): pass group=")]
            if sorted(call["group"]) != pair:
                return [Finding(True, "every rank holds the sum of its pair"),
                        Finding(False, f"rank {rank} all-reduced in the group of ranks "
                                       f"{list_of(call['group'])}: its pair's group is "
                                       f"ranks {pair[0]} and {pair[1]}")]
    local = {rank: group_calls(outcome.calls(rank), local=True) for rank in outcome.results}
    own = sum(1 for groups in local.values() for ranks in groups
              if ranks is not None and len(ranks) == 2)
    said = (f"every rank made the same {len(next(iter(made.values())))} new_group calls, "
            f"in the same order")
    if own:
        said = ("each rank made its own pair's group with use_local_synchronization=True "
                "(only the pair's members take part)")
    return [Finding(True, "every rank holds the sum of its pair, and only of its pair"),
            Finding(True, said)]


def different_groups(made: dict) -> str:
    first = min(made)
    other = next(rank for rank in sorted(made) if made[rank] != made[first])
    return (f"the ranks made different new_group calls: rank {first} "
            f"{shown_groups(made[first])}, rank {other} {shown_groups(made[other])}; "
            f"every rank must call new_group for every group, members or not, in the "
            f"same order (or pass use_local_synchronization=True, and only a "
            f"group's members call it)")


def shown_groups(groups: list) -> str:
    return "new_group(" + "), new_group(".join(map(str, groups)) + ")" if groups else \
        "no new_group"


def explain(world_size: int, outcome, given: dict) -> list:
    """A job that hung or failed: did the ranks make different new_group calls?"""
    made = {}
    for rank, lines in outcome.logs.items():
        made[rank] = [eval_ranks(m.group(1)) for line in lines
                      for m in [re.match(r"enter \d+ new_group\(([^=]*)\)$", line)] if m]
    if len({repr(groups) for groups in made.values()}) > 1:
        return [different_groups(made)]
    local, pattern = {}, r"enter \d+ new_group\((.*), use_local_synchronization"
    for rank, lines in outcome.logs.items():
        local[rank] = [eval_ranks(m.group(1)) for line in lines
                       for m in [re.match(pattern, line)] if m]
    for rank, groups in sorted(local.items()):
        for ranks in groups:
            missing = [r for r in ranks or [] if r in local and ranks not in local[r]]
            if missing:
                return [f"rank {rank} made new_group({ranks}, use_local_synchronization="
                        f"True), which rank {missing[0]} never made: with "
                        f"use_local_synchronization every member of a group must make it"]
    for rank, where in sorted(outcome.waiting.items()):
        group = re.search(r"all_reduce\(.*group \[(\d+), (\d+)\]", where)
        pair = [rank - rank % 2, rank - rank % 2 + 1]
        if group and [int(group.group(1)), int(group.group(2))] != pair:
            return [f"rank {rank} all-reduced in the group of ranks {group.group(1)} and "
                    f"{group.group(2)}: its pair is ranks {pair[0]} and {pair[1]}"]
    return []


def eval_ranks(text: str):
    return [int(r) for r in re.findall(r"\d+", text)] if text != "None" else None
