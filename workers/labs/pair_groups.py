"""Lab pair_groups (process_groups): groups of two with new_group, each summing its own.

Rank r starts from 2**r, so a sum says exactly which ranks it added up. Ranks 2k and
2k+1 must end with 2**(2k) + 2**(2k+1). The checker also compares every rank's
new_group calls: new_group is collective, so every rank makes the same calls in the same
order, even for the groups it is not in.
"""

from __future__ import annotations

import re

from workers.labs.harness import BadInput, Finding, list_of

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


def setup(world_size: int) -> dict:
    if world_size % 2:
        raise BadInput(f"pair_groups needs an even world size, got {world_size}")
    return {}


def describe(world_size: int, given: dict) -> str:
    return f", {world_size // 2} pair{'s' * (world_size > 2)}"


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    import torch

    tensor = torch.tensor([2.0 ** rank])
    with calls.reader():
        solution(tensor)
    return {"result": tensor.item()}


def summed(value: float) -> list[int]:
    """The ranks whose 2**r make up ``value``."""
    bits = int(round(value))
    return [r for r in range(bits.bit_length()) if bits >> r & 1]


def group_calls(calls) -> list:
    return [call.get("ranks") for call in calls if call["name"] == "new_group"]


def judge(world_size: int, outcome, given: dict) -> list:
    made = {rank: group_calls(outcome.calls(rank)) for rank in outcome.results}
    if len({repr(groups) for groups in made.values()}) > 1:
        return [Finding(False, different_groups(made))]
    for rank, result in sorted(outcome.results.items()):
        pair = [rank - rank % 2, rank - rank % 2 + 1]
        got = result["result"]
        if got == 2.0 ** pair[0] + 2.0 ** pair[1]:
            continue
        if abs(got - round(got)) > 0 or got < 1:
            return [Finding(False, f"rank {rank} holds {got}, not a sum of the ranks' "
                                   f"values")]
        ranks = summed(got)
        if ranks == list(range(world_size)):
            return [Finding(False, f"rank {rank} holds the sum of all {world_size} ranks, "
                                   f"not of its pair: pass group= to all_reduce")]
        return [Finding(False, f"rank {rank} holds the sum of rank{'s' * (len(ranks) > 1)} "
                               f"{list_of(ranks)}: its pair is ranks {pair[0]} and "
                               f"{pair[1]}")]
    reduces = [c for c in outcome.all_calls() if c["name"] == "all_reduce"]
    if any(c["group"] is None for c in reduces):
        return [Finding(True, "every rank holds the sum of its pair"),
                Finding(False, "an all_reduce ran without group=, over every rank (at "
                               "world size 2 every rank is one pair, by chance): pass "
                               "group=")]
    return [Finding(True, "every rank holds the sum of its pair, 2**(2k) + 2**(2k+1)"),
            Finding(True, f"every rank made the same {len(next(iter(made.values())))} "
                          f"new_group calls, in the same order")]


def different_groups(made: dict) -> str:
    first = min(made)
    other = next(rank for rank in sorted(made) if made[rank] != made[first])
    return (f"the ranks made different new_group calls: rank {first} "
            f"{shown_groups(made[first])}, rank {other} {shown_groups(made[other])}; "
            f"new_group is collective: every rank calls it for every group, members or "
            f"not, in the same order")


def shown_groups(groups: list) -> str:
    return "new_group(" + "), new_group(".join(map(str, groups)) + ")" if groups else \
        "no new_group"


def explain(world_size: int, outcome, given: dict) -> list:
    """A job that hung or failed: did the ranks make different new_group calls?"""
    made = {}
    for rank, lines in outcome.logs.items():
        made[rank] = [eval_ranks(m.group(1)) for line in lines
                      for m in [re.match(r"enter \d+ new_group\((.*)\)$", line)] if m]
    if len({repr(groups) for groups in made.values()}) > 1:
        return [different_groups(made)]
    for rank, where in sorted(outcome.waiting.items()):
        group = re.search(r"all_reduce\(.*group \[(\d+), (\d+)\]", where)
        pair = [rank - rank % 2, rank - rank % 2 + 1]
        if group and [int(group.group(1)), int(group.group(2))] != pair:
            return [f"rank {rank} all-reduced in the group of ranks {group.group(1)} and "
                    f"{group.group(2)}: its pair is ranks {pair[0]} and {pair[1]}"]
    return []


def eval_ranks(text: str):
    return [int(r) for r in re.findall(r"\d+", text)] if text != "None" else None
