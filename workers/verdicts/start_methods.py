"""What the start-methods page says about the starts it timed (ms from ``start()`` until
the child's code ran): fork against spawn, the forkserver's later starts (which depend on
whether the Python that ran them preloads the main script: 3.13.8 and later do), the
forkserver with PyTorch preloaded, a spawn start without PyTorch, ranks started as
``mp.spawn`` starts them and as the book's workers do; and whether a forked child hung in
its first operation on PyTorch's intra-op threads."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from workers.verdicts import NOISE, Verdict, as_long, order, verdict


def preloads_main_script(version: Sequence[int]) -> bool:
    """Whether this Python's forkserver imports the main script before forking children:
    from 3.13.8 and in 3.14 (CPython gh-126631); before, a renamed key lost its path."""
    return tuple(version[:3]) >= (3, 13, 8)


def ms_list(times: Sequence[float]) -> str:
    """``"31 and 29"``, ``"31, 29 and 30"``: the times as the text says them, in order."""
    said = [f"{ms:,.0f}" for ms in times]
    return said[0] if len(said) == 1 else f"{', '.join(said[:-1])} and {said[-1]}"


@verdict(
    higher=dict(fork=[8.0, 9.0, 10.0], spawn=[1500.0, 1520.0, 1610.0]),
    inside=dict(fork=[8.0, 9.0, 40.0], spawn=[30.0, 35.0, 38.0]),
    lower=dict(fork=[80.0, 90.0, 95.0], spawn=[30.0, 35.0, 38.0]),
)
def spawn_against_fork(fork: Sequence[float], spawn: Sequence[float]) -> Verdict:
    """A start under ``fork`` against one under ``spawn``, every start of each (ms)."""
    mf, ms = statistics.median(fork), statistics.median(spawn)
    both = (f"A `fork` start took {mf:,.0f} ms (the median of three), a `spawn` start "
            f"{ms:,.0f} ms")
    where = order(spawn, fork)
    if where == "higher":
        return Verdict("higher", f"{both}: `spawn` took {as_long(ms, mf)}.")
    if where == "lower":
        text = f"{both}: here every `spawn` start took less time than every `fork` start."
        return Verdict("lower", text)
    return Verdict("inside", f"{both}: their starts overlap, {NOISE}.")


@verdict(
    no_preload=dict(later=[1490.0, 1510.0], spawn=[1500.0, 1520.0, 1610.0],
                    version=(3, 11, 7)),
    preload=dict(later=[31.0, 29.0], spawn=[1500.0, 1520.0, 1610.0], version=(3, 14, 0)),
    no_preload_fast=dict(later=[31.0, 29.0], spawn=[1500.0, 1520.0, 1610.0],
                         version=(3, 12, 3)),
    preload_slow=dict(later=[1490.0, 31.0], spawn=[1500.0, 1520.0, 1610.0],
                      version=(3, 13, 8)),
)
def forkserver_later(later: Sequence[float], spawn: Sequence[float],
                     version: Sequence[int]) -> Verdict:
    """The forkserver's second and later starts of the plain program (ms), against its
    spawn starts, and what the Python that ran it (``sys.version_info``) does: a later
    start under half a spawn start's median was forked from a server that had the program,
    and with it PyTorch, imported already."""
    ms = statistics.median(spawn)
    fast = max(later) < ms / 2
    said = (f"`forkserver`'s later starts took {ms_list(later)} ms, against {ms:,.0f} ms "
            "for a `spawn` start")
    python = ".".join(map(str, version[:3]))
    if preloads_main_script(version):
        if fast:
            text = (f"{said}: this build's Python, {python}, preloads the program into "
                    "the server, so the server imported the program, and with it PyTorch, "
                    "once, and forked every later child from that.")
            return Verdict("preload", text)
        text = (f"{said}, though this build's Python, {python}, preloads the program into "
                "the server: here a later child still took at least half as long as a "
                "spawned one.")
        return Verdict("preload_slow", text)
    if fast:
        text = (f"{said}, though this build's Python, {python}, does not preload the "
                "program into the server: here each later child still started in under "
                "half the time of a spawned one.")
        return Verdict("no_preload_fast", text)
    text = (f"{said}: this build's Python, {python}, does not preload the program into "
            "the server, so every child it forks imports the program, and with it PyTorch, "
            "as a spawned child does.")
    return Verdict("no_preload", text)


@verdict(
    once=dict(first=1650.0, later=[30.0, 32.0], spawn=[1500.0, 1520.0, 1610.0]),
    once_only=dict(first=1650.0, later=[300.0, 320.0], spawn=[500.0, 520.0, 610.0]),
    every=dict(first=400.0, later=[300.0, 320.0], spawn=[500.0, 520.0, 610.0]),
)
def preloaded_forkserver(first: float, later: Sequence[float],
                         spawn: Sequence[float]) -> Verdict:
    """The forkserver with PyTorch preloaded: its first start, its later ones, and the
    spawn starts of the plain program (ms)."""
    ms = statistics.median(spawn)
    if max(later) >= first / 2:
        text = (f"The first start took {first:,.0f} ms, the next ones {ms_list(later)} ms: "
                "here preloading PyTorch did not save the later starts half of the first "
                "one's time.")
        return Verdict("every", text)
    paid = (f"Only the first start paid ({first:,.0f} ms, mostly the server importing "
            f"PyTorch); the next ones took {ms_list(later)} ms")
    if max(later) < ms / 2:
        return Verdict("once", f"{paid}. Most of a `spawn` start, then, is importing "
                               "PyTorch.")
    text = (f"The first start took {first:,.0f} ms (mostly the server importing PyTorch), "
            f"the next ones {ms_list(later)} ms, against {ms:,.0f} ms for a `spawn` start.")
    return Verdict("once_only", text)


def span(times: Sequence[float], spec: str = ".2f") -> str:
    """``"1.10 to 1.17"``, or ``"1.17"`` where every time reads the same as printed."""
    low, high = format(min(times), spec), format(max(times), spec)
    return low if low == high else f"{low} to {high}"


@verdict(
    lower=dict(without=60.0, spawn=[1500.0, 1520.0, 1610.0]),
    inside=dict(without=510.0, spawn=[500.0, 520.0, 610.0]),
    higher=dict(without=700.0, spawn=[500.0, 520.0, 610.0]),
)
def spawn_without_torch(without: float, spawn: Sequence[float]) -> Verdict:
    """A spawned child of a module that imports no PyTorch (ms until it was at work),
    against the plain program's spawn starts, which import it."""
    there = f"There a spawned child was at work {without:,.0f} ms after `start()`"
    where = order([without], spawn)
    if where == "lower":
        longer = as_long(statistics.median(spawn), without)
        return Verdict("lower", f"{there}, against {statistics.median(spawn):,.0f} ms here "
                                f"with PyTorch: {longer} with it.")
    spawned = f"{span(spawn, ',.0f')} ms"
    if where == "higher":
        return Verdict("higher", f"{there}, longer than every start here with PyTorch "
                                 f"({spawned}).")
    return Verdict("inside", f"{there}, against {spawned} here with PyTorch: {NOISE}.")


