"""What the start-and-join page says about its threads-or-processes run: which was faster,
and how many cores the threads kept busy, which depends on the Python that ran it (the
GIL of CPython's standard build, or none in its free-threaded build, 3.13t and later)."""

from __future__ import annotations

from collections.abc import Sequence

from workers.verdicts import NOISE, Verdict, meet_as_shown, order, verdict
from workers.verdicts.cores import quota_phrase


@verdict(
    busy=dict(busiest=1.9, cpus=2, quota=None),
    one_cpu=dict(busiest=0.98, cpus=1, quota=None),
    quota=dict(busiest=0.99, cpus=64, quota=1.0),
    other_work=dict(busiest=1.1, cpus=16, quota=None),
    other_work_in_quota=dict(busiest=1.2, cpus=64, quota=4.0),
)
def processes_held(busiest: float, cpus: int, quota: float | None) -> Verdict:
    """How many logical CPUs two processes of CPU-bound Python kept busy at most (CPU time
    over wall time), and, below 1.5, what held them: the one logical CPU this process may
    use (``cpus``: its affinity), a CPU quota (``quota``, in CPUs, None where there is
    none) below 2, or other work."""
    held = f"the processes kept at most {busiest:.2f} logical CPUs busy"
    if busiest >= 1.5:
        return Verdict("busy", held)
    if cpus < 2:
        return Verdict("one_cpu", f"{held}, the one logical CPU this build may use")
    if quota is not None and quota < 2:
        return Verdict("quota", f"{held}, held back by this build's "
                                f"{quota_phrase(quota)[2:]} (its affinity allows {cpus} "
                                "logical CPUs)")
    if quota is not None:
        return Verdict("other_work_in_quota", f"{held}, because other work held the rest, "
                                              "on this machine or within this build's "
                                              f"{quota_phrase(quota)[2:]}")
    return Verdict("other_work", f"{held}, because the machine's other work held the rest")


@verdict(
    faster=dict(threads=[2.1, 2.2, 2.3], processes=[1.1, 1.2, 1.25], busiest=1.9, cpus=2),
    faster_just=dict(threads=[1.0, 1.02, 1.05], processes=[0.96, 0.98, 0.99], busiest=1.9,
                     cpus=16),
    slower_busy=dict(threads=[2.1, 2.2], processes=[2.4, 2.5], busiest=1.9, cpus=16),
    slower=dict(threads=[2.1, 2.2, 2.3], processes=[2.6, 2.8, 3.0], busiest=1.1, cpus=16),
    slower_one_cpu=dict(threads=[2.1, 2.2], processes=[2.4, 2.5], busiest=0.98, cpus=1),
    slower_quota=dict(threads=[2.1, 2.2], processes=[2.4, 2.5], busiest=0.99, cpus=64,
                      quota=1.0),
    inside=dict(threads=[1.1, 1.2, 1.3], processes=[1.15, 1.2, 1.25], busiest=1.95,
                cpus=16),
)
def processes_against_threads(threads: Sequence[float], processes: Sequence[float],
                              busiest: float, cpus: int,
                              quota: float | None = None) -> Verdict:
    """The same CPU-bound Python in two threads and in two processes: the seconds of every
    repeat of each, the most logical CPUs the processes kept busy (CPU time over wall
    time), the logical CPUs this process may use, and its CPU quota in CPUs (None where
    there is none). What held the processes is worded by ``processes_held``."""
    held = processes_held(busiest, cpus, quota)
    where = order(processes, threads)
    low, high = min(threads) / max(processes), max(threads) / min(processes)
    if where == "lower" and (f"{low:.1f}" == "1.0"
                             or meet_as_shown(processes, threads, lambda s: f"{s:.2f}")):
        return Verdict("faster_just", "only just faster in processes: every repeat was "
                                      "below every one in threads, but by little "
                                      f"({low:.2f} to {high:.2f} times as fast), with up "
                                      f"to {busiest:.2f} logical CPUs busy")
    if where == "lower":
        times = (f"{low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else
                 f"{low:.1f} to {high:.1f}")  # never "1.4 to 1.4"
        return Verdict("faster", f"{times} times as fast in processes, beyond the spread "
                                 f"of the repeats, with up to {busiest:.2f} logical CPUs "
                                 f"busy")
    if where == "higher":
        if held.outcome == "busy":  # both processes ran: that is not why they were slower
            return Verdict("slower_busy", "slower in processes this time, beyond the "
                                          f"spread of the repeats, though {held}")
        outcome = {"one_cpu": "slower_one_cpu", "quota": "slower_quota"}.get(held.outcome,
                                                                           "slower")
        return Verdict(outcome, "slower in processes this time, beyond the spread of the "
                                f"repeats: {held}")
    return Verdict("inside", f"no faster in processes this time: the two ranges overlap, "
                             f"{NOISE}; {held}")


@verdict(
    gil=dict(busiest=1.01, gil=True, free_threaded=False, version="3.11.7"),
    gil_reenabled=dict(busiest=0.99, gil=True, free_threaded=True, version="3.13.5"),
    free=dict(busiest=1.96, gil=False, free_threaded=True, version="3.14.0"),
    free_but_one=dict(busiest=1.05, gil=False, free_threaded=True, version="3.14.0"),
)
def threads_busy(busiest: float, gil: bool, free_threaded: bool, version: str) -> Verdict:
    """How many cores two counting threads kept busy at most (CPU time over wall time), and
    what that says, given whether the Python that ran them had its GIL on (``gil``: what
    ``sys._is_gil_enabled()`` said, True where it does not exist) and whether it is the
    free-threaded build. With the GIL the threads never exceed one core: the page asserts
    that before asking for the sentence, and this function refuses the contrary."""
    why = ("This is why PyTorch's parallel training starts processes, not threads: the "
           "Python around each step (the training loop, the data pipeline, the optimizer) "
           "runs in every process at once.")
    if gil:
        if busiest >= 1.2:
            raise ValueError(f"threads with the GIL kept {busiest:.2f} CPUs busy")
        one = (f"The threads kept at most {busiest:.2f} logical CPUs busy (CPU time over "
               "wall time), about one, taking turns under the GIL")
        if not free_threaded:
            return Verdict("gil", f"{one} of this build's Python ({version}, CPython's "
                                  f"standard build). {why}")
        return Verdict("gil_reenabled", f"{one}: this build's Python, {version}, is the "
                                        "free-threaded build, but ran with the GIL turned "
                                        "back on (by PYTHON_GIL=1 or a module that needs "
                                        f"it). {why}")
    turns = ("Under the GIL of CPython's standard build they would have taken turns, which "
             "is why PyTorch's parallel training starts processes: the Python around each "
             "step (the training loop, the data pipeline, the optimizer) runs in every "
             "process at once. Its ranks stay processes without the GIL too: one per GPU, "
             "on one machine or many.")
    free = (f"This build's Python, {version}, is the free-threaded build and ran without "
            "the GIL")
    if busiest >= 1.2:
        return Verdict("free", f"{free}: the threads kept up to {busiest:.2f} logical "
                               "CPUs busy (CPU time over wall time), more than one at a "
                               f"time. {turns}")
    return Verdict("free_but_one", f"{free}, yet the threads kept at most {busiest:.2f} "
                                   "logical CPUs busy (CPU time over wall time), not one "
                                   f"each. {turns}")
