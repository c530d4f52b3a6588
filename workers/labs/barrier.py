"""Lab barrier (init_methods): a barrier from a store's add and wait, used 4 to 6 times.

Every rank gets the job's TCPStore (wrapped, so the checker counts the calls) and calls
the reader's barrier 4 to 6 times in a row (drawn); before each, one rank arrives late:
which rank, and by how long, is random (from the seed), different ranks in each job, and one
of them is late by 1.5 to 2.5 s (a barrier that gives up after a timeout of a second
and returns fails there). No rank may leave barrier k before every rank has
entered it: a barrier that only sleeps, or waits for one rank's key, fails there. The
last rank to arrive must not be held once it has (a barrier that sleeps long enough to
pass the first test fails this one). A barrier that polls the store makes more calls the
longer it waits, and fails on that; the reader's time.sleep calls are counted too. The
later barriers catch the classic bug: a store never forgets, so a barrier that reuses
an earlier one's keys (or a few keys in turn) opens at once.

The contract (labs/barrier.py), clause by clause, and what checks each:

- No rank returns from call k before every rank entered call k: entry and exit times of
  4 to 6 barriers in a row (drawn), one rank late before each, once by 1.5 to 2.5 s (a
  wait that gives up after a timeout and returns fails, and its timeout is named); in the
  last, the late rank stays away until every store.wait given a timeout of up to 4 s has
  run out.
- Every call works however many came before: barriers 2 and on, how many drawn, so a
  barrier that cycles through three or four keys meets its own old ones (a store never
  forgets); and whatever the store's latency: in barrier 2 the second write of the rank
  that comes late returns 0.2 s late, so the ranks that write released come back for
  barrier 3 while it is still in barrier 2 (a rank that opens the barrier, then moves a
  shared counter on, lets them find the old one).
- Block in store.wait, do not poll, do not sleep: store calls counted per barrier against
  the time spent inside; any time.sleep of the reader's, however short, fails.
- The last rank to arrive is not held: its time inside after it arrived.
- Only the store: no process group exists, and a call from the reader's file into any
  function of torch.distributed (its private _store_based_barrier included) fails.
"""

from __future__ import annotations

import sys
import threading
import time

from workers.labs.harness import Finding, calls_from, job_store, replace_everywhere

CHAPTER = "init_methods"
FUNCTION = "store_barrier"
ASKS = ("a barrier from the store's add and wait: no rank leaves before all arrive, "
        "several times in a row")
REREAD = '"The store is the rendezvous" in the init methods chapter'
PASSED = "is a barrier, 4 to 6 times in a row"
WORLD_SIZES = (2, 3, 5)  # the page's exercise has 4 ranks in mind
GROUP = False  # no process group: the store is all there is
PRELOAD = ()
TIMEOUT = 12.0  # 8 s, and room to outwait a store.wait given a timeout (stretched)
BARRIERS = (4, 6)  # how many in a row: drawn, each job its own
LATE = (0.05, 0.25)  # seconds a late rank arrives after the others, in two barriers
LONG = (1.5, 2.5)  # and in one of them: longer than a store.wait given a timeout of 1 s
PROMPT = 0.5  # seconds the last rank may stay in a barrier after it arrives
MOST_CALLS = 20  # store calls per barrier and rank beyond which a barrier polls
SLOW_BARRIER, SLOW_WRITE = 1, 0.2  # barrier 2: the late rank's second write, 0.2 s late


def setup(world_size: int, rng) -> dict:
    barriers = rng.randint(*BARRIERS)
    late = rng.sample(range(world_size), min(world_size, barriers))
    late += [rng.randrange(world_size) for _ in range(barriers - len(late))]
    delays = [rng.uniform(*LATE) for _ in range(barriers)]
    delays[rng.randrange(barriers)] = rng.uniform(*LONG)
    return {"barriers": barriers, "late": late, "delays": [round(d, 2) for d in delays]}