@verdict(
    lower=dict(spawn=[4.1, 4.6, 4.9], forkserver=[1.8, 1.85, 1.9], cores=2),
    lower_cores=dict(spawn=[1.17, 1.17], forkserver=[1.10, 1.11], cores=2),
    inside=dict(spawn=[1.9, 2.0, 2.2], forkserver=[1.7, 1.95, 2.0], cores=2),
    higher=dict(spawn=[1.5, 1.6, 1.7], forkserver=[1.8, 1.9, 2.0], cores=16),
)
def ranks_started(spawn: Sequence[float], forkserver: Sequence[float],
                  cores: int) -> Verdict:
    """Seconds from ``start_processes()`` until each rank's first line ran, under
    ``spawn`` (as ``mp.spawn`` starts them) and from a forkserver with torch preloaded,
    and the cores the ranks could keep busy (hyper-threads counted once, within the
    affinity and any CPU quota)."""
    n = len(spawn)
    said = (f"Under `spawn` the {n} ranks were running {span(spawn)} s after the "
            f"call, from the preloaded forkserver {span(forkserver)} s")
    where = order(forkserver, spawn)
    gap = min(spawn) - max(forkserver)
    by = f"by at least {gap:.2f} s" if f"{gap:.2f}" != "0.00" else "if by less than 0.01 s"
    if where == "lower" and n > cores:
        return Verdict("lower", f"{said}: every rank sooner, {by}. The server imported "
                                f"PyTorch once; under `spawn` each of the {n} ranks "
                                f"imported it again, {n} imports sharing "
                                f"{'one core' if cores == 1 else f'{cores} cores'}.")
    if where == "lower":
        return Verdict("lower_cores", f"{said}: every rank sooner, {by}, though this "
                                      f"build may use a core for each of the {n} ranks, so "
                                      f"the {n} imports of `spawn` could run side by side. "
                                      "Where ranks outnumber the cores, those imports "
                                      "take turns on them, and the server's single import "
                                      "saves more.")
    if where == "higher":
        return Verdict("higher", f"{said}: here `spawn` was faster for every rank, its "
                                 f"{n} start-ups side by side taking less time than the "
                                 "server's own start-up, its import of `torch` and "
                                 "`torch.distributed`, and its forks.")
    return Verdict("inside", f"{said}: the two ranges overlap, so this start shows no "
                             "difference between them. The server's own start-up, its "
                             "import of `torch`, is paid inside this one call, and cost "
                             f"about what {n} imports side by side cost here; the saving "
                             "grows where ranks outnumber the cores, and when one server "
                             "starts the next job as well.")


