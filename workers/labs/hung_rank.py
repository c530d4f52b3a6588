"""Lab hung_rank (hangs): read the flight recorders of a hung job, name the rank behind.

The contract (labs/hung_rank.py), clause by clause, and the jobs that check each:

- Ranks with no entry at the first differing number are behind: the "stuck", "dead" and
  "stuck_first" jobs; and they alone are named where, at that number, another rank called
  something else: at 4 ranks one rank is stuck before an all_reduce that another rank
  replaced with a barrier, twice: the odd rank is once the lowest rank with an entry
  there and once the highest, so the collective named must be the majority's, not the
  call of the rank at either end.
- A recorder may be empty, its rank having reached no collective: "stuck_first", whose
  culprits stall before their first.
- Several ranks may be behind or out of step, and all are named: "stuck_first" has two
  culprits from 3 ranks on, and the skip of another collective two at 4 ranks.
- Out of step: the ranks whose call differs from most ranks' call: "skip", "order",
  "unwaited", and the skip of another collective.
- A tie makes the call of the lowest rank among the tied calls the rule: rank 0's in every
  out-of-step job at 2 ranks and the skip with two culprits at 4; and at 4, the recorders
  of a 5-rank job where rank 0 calls all_reduce, two ranks barrier and two broadcast, so
  the rule is the call of the lowest rank among those four.
- The collective is the others' call, without the backend's prefix: every job, and one
  whose entries are named as an nccl job names them ("nccl:all_reduce"); between
  them they wait in all_reduce, barrier, broadcast, gather at 2 ranks (stripping "gloo:"
  with str.lstrip leaves "ather"), and one drawn among all_gather, scatter, reduce,
  broadcast and all_to_all at 3 and 4.
- Entries are matched by number, not by place, and the oldest may be gone: a job whose
  recorders keep only their last 2 collectives.
- "retired" says that a rank's call finished there, not that the rank is in step: a
  skipped gather, scatter or broadcast, which the non-root ranks retire and go past; and
  the nccl-named job, whose ranks all retired their different calls at the number that
  differs (nccl can finish two calls of one size; gloo refuses them) and hang at the next
  number, unretired, in the two calls the other way round (which names the other call).
- The collective is the others' call at that number, not their last: at 4 ranks one rank
  skips a gather, scatter or broadcast, and two of the three waiting ranks go on to the
  barrier after it; at 3 ranks rank 1 is stuck before a broadcast from rank 2, which rank
  0 finishes without it, going on to wait in an all_reduce.
- Any order of the dict's ranks: every job's dumps come in an order drawn from the seed,
  never sorted by rank.
- The standard library only, not workers.hangs nor torch's flight_recorder: the modules
  imported while the function ran.

For each world size the checker starts real jobs that hang, one of each kind the chapter
shows (a skipped collective, two collectives in another order, a rank stuck in its own
Python, a rank whose main thread died, an all_reduce nobody else calls), one whose recorders
keep only their last 2 collectives (TORCH_FR_BUFFER_SIZE=2), so that they start at different
numbers, and two shapes the chapter does not run (workers.hangs' lab shapes): ranks stuck
before their first collective, and ranks that skip a collective drawn from the seed. The
misbehaving ranks are drawn at random from the seed, rank 0 included, except where one call
against one, or a tie, leaves rank 0's call as the rule. Every job's recorders are read
through its ranks' worker servers while it hangs, and the reader's function gets them, rank
by rank, as ``_dump_fr_trace`` gave them. Its answer must name the ranks the others wait
for and the collective the others wait in, as the recorder names it without its prefix.
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
# the lab's own shapes (workers.hangs.lab_kind): several culprits, empty recorders, and a
# skipped collective drawn among every one the recorder names
STUCK_FIRST = ("was stuck in its own Python before its first collective", "all_reduce",
               None)
STUCK_FIRST_MANY = "were stuck in their own Python before their first collective"
SKIPPED = ("all_gather", "gather", "scatter", "reduce", "broadcast", "all_to_all")


def story(kind: str) -> tuple:
    """What the culprits did, the collective the others wait in, and the culprits' own
    call at that number (None: they have none, they are behind)."""
    if kind in CASES:
        return CASES[kind]
    if kind == "stuck_first":
        return STUCK_FIRST
    if kind == "behind_and_odd":
        return ("was stuck in its own Python before an all_reduce", "all_reduce", None)
    if kind == "tie":
        return ("", "", None)  # told by tie_story
    if kind == "stuck_before":
        return ("was stuck in its own Python before a broadcast from rank 2, which rank 0 "
                "receives and finishes without it, going on to wait in an all_reduce",
                "broadcast", None)
    op = kind.partition(":")[2]
    return (f"skipped one {op}, then called barrier", op, "barrier")


_RECORDED: dict[tuple, dict] = {}
TIE_SIZE = 5  # the tie job's ranks: rank 0's call, and two against two without it


def recorded(kind: str, world_size: int, culprits: tuple, buffer: int | None) -> dict:
    """The recorders of a real job hung that way, read while it hangs; one job per kind,
    world size, culprits and buffer in a process (checks at other seeds draw the same ones
    again: a hung job takes seconds)."""
    from workers.hangs import collect_dumps

    key = (kind, world_size, culprits, buffer)
    world_size = TIE_SIZE if kind == "tie" else world_size
    if key not in _RECORDED:
        # the chapter's kinds have one culprit; the lab's shapes take several
        culprit = culprits[0] if kind in CASES else culprits
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
    plan = [(kind, (culprits[kind],), None) for kind in CASES]
    plan.append(("stuck", (0,), BUFFER))  # the last rank is not always the culprit
    # ranks stuck before their first collective: empty recorders, two of them from 3 ranks
    behind = rng.sample(range(world_size), 1 if world_size == 2 else 2)
    plan.append(("stuck_first", tuple(sorted(behind)), None))
    # a skipped collective of another kind: one culprit against the majority, two against
    # two at 4 ranks (a tie: rank 0's call is the rule), rank 1 against rank 0 at 2
    # at 2 ranks always gather, whose name begins with letters of "gloo:" (stripping the
    # prefix as a set of characters, with str.lstrip, leaves "ather"); drawn from the rest
    # at 3 and 4
    op = "gather" if world_size == 2 else rng.choice([o for o in SKIPPED if o != "gather"])
    if world_size == 2:
        skippers = (1,)
    elif world_size == 4:
        skippers = tuple(sorted(rng.sample(range(1, 4), 2)))
    else:
        skippers = (rng.randrange(world_size),)
    plan.append((f"skip:{op}", skippers, None))
    if world_size == 3:
        # rank 1 behind at a broadcast from rank 2: rank 0, which only receives, finishes
        # it and waits in the next collective, so its last call is not the answer
        plan.append(("stuck_before", (1,), None))
    if world_size == 4:
        # one rank skips a rooted collective: the root waits in it, and the other two
        # retire it and go on to the barrier, so most waiting ranks' last call is not
        # the one at the first differing number
        rooted = rng.choice(["gather", "scatter", "broadcast"])
        plan.append((f"skip:{rooted}", (rng.randrange(1, 4),), None))
        # one rank behind and one out of step at the same number: only the first is named,
        # and the collective is the majority's: twice, the odd rank once the lowest rank
        # that has an entry there and once the highest (so that neither end's call passes)
        for end in (0, -1):
            late = rng.randrange(world_size)
            odd = [rank for rank in range(world_size) if rank != late][end]
            plan.append(("behind_and_odd", (late, odd), None))
        # two calls tie without rank 0's: the two ranks that call barrier
        plan.append(("tie", tuple(sorted(rng.sample(range(1, TIE_SIZE), 2))), None))
    rng.shuffle(plan)
    # the jobs hang side by side: each mostly waits, for its start and for its recorders
    # to stand still, so together they take little more than the slowest
    with ThreadPoolExecutor(len(plan)) as pool:
        list(pool.map(lambda case: recorded(case[0], world_size, *case[1:]), plan))
    cases = []
    for kind, culprits, buffer in plan:
        dumps = recorded(kind, world_size, culprits, buffer)
        told, waited_in, own = story(kind)
        if kind == "stuck_first" and len(culprits) > 1:
            told = STUCK_FIRST_MANY
        if kind == "behind_and_odd":
            told += f", in whose place rank {culprits[1]} called barrier"
            culprits = culprits[:1]  # the rank behind, alone
        if kind == "tie":
            culprits, waited_in, told = tie_story(culprits)
        cases.append({"kind": kind, "culprits": list(culprits), "buffer": buffer,
                      "dumps": dumps, "story": told, "truth": (list(culprits), waited_in),
                      "own": own})
    # the prefix is the backend's: one job's recorders named as an nccl job's name its
    # calls ("nccl:all_reduce"), the rest of each entry as gloo wrote it
    nccl = next(case for case in cases if case["kind"] == "order")
    for dump in nccl["dumps"].values():
        for entry in dump["entries"]:
            entry["profiling_name"] = "nccl:" + entry["profiling_name"].split(":", 1)[-1]
    # and as nccl can leave them: nccl may finish two different calls of one size (with
    # wrong values), where gloo refuses them, so every rank's entry at the first number
    # that differs is retired, and the job hangs later
    held = set.intersection(*[{e["collective_seq_id"] for e in dump["entries"]}
                              for dump in nccl["dumps"].values()])
    first = min(seq for seq in held if len({
        e["profiling_name"] for dump in nccl["dumps"].values() for e in dump["entries"]
        if e["collective_seq_id"] == seq}) > 1)
    # the ranks then go on to their next calls, the two collectives the other way round,
    # and hang there: so the number after the first that differs is in every recorder,
    # unretired, with the other answer (a search that starts at the oldest unretired
    # number names the wrong collective)
    calls = {rank: next(e for e in dump["entries"] if e["collective_seq_id"] == first)
             for rank, dump in nccl["dumps"].items()}
    odd = set(nccl["culprits"])
    theirs = next(e["profiling_name"] for rank, e in calls.items() if rank in odd)
    ours = next(e["profiling_name"] for rank, e in calls.items() if rank not in odd)
    for rank, dump in nccl["dumps"].items():
        entry = calls[rank]
        after = copy.deepcopy(entry)
        after.update(collective_seq_id=first + 1, record_id=entry["record_id"] + 1,
                     profiling_name=ours if rank in odd else theirs)
        entry.update(retired=True, state="completed")
        if not any(e["collective_seq_id"] == first + 1 for e in dump["entries"]):
            dump["entries"].insert(dump["entries"].index(entry) + 1, after)
    nccl["hangs_later"] = True
    nccl["story"] += (' (its calls named as nccl names them, "nccl:all_reduce", and both '
                      'calls at that number finished, as nccl can let them, the ranks '
                      'hanging at the next number in the calls the other way round)')
    # a dict promises no order: every job's dumps come in an order drawn from the seed,
    # never by rank (at 2 ranks, rank 1 first)
    for case in cases:
        order = list(case["dumps"])
        while order == sorted(order):
            rng.shuffle(order)
        case["dumps"] = {rank: case["dumps"][rank] for rank in order}
    return {"cases": cases}


def tie_story(barrier: tuple) -> tuple:
    """The tie job's answer: the ranks out of step, the rule's call, and what happened."""
    broadcast = tuple(sorted(set(range(1, TIE_SIZE)) - set(barrier)))
    rule, odd = ((barrier, broadcast) if min(barrier) < min(broadcast)
                 else (broadcast, barrier))
    call = "barrier" if rule == barrier else "broadcast"
    other = "broadcast" if call == "barrier" else "barrier"
    told = (f"were out of step in a {TIE_SIZE}-rank job: rank 0 called all_reduce and "
            f"{ranks_named(odd)} {other}, against {ranks_named(rule)}'s {call} (two "
            f"against two: the call of the lowest of the tied ranks is the rule)")
    return sorted((0, *odd)), call, told


def ranks_named(ranks) -> str:
    ranks = [str(rank) for rank in ranks]
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return f"ranks {', '.join(ranks[:-1])} and {ranks[-1]}"


def describe(world_size: int, given: dict) -> str:
    kinds = ", ".join(f"{c['kind']} ({ranks_named(c['culprits'])}"
                      f"{', last 2 kept' if c['buffer'] else ''})" for c in given["cases"])
    return f", {len(given['cases'])} hung jobs: {kinds}"


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    """Rank 0 asks the reader's function about every job; the other ranks wait."""
    if rank != 0:
        return {}
    answers = []
    for case in given["cases"]:
        try:
            with calls.reader():
                answers.append(solution(copy.deepcopy(case["dumps"])))
        except NotImplementedError:
            raise  # the stub: refused as every lab refuses it
        except Exception as error:  # noqa: BLE001 (the reader's mistake, said per job)
            answers.append({"raised": raised_at(error, solution)})
    borrowed = sorted(name for name in sys.modules
                      if name == "workers.hangs" or "flight_recorder" in name)
    return {"answers": answers, "borrowed": borrowed}