def describe(world_size: int, given: dict) -> str:
    lates = ", ".join(f"rank {rank} {delay:g} s" for rank, delay in
                      zip(given["late"], given["delays"]))
    return f", {given['barriers']} barriers in a row, late: {lates}"


def counting_store(calls, barriers: int, pause=None):
    """A store that passes every call to the job's TCPStore, and logs and counts it;
    with ``pause``, the second write in barrier ``SLOW_BARRIER`` returns SLOW_WRITE late."""
    import torch.distributed as dist

    class CountingStore(dist.Store):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.count = inner, 0
            self.barrier = 0  # which barrier the calls are in
            self.written = [set() for _ in range(barriers)]  # keys set in each barrier
            self.waited = [set() for _ in range(barriers)]  # keys waited for in each
            self.timeouts = [[] for _ in range(barriers)]  # timeouts given to wait()
            self.writes, self.paused = 0, False  # writes in SLOW_BARRIER; paused yet

        def wrote(self, key):
            self.written[self.barrier].add(str(key))
            self.writes += self.barrier == SLOW_BARRIER

        def call(self, what: str, method, *args):
            self.count += 1
            with calls.logged(f"store.{what}"):
                answer = method(*args)
            if pause and self.writes == 2 and not self.paused:  # done, and told late
                self.paused = True
                pause(SLOW_WRITE)
            return answer

        def set(self, key, value):
            self.wrote(key)
            return self.call(f"set({key!r})", self.inner.set, key, value)

        def get(self, key):
            self.waited[self.barrier].add(str(key))  # get() waits for the key too
            return self.call(f"get({key!r})", self.inner.get, key)

        def add(self, key, value):
            if value:
                self.wrote(key)
            return self.call(f"add({key!r}, {value})", self.inner.add, key, value)

        def check(self, keys):
            self.waited[self.barrier].update(map(str, keys))
            return self.call(f"check({keys!r})", self.inner.check, keys)

        def wait(self, keys, timeout=None):
            self.waited[self.barrier].update(map(str, keys))
            more = () if timeout is None else (timeout,)
            if timeout is not None:
                self.timeouts[self.barrier].append(str(timeout))
                # told to the late rank, which then comes later than it (stretched)
                self.inner.set(f"{STRETCH}/{self.barrier}/{id(self)}",
                               str(timeout.total_seconds()))
            return self.call(f"wait({keys!r})", self.inner.wait, keys, *more)

        def compare_set(self, key, expected, desired):
            self.wrote(key)
            return self.call(f"compare_set({key!r})", self.inner.compare_set, key,
                             expected, desired)

        def delete_key(self, key):
            return self.call(f"delete_key({key!r})", self.inner.delete_key, key)

        def num_keys(self):
            return self.call("num_keys()", self.inner.num_keys)

    return CountingStore


STRETCH = "checker/wait-timeout"  # the timeouts the ranks gave store.wait, by barrier
LONGEST_STRETCH = 4.0  # a wait given a longer timeout is not outwaited: too slow a check


