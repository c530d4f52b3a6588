"""Lab hung_rank (hangs): read the flight recorders of a hung job, name the rank behind.

For each world size the checker starts real jobs that hang, one of each kind the chapter
shows (a skipped collective, two collectives in another order, a rank stuck in its own
Python, a rank whose main thread died, an all_reduce nobody else calls), plus one whose
recorders keep only their last 2 collectives (TORCH_FR_BUFFER_SIZE=2), so that they start
at different numbers. The misbehaving rank is drawn at random from the seed, rank 0
included, except where one rank against one leaves rank 0's call as the rule. Every
job's recorders are read through its ranks' worker servers while it hangs, and the
reader's function gets them, rank by rank, as ``_dump_fr_trace`` gave them. Its answer
must name the ranks the others wait for and the collective the others wait in.
"""

from __future__ import annotations

import copy
import sys
from concurrent.futures import ThreadPoolExecutor

from workers.labs.harness import Finding

CHAPTER = "hangs"
FUNCTION = "find_rank_behind"
ASKS = "read a hung job's flight recorders: the ranks behind, and the collective"
REREAD = '"How the diagnosis works" in the hangs chapter'
PASSED = "names the rank behind and its collective in every hung job"
WORLD_SIZES = (2, 3, 4)  # the page's jobs have 3 ranks
GROUP = False  # the reader's function reads dumps: no process group of its own
PRELOAD = ("torch._dynamo",)
TIMEOUT = 10.0
BUFFER = 2  # the recorders of the last case keep this many collectives

# kind: what the culprit did, the collective the others wait in, and the culprit's own
# call at that number (None: it has none, it is behind)
CASES = {
    "skip": ("skipped an all_reduce, then called barrier", "all_reduce", "barrier"),
    "order": ("called broadcast and all_reduce in the other order", "all_reduce",
              "broadcast"),
    "stuck": ("was stuck in its own Python before an all_reduce", "all_reduce", None),
    "dead": ("had its main thread end before a barrier", "barrier", None),
    "unwaited": ("started an all_reduce that no other rank called, and never waited",
                 "barrier", "all_reduce"),
}
OUT_OF_STEP = [kind for kind, (_, _, own) in CASES.items() if own]


_RECORDED: dict[tuple, dict] = {}


def recorded(kind: str, world_size: int, culprit: int, buffer: int | None) -> dict:
    """The recorders of a real job hung that way, read while it hangs; one job per kind,
    world size, culprit and buffer in a process (checks at other seeds draw the same ones
    again: a hung job takes seconds)."""
    from workers.hangs import collect_dumps

    key = (kind, world_size, culprit, buffer)
    if key not in _RECORDED:
        dumps = collect_dumps(kind, world_size, culprit, fr_buffer=buffer)
        for dump in dumps.values():
            dump.pop("rank", None)  # the book's server adds it: _dump_fr_trace has none
        _RECORDED[key] = dumps
    return copy.deepcopy(_RECORDED[key])


def setup(world_size: int, rng) -> dict:
    """Real hung jobs, their recorders read while they hang, and the right answers."""
    from workers.labs.harness import start_forkserver

    start_forkserver()  # the jobs' ranks come from it, torch._dynamo imported
    culprits = {kind: rng.randrange(world_size) for kind in CASES}
    if world_size == 2:  # one call against one: rank 0's is the rule
        culprits.update({kind: 1 for kind in OUT_OF_STEP})
    else:  # rank 0 misbehaves at least once, out of step
        culprits[rng.choice(OUT_OF_STEP)] = 0
    plan = [(kind, culprits[kind], None) for kind in CASES]
    plan.append(("stuck", 0, BUFFER))  # the last rank is not always the culprit
    rng.shuffle(plan)
    # the jobs hang side by side: each mostly waits, for its start and for its recorders
    # to stand still, so together they take little more than the slowest
    with ThreadPoolExecutor(len(plan)) as pool:
        list(pool.map(lambda case: recorded(case[0], world_size, *case[1:]), plan))
    cases = []
    for kind, culprit, buffer in plan:
        dumps = recorded(kind, world_size, culprit, buffer)
        story, waited_in, own = CASES[kind]
        cases.append({"kind": kind, "culprit": culprit, "buffer": buffer, "dumps": dumps,
                      "story": story, "truth": ([culprit], waited_in), "own": own})
    return {"cases": cases}


def describe(world_size: int, given: dict) -> str:
    kinds = ", ".join(f"{c['kind']} (rank {c['culprit']}"
                      f"{', last 2 kept' if c['buffer'] else ''})" for c in given["cases"])
    return f", {len(given['cases'])} hung jobs: {kinds}"


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    """Rank 0 asks the reader's function about every job; the other ranks wait."""
    if rank != 0:
        return {}
    answers = []
    for case in given["cases"]:
        with calls.reader():
            answers.append(solution(copy.deepcopy(case["dumps"])))
    borrowed = sorted(name for name in sys.modules
                      if name == "workers.hangs" or "flight_recorder" in name)
    return {"answers": answers, "borrowed": borrowed}


def normal(answer) -> tuple[list[int], str] | None:
    """The answer as (sorted ranks, collective without a backend's prefix), or None."""
    try:
        ranks, collective = answer
        return sorted(int(rank) for rank in ranks), str(collective).split(":")[-1]
    except (TypeError, ValueError):
        return None


def judge(world_size: int, outcome, given: dict) -> list:
    result = outcome.results[0]
    if result["borrowed"]:
        return [Finding(False, f"your function imported {result['borrowed'][0]}: the "
                               f"comparison is the lab, write it yourself")]
    findings = []
    for case, answer in zip(given["cases"], result["answers"]):
        truth, got = case["truth"], normal(answer)
        who = f"rank {case['culprit']} {case['story']}"
        if case["buffer"]:
            who += f", and the recorders kept only their last {case['buffer']} collectives"
        if got == (truth[0], truth[1]):
            findings.append(Finding(True, f"{who}: you named rank {truth[0][0]} and "
                                          f"{truth[1]}"))
            continue
        shown = f"{got[0]} and {got[1]!r}" if got else repr(answer)
        findings.append(Finding(False, f"{who}: you answered {shown}, the answer is "
                                       f"{truth[0]} and {truth[1]!r}"
                                       f"{hint(world_size, case, got)}"))
    return findings


def hint(world_size: int, case: dict, got) -> str:
    """What a wrong answer to this job suggests the function does."""
    if got is None:
        return "; return (ranks, collective), a list of ranks and a string"
    ranks, collective = got
    culprits, waited_in = case["truth"]
    others = [rank for rank in range(world_size) if rank not in culprits]
    if case["buffer"] and ranks != culprits and ranks != [world_size - 1]:
        return (f"; these recorders kept only their last {case['buffer']} collectives and "
                f"start at different numbers: match entries by their collective_seq_id, "
                f"not by their place in the list")
    if not ranks:
        return "; you named no rank"
    if ranks == list(range(world_size)):
        return "; you named every rank: the others wait for some of them, not for all"
    if ranks == [world_size - 1] != culprits:
        return "; the rank behind is not always the last one"
    if case["own"] and ranks == others and world_size == 2:
        return "; one call against one: rank 0's call is the rule"
    if case["own"] and ranks == others:
        return ("; you named the majority: the ranks whose call differs from most ranks' "
                "are out of step")
    if ranks == culprits and case["own"] and collective == case["own"]:
        return (f"; {case['own']} is the culprit's own call: name the call the other ranks "
                f"made there, not the culprit's own")
    return ""