def raised_at(error: BaseException, solution) -> str:
    """``ValueError: ... at labs/hung_rank.py line 12: <the line>``: the reader's error,
    at the last line of the reader's file it passed through."""
    import traceback

    from workers.labs.harness import first_line, shown

    filename = solution.__code__.co_filename
    where = ""
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename == filename:
            line = (frame.line or "").strip()
            where = f" at {shown(filename)} line {frame.lineno}: {line}"
    return f"{type(error).__name__}: {first_line(error)}{where}"


def normal(answer) -> tuple[list[int], str] | None:
    """The answer as (sorted ranks, collective), or None."""
    try:
        ranks, collective = answer
        return sorted(int(rank) for rank in ranks), str(collective)
    except (TypeError, ValueError):
        return None


def not_a_sorted_list(answer) -> str:
    """What is wrong with the form of an answer whose ranks are right, or ''."""
    ranks = answer[0]
    if not isinstance(ranks, list):
        return f"a {type(ranks).__name__}"
    if ranks != sorted(ranks):
        return "a list not sorted"
    return ""


def judge(world_size: int, outcome, given: dict) -> list:
    result = outcome.results[0]
    if result["borrowed"]:
        return [Finding(False, f"your function imported {result['borrowed'][0]}: the "
                               f"comparison is the lab, write it yourself")]
    findings = []
    for case, answer in zip(given["cases"], result["answers"]):
        truth, got = case["truth"], normal(answer)
        who = f"{ranks_named(case['culprits'])} {case['story']}"
        if case["buffer"]:
            who += f", and the recorders kept only their last {case['buffer']} collectives"
        if isinstance(answer, dict) and "raised" in answer:
            empty = [rank for rank, dump in case["dumps"].items() if not dump["entries"]]
            why = (f"; the recorder of {ranks_named(empty)} is empty (its entries list is "
                   f"[]): a rank stuck before its first collective has recorded none"
                   if empty else "")
            findings.append(Finding(False, f"{who}: your function raised "
                                           f"{answer['raised']}{why}"))
            continue
        form = not_a_sorted_list(answer) if got == (truth[0], truth[1]) else ""
        if form:
            findings.append(Finding(False, f"{who}: you named the right ranks, as {form}: "
                                           f"return them as a sorted list, "
                                           f"{truth[0]}"))
            continue
        if got == (truth[0], truth[1]):
            findings.append(Finding(True, f"{who}: you named {ranks_named(truth[0])} "
                                          f"and {truth[1]}"))
            continue
        shown = f"{got[0]} and {got[1]!r}" if got else repr(answer)
        findings.append(Finding(False, f"{who}: you answered {shown}, the answer is "
                                       f"{truth[0]} and {truth[1]!r}"
                                       f"{hint(world_size, case, got)}"))
    return findings