@verdict(
    hung=dict(first="hung", threads=2, two="hung"),
    hung_not_two=dict(first="hung", threads=2, two="finished"),
    finished=dict(first="finished", threads=16, two="finished"),
    one_thread=dict(first="finished", threads=1, two="finished"),
    only_two_hung=dict(first="finished", threads=2, two="hung"),
)
def forked_thread_pool(first: str, threads: int, two: str) -> Verdict:
    """What the forked child that did not set its thread count did (``"hung"`` or
    ``"finished"``), given the parent's intra-op threads, and what the child that set two
    threads did; the child that set one thread finished (the page asserts it)."""
    if first == "hung":
        said = (f"The parent had run on {threads} intra-op threads. Its first forked child "
                "was still inside the operation at the deadline: it hung, and was killed. "
                "The child that set one thread first finished")
        if two == "hung":
            return Verdict("hung", f"{said}; the one that set two hung like the first: "
                                   "only a count of one runs the operation in the calling "
                                   "thread, without the pool.")
        return Verdict("hung_not_two", f"{said}, and so did the one that set two: this "
                                       "build's thread pool started afresh in the child "
                                       "once the count changed.")
    if two == "hung":
        return Verdict("only_two_hung", f"The parent had run on {threads} intra-op "
                                        f"thread{'s' if threads > 1 else ''}. The first "
                                        "forked child finished, and so did the one that "
                                        "set one thread; the one that set two hung at "
                                        "the deadline, and was killed: only a count of "
                                        "one runs the operation without the pool.")
    if threads == 1:
        return Verdict("one_thread", "This machine gave the parent one intra-op thread, so "
                                     "it ran the operation itself and started no pool, and "
                                     "the forked children finished. Where PyTorch uses "
                                     "several threads, the first child can hang.")
    return Verdict("finished", f"The parent had run on {threads} intra-op threads, and "
                               "the forked children finished: this build's thread pool "
                               "(which depends on the OpenMP runtime PyTorch was built "
                               "with) survived the fork.")
