"""What the backend page says about its runs: whether a float sum matches gloo's bits beyond
two ranks, and whether the backend's thread hid its communication, depend on the library's
order of additions and on the machine's cores, so each is worded here for every outcome."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from workers.verdicts import NOISE, Verdict, as_long, counted, order, verdict


@verdict(
    all_equal=dict(world_size=3, checks=19, differing=[]),
    floats_differ=dict(world_size=3, checks=19, differing=["all_reduce SUM float32",
                                                            "reduce_scatter float64"]),
)
def same_bits(world_size: int, checks: int, differing: Sequence[str]) -> Verdict:
    """How many of the checks at ``world_size`` ranks gave gloo's bits exactly."""
    if not differing:
        return Verdict("all_equal", f"At {world_size} ranks all {checks} checks gave "
                                    f"gloo's bits exactly: on these inputs the two orders "
                                    f"of the operations happened to round alike")
    others = (f"the other one ({differing[0]}) differs in its last bits, inside the bound"
              if len(differing) == 1 else
              f"the other {len(differing)} ({', '.join(differing)}) differ in their last "
              f"bits, each inside the bound")
    return Verdict("floats_differ",
                   f"At {world_size} ranks {checks - len(differing)} of {checks} checks "
                   f"gave gloo's bits exactly; {others} that two orders of the same "
                   f"additions or multiplications allow")