def stretched(inner, barrier: int, slept: float, barriers: int) -> float:
    """How much longer the late rank of the last barrier stays away so that every other
    rank's store.wait given a timeout (of LONGEST_STRETCH or less) runs out before it
    comes: a barrier that gives up after a timeout must not pass because the checker's
    delays happened to be shorter. In the last barrier, so that a rank that gives up
    ends the job instead of meeting the others at another barrier."""
    if barrier != barriers - 1:
        return 0.0
    keys = [key for key in inner.list_keys() if key.startswith(f"{STRETCH}/{barrier}/")] \
        if hasattr(inner, "list_keys") else []
    longest = max((float(inner.get(key)) for key in keys), default=0.0)
    return max(0.0, longest + 0.5 - slept) if longest <= LONGEST_STRETCH else 0.0


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    inner = job_store(120)
    sleep, asleep = time.sleep, [0.0]
    slow = rank == given["late"][SLOW_BARRIER]  # its second write there returns late
    store = counting_store(calls, given["barriers"], sleep if slow else None)(inner)
    entered, left, counts, slept = [], [], [], []

    def counted_sleep(seconds):  # the reader's sleeps, wherever it took time.sleep from
        if threading.current_thread() is threading.main_thread():  # not the checker's
            asleep[0] += seconds
        sleep(seconds)

    replace_everywhere({id(sleep): sleep}, {id(sleep): counted_sleep})
    torch_calls: list[str] = []
    torch_called = calls_from(calls.solution, torch_calls, torch_distributed)

    with calls.reader():
        for barrier in range(given["barriers"]):
            if rank == given["late"][barrier]:
                sleep(given["delays"][barrier])
                sleep(stretched(inner, barrier, given["delays"][barrier],
                                given["barriers"]))
            before, asleep[0], store.barrier = store.count, 0.0, barrier
            entered.append(time.monotonic())
            sys.setprofile(torch_called)
            try:
                solution(store, rank, world_size)
            finally:
                sys.setprofile(None)
            left.append(time.monotonic())
            counts.append(store.count - before)
            slept.append(asleep[0])
    return {"entered": entered, "left": left, "counts": counts, "slept": slept,
            "written": [sorted(keys) for keys in store.written],
            "waited": [sorted(keys) for keys in store.waited],
            "timeouts": store.timeouts, "torch_calls": sorted(set(torch_calls))}


def torch_distributed(frame, event, arg) -> str:
    """For ``calls_from``: a call into torch.distributed, which this lab forbids."""
    module = frame.f_globals.get("__name__", "")
    return "torch.distributed" if event == "call" and module.startswith(
        "torch.distributed") else ""


def per_rank(rank: int, result: dict, given: dict) -> str:
    waits = ", ".join(f"{left - entered:.2f}" for entered, left in
                      zip(result["entered"], result["left"]))
    return f"store calls per barrier {result['counts']}, seconds inside {waits}"


def judge(world_size: int, outcome, given: dict) -> list:
    results = outcome.results
    for rank, result in sorted(results.items()):
        if result.get("torch_calls"):
            called = ", ".join(result["torch_calls"])
            return [Finding(False, f"rank {rank} called {called}: this lab builds the "
                                   f"barrier from the store's methods and the standard "
                                   f"library alone, nothing of torch.distributed")]
    start = min(r["entered"][0] for r in results.values())
    for barrier in range(given["barriers"]):
        last_in = max(results, key=lambda rank: results[rank]["entered"][barrier])
        first_out = min(results, key=lambda rank: results[rank]["left"][barrier])
        entered = results[last_in]["entered"][barrier]
        left = results[first_out]["left"][barrier]
        if left < entered:
            text = (f"barrier {barrier + 1}: rank {first_out} left at "
                    f"{left - start:+.2f} s, before rank {last_in} entered at "
                    f"{entered - start:+.2f} s")
            slept = results[first_out]["slept"][barrier]
            if slept > 0:
                text += (f": it slept {slept:.2f} s (time.sleep) instead of blocking in "
                         f"store.wait until every rank has entered; a sleep only guesses "
                         f"how late the others are")
            elif barrier > 0 and reused(results, first_out, barrier):
                text += ("; the first barrier held and this one did not: it found the "
                         "keys an earlier barrier left in the store, which never forgets "
                         "(use new keys each time)")
            elif results[first_out]["timeouts"][barrier]:
                text += (f": its store.wait was given a timeout "
                         f"({results[first_out]['timeouts'][barrier][0]}), and it went on "
                         f"when that ran out; a barrier waits however late the last rank "
                         f"is")
            else:
                text += ": a rank must wait until every rank has entered (store.wait)"
            return [Finding(False, text)]
    for barrier in range(given["barriers"]):
        last_in = max(results, key=lambda rank: results[rank]["entered"][barrier])
        held = results[last_in]["left"][barrier] - results[last_in]["entered"][barrier]
        if held > PROMPT:
            slept = results[last_in]["slept"][barrier]
            why = (f": it slept {slept:.2f} s (time.sleep)" if slept > 0 else
                   ": a barrier opens as soon as the last rank arrives")
            return [Finding(True, "no rank left a barrier before every rank had entered "
                                  "it"),
                    Finding(False, f"barrier {barrier + 1}: rank {last_in}, the last to "
                                   f"arrive, stayed inside {held:.2f} s after every rank "
                                   f"had entered{why}")]
    polls = polling(results, given)
    if polls:
        return [Finding(True, "no rank left a barrier before every rank had entered it"),
                Finding(False, polls)]
    for rank, result in sorted(results.items()):
        slept = next(((b, s) for b, s in enumerate(result["slept"]) if s > 0), None)
        if slept:
            return [Finding(True, "no rank left a barrier before every rank had entered "
                                  "it"),
                    Finding(False, f"rank {rank} slept {slept[1]:.2f} s (time.sleep) in "
                                   f"barrier {slept[0] + 1}: a barrier blocks in "
                                   f"store.wait and does not sleep; a sleep only guesses "
                                   f"how late the others are, and holds the ranks that "
                                   f"need not wait")]
    most = max(max(r["counts"]) for r in results.values())
    longest = max(given["delays"])
    return [Finding(True, f"no rank left any of the {given['barriers']} barriers before "
                          f"every rank "
                          f"had entered it (a random rank late each time, once by "
                          f"{longest:g} s), and the last to arrive left at once"),
            Finding(True, f"at most {most} store calls per rank and barrier, however long "
                          f"it waited: no polling")]