def hint(world_size: int, case: dict, got) -> str:
    """What a wrong answer to this job suggests the function does."""
    world_size = len(case["dumps"])  # the job's own (the tie job has 5 ranks)
    if got is None:
        return "; return (ranks, collective), a list of ranks and a string"
    ranks, collective = got
    culprits, waited_in = case["truth"]
    others = [rank for rank in range(world_size) if rank not in culprits]
    if ranks == culprits and collective != waited_in and \
            collective.split(":")[-1] == waited_in:
        return (f"; drop the backend's prefix: the recorder's {collective!r} is "
                f"{waited_in!r}")
    if ranks and set(ranks) < set(culprits):
        return (f"; more than one rank can be behind or out of step: name every one "
                f"({len(culprits)} here)")
    empty = [rank for rank, dump in case["dumps"].items() if not dump["entries"]]
    if empty and not set(empty) <= set(ranks):
        return (f"; the recorder of {ranks_named(empty)} is empty: a rank that reached "
                f"no collective is behind at the first number")
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
    if case.get("hangs_later") and ranks == culprits and collective == case["own"]:
        return ("; that is the next number, where they hang: the calls at the first number "
                "that differs finished (retired), yet that number is the answer")
    if ranks == culprits and case["own"] and collective == case["own"]:
        return (f"; {case['own']} is the culprit's own call: name the call the other ranks "
                f"made there, not the culprit's own")
    # a skipped gather, scatter or broadcast: its non-root ranks retire it and go on
    last = {rank: dump["entries"][-1] for rank, dump in case["dumps"].items()
            if dump["entries"]}
    if case["kind"].startswith("skip:") and len({e["collective_seq_id"]
                                                 for e in last.values()}) > 1:
        return ("; a retired entry is a call that finished on its rank, and the rank may "
                "have gone on: compare every entry by its number, retired or not")
    return ""
