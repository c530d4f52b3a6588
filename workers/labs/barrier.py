"""Lab barrier (init_methods): a barrier from a store's add and wait, used three times.

Every rank gets the job's TCPStore (wrapped, so the checker counts the calls) and calls
the reader's barrier three times in a row; before each, one rank (a different one each
time) arrives late. No rank may leave barrier k before every rank has entered it. The
second and third barriers catch the classic bug: a store never forgets, so a barrier
that reuses the first one's keys opens at once.
"""

from __future__ import annotations

import time

from workers.labs.harness import Finding

CHAPTER = "init_methods"
FUNCTION = "store_barrier"
ASKS = "a barrier from the store's add and wait: no rank leaves before all arrive, 3 times"
REREAD = '"The store is the rendezvous" in the init methods chapter'
PASSED = "is a barrier, three times in a row"
WORLD_SIZES = (2, 3, 5)  # the page's exercise has 4 ranks in mind
GROUP = False  # no process group: the store is all there is
PRELOAD = ()
TIMEOUT = 6.0
BARRIERS = 3
LATE = 0.3  # seconds the late rank arrives after the others
MOST_CALLS = 20  # store calls per barrier and rank beyond which a barrier polls


def setup(world_size: int) -> dict:
    from workers.ranks import free_port

    return {"port": free_port()}


def describe(world_size: int, given: dict) -> str:
    return f", {BARRIERS} barriers in a row"


def counting_store(calls):
    """A store that passes every call to the job's TCPStore, and logs and counts it."""
    import torch.distributed as dist

    class CountingStore(dist.Store):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.count = inner, 0

        def call(self, what: str, method, *args):
            self.count += 1
            with calls.logged(f"store.{what}"):
                return method(*args)

        def set(self, key, value):
            return self.call(f"set({key!r})", self.inner.set, key, value)

        def get(self, key):
            return self.call(f"get({key!r})", self.inner.get, key)

        def add(self, key, value):
            return self.call(f"add({key!r}, {value})", self.inner.add, key, value)

        def check(self, keys):
            return self.call(f"check({keys!r})", self.inner.check, keys)

        def wait(self, keys, timeout=None):
            more = () if timeout is None else (timeout,)
            return self.call(f"wait({keys!r})", self.inner.wait, keys, *more)

        def compare_set(self, key, expected, desired):
            return self.call(f"compare_set({key!r})", self.inner.compare_set, key,
                             expected, desired)

        def delete_key(self, key):
            return self.call(f"delete_key({key!r})", self.inner.delete_key, key)

        def num_keys(self):
            return self.call("num_keys()", self.inner.num_keys)

    return CountingStore


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    from datetime import timedelta

    import torch.distributed as dist

    inner = dist.TCPStore("127.0.0.1", given["port"], world_size, rank == 0,
                          timedelta(seconds=120), wait_for_workers=False)
    store = counting_store(calls)(inner)
    entered, left, counts = [], [], []
    with calls.reader():
        for barrier in range(BARRIERS):
            if rank == (barrier + 1) % world_size:
                time.sleep(LATE)
            before = store.count
            entered.append(time.monotonic())
            solution(store, rank, world_size)
            left.append(time.monotonic())
            counts.append(store.count - before)
    inner.add("checker/done", 1)  # the server lives in rank 0: it waits for the others
    while rank == 0 and inner.add("checker/done", 0) < world_size:
        time.sleep(0.01)
    return {"entered": entered, "left": left, "counts": counts}


def per_rank(rank: int, result: dict, given: dict) -> str:
    waits = ", ".join(f"{left - entered:.2f}" for entered, left in
                      zip(result["entered"], result["left"]))
    return f"store calls per barrier {result['counts']}, seconds inside {waits}"


def judge(world_size: int, outcome, given: dict) -> list:
    results = outcome.results
    start = min(r["entered"][0] for r in results.values())
    for barrier in range(BARRIERS):
        last_in = max(results, key=lambda rank: results[rank]["entered"][barrier])
        first_out = min(results, key=lambda rank: results[rank]["left"][barrier])
        entered = results[last_in]["entered"][barrier]
        left = results[first_out]["left"][barrier]
        if left < entered:
            text = (f"barrier {barrier + 1}: rank {first_out} left at "
                    f"{left - start:+.2f} s, before rank {last_in} entered at "
                    f"{entered - start:+.2f} s")
            if barrier > 0:
                text += ("; the first barrier held and this one did not: it found the "
                         "keys an earlier barrier left in the store, which never forgets "
                         "(use new keys each time)")
            else:
                text += ": a rank must wait until every rank has entered (store.wait)"
            return [Finding(False, text)]
    polls = max(max(r["counts"]) for r in results.values())
    if polls > MOST_CALLS:
        return [Finding(True, "no rank left a barrier before every rank had entered it"),
                Finding(False, f"a rank made {polls} store calls in one barrier: it polls "
                               f"the store in a loop; block in store.wait instead")]
    return [Finding(True, f"no rank left any of the {BARRIERS} barriers before every rank "
                          f"had entered it (one rank {LATE:g} s late each time)"),
            Finding(True, f"at most {polls} store calls per rank and barrier: no polling")]


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
    if never:
        return [f"the ranks waited for {', '.join(map(repr, never[:3]))}, which no rank "
                f"ever set or added: check the keys' names"]
    return []