@verdict(
    hid=dict(thread=[60, 62, 64], inline=[100, 104, 101], communication=[45, 48, 50],
             computation=[55, 56, 57], cores=16, ranks=2, compute_threads=1),
    hid_crowded=dict(thread=[90, 92, 94], inline=[100, 104, 101], communication=[45, 48],
                     computation=[55, 56], cores=2, ranks=2, compute_threads=1),
    none=dict(thread=[100, 105, 99, 103], inline=[100, 104, 101, 98],
              communication=[45, 48], computation=[55, 56], cores=16, ranks=2,
              compute_threads=1),
    none_crowded=dict(thread=[50, 51, 200, 200, 200], inline=[100, 101, 102, 103, 104],
                      communication=[45, 48], computation=[55, 56], cores=2, ranks=2,
                      compute_threads=1),
    slower=dict(thread=[120, 125, 130], inline=[100, 104, 101], communication=[45, 48],
                computation=[55, 56], cores=16, ranks=2, compute_threads=1),
    loaded=dict(thread=[240, 250, 260], inline=[200, 204, 201], communication=[56, 58],
                computation=[43, 44], cores=2, ranks=2, compute_threads=1),
    loaded_parts=dict(thread=[130, 135, 140], inline=[200, 207, 210], communication=[73],
                      computation=[157], cores=2, ranks=2, compute_threads=1),
    slower_crowded=dict(thread=[120, 125, 130], inline=[100, 104, 101],
                        communication=[45, 48], computation=[55, 56], cores=2, ranks=2,
                        compute_threads=1),
)
def hidden(thread: Sequence[float], inline: Sequence[float], communication: Sequence[float],
           computation: Sequence[float], cores: int, ranks: int,
           compute_threads: int) -> Verdict:
    """Call, compute, wait: each trial's time (ms) with the backend's thread and inline,
    against the communication and the computation timed alone; ``compute_threads``, the
    threads each rank's products ran on."""
    t, i = statistics.median(thread), statistics.median(inline)
    c, m = statistics.median(communication), statistics.median(computation)
    said = (f"with the thread a trial took {t:.0f} ms (median), inline {i:.0f} ms; the "
            f"all-reduce alone took {c:.0f} ms and the products alone {m:.0f} ms")
    # each rank's compute threads and its backend's thread, and the store's own thread
    crowded = ranks * (compute_threads + 1) + 1 > cores
    why = (f"{ranks} ranks each ran {counted(compute_threads, 'compute thread')} and a "
           f"backend thread on {counted(cores, 'core')}, beside the store's own thread: "
           f"the communication (copies, the store's sockets, the additions) needs a core "
           f"too, and here the two took turns on the cores")
    cannot = ("so other work on the machine changed these runs' speed, and they cannot "
              "say what the thread hides (the timeline still shows the two running at "
              "once)")
    if i > 1.5 * (c + m):  # inline, the two run in turn: a trial is about their sum
        return Verdict("loaded", f"{said}: inline, where the two parts run in turn, a "
                                 f"trial took {i / (c + m):.1f} times their sum, {cannot}")
    if t < 0.9 * max(c, m):  # no trial holding both can be shorter than one alone
        longer = "the products" if m >= c else "the all-reduce"
        return Verdict("loaded_parts", f"{said}: a trial with the thread, which holds "
                                       f"both, took less than {longer} alone, {cannot}")
    # the faster half of each: the undisturbed trials, so one slow trial does not decide
    fast_thread = sorted(thread)[:max(1, len(thread) // 2)]
    fast_inline = sorted(inline)[:max(1, len(inline) // 2)]
    where = order(fast_thread, fast_inline)
    hid = (i - t) / c  # from the medians the sentence gives
    if where == "lower" and t < i:  # the faster trials and the medians agree
        text = (f"{said}: the thread hid {min(hid, 1):.0%} of the communication's time "
                f"behind the products")
        if crowded and hid < 0.9:
            return Verdict("hid_crowded", f"{text}, not all of it: {why}")
        return Verdict("hid", text)
    if not (where == "higher" and t > i):  # the ranges overlap, whatever else
        text = (f"{said}: the two sets of trials overlap ({NOISE}): the thread hid nothing "
                f"measurable")
        if crowded:
            return Verdict("none_crowded", f"{text}. The timeline still shows the two "
                                           f"running at once; {why}")
        return Verdict("none", f"{text}, though the timeline shows the two running at once")
    text = (f"{said}: the thread made the trials slower (their faster halves and their "
            f"medians agree)")
    if crowded:
        return Verdict("slower_crowded", f"{text}: {why}, and switching between them cost "
                                         f"more than running them in turn")
    return Verdict("slower", f"{text}, with a core for each thread: the hand-over to the "
                             f"thread and back cost more than it hid")


@verdict(
    slower=dict(mine=[700, 710, 790, 800], gloo=[260, 270, 340, 900], what="at 1 KiB"),
    faster=dict(mine=[200, 210, 220, 230], gloo=[260, 270, 340, 900], what="at 1 KiB"),
    inside=dict(mine=[300, 310, 400, 420], gloo=[260, 320, 340, 900], what="at 1 KiB"),
)
def speed(mine: Sequence[float], gloo: Sequence[float], what: str) -> Verdict:
    """One size's trials (µs) on this backend and on gloo, compared by their faster halves:
    the undisturbed calls, so that one slow trial of either does not decide."""
    fast_mine = sorted(mine)[:max(1, len(mine) // 2)]
    fast_gloo = sorted(gloo)[:max(1, len(gloo) // 2)]
    where = order(fast_mine, fast_gloo)
    def longer(slow: float, fast: float, name: str) -> str:
        said = as_long(slow, fast)
        return f"{said} {'as' if said.endswith('as long') else 'than'} {name}"

    if where == "higher":
        took = longer(min(mine), min(gloo), "gloo's fastest")
        return Verdict("slower", f"{what} the faster half of this backend's trials were "
                                 f"all slower than the faster half of gloo's (its fastest "
                                 f"took {took})")
    if where == "lower":
        took = longer(min(gloo), min(mine), "this backend's fastest")
        return Verdict("faster", f"{what} the faster half of this backend's trials were "
                                 f"all faster than the faster half of gloo's (gloo's "
                                 f"fastest took {took})")
    return Verdict("inside", f"{what} the faster halves of the two backends' trials "
                             f"overlap: the difference is inside the spread of the "
                             f"repeats, noise")