def reused(results: dict, rank: int, barrier: int) -> bool:
    """Every key ``rank`` waited for in ``barrier`` was written in an earlier one."""
    earlier = {key for result in results.values() for keys in result["written"][:barrier]
               for key in keys}
    waited = set(results[rank]["waited"][barrier])
    return bool(waited) and waited <= earlier


def polling(results: dict, given: dict) -> str:
    """How a rank polled the store: more calls the longer it waited, or too many."""
    for rank, result in sorted(results.items()):
        waits = [left - entered for entered, left in zip(result["entered"], result["left"])]
        short = min(range(len(waits)), key=waits.__getitem__)
        long = max(range(len(waits)), key=waits.__getitem__)
        counts = result["counts"]
        if max(counts) > MOST_CALLS or (waits[long] - waits[short] > 0.4 and
                                        counts[long] >= counts[short] + 2):
            return (f"rank {rank} made {counts[short]} store calls in barrier {short + 1} "
                    f"(inside {waits[short]:.2f} s) and {counts[long]} in barrier "
                    f"{long + 1} (inside {waits[long]:.2f} s): it polls the store in a "
                    f"loop; block in store.wait instead")
    return ""


def explain(world_size: int, outcome, given: dict) -> list:
    """A deadlock: which keys the ranks waited for that no rank ever wrote."""
    import re

    written, waited = set(), set()
    for lines in outcome.logs.values():
        for line in lines:
            found = re.search(r"store\.(set|add|compare_set)\('([^']*)'", line)
            if found:
                written.add(found.group(2))
    for where in outcome.waiting.values():
        found = re.search(r"store\.wait\((\[.*?\])\)", where)
        if found:
            waited |= set(re.findall(r"'([^']*)'", found.group(1)))
    never = sorted(waited - written)
    through = sorted(rank for rank in outcome.results if rank not in outcome.waiting)
    if never and through and outcome.waiting:
        stuck = min(outcome.waiting)
        return [f"rank {through[0]} went through all {given['barriers']} barriers while "
                f"rank {stuck} still waited in one, for {never[0]!r}, which no rank ever "
                f"wrote: a barrier let rank {through[0]} out and never rank {stuck}; a "
                f"rank that leaves and enters the next barrier at once must find it new "
                f"(write what the next call reads, such as its number, before you "
                f"release anyone)"]
    if never:
        return [f"the ranks waited for {', '.join(map(repr, never[:3]))}, which no rank "
                f"ever set or added: check the keys' names"]
    return []
