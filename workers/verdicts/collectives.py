"""What the collectives page says about its timings and bandwidths, for every outcome."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from workers.verdicts import NOISE, Verdict, close, order, ratio, verdict

_SAME_ALGORITHM = ("the same algorithm, its chunks cut into segments, two in flight while "
                   "it adds, in C++ threads")


def _ring_example(by_hand, library, cores):
    return dict(by_hand=by_hand, library=library, ranks=4, cores=cores)


@verdict(
    slower_shared=_ring_example([40.0, 42.0, 45.0], [20.0, 22.0, 25.0], cores=2),
    slower_one_each=_ring_example([40.0, 42.0, 45.0], [20.0, 22.0, 25.0], cores=6),
    slower_two_each=_ring_example([40.0, 42.0, 45.0], [20.0, 22.0, 25.0], cores=16),
    slower_inside=_ring_example([20.0, 30.0, 33.0], [18.0, 25.0, 31.0], cores=2),
    not_slower_inside=_ring_example([18.0, 24.0, 31.0], [20.0, 26.0, 33.0], cores=2),
    faster=_ring_example([10.0, 11.0, 12.0], [20.0, 22.0, 25.0], cores=16),
)
def ring_against_library(by_hand: Sequence[float], library: Sequence[float], ranks: int,
                         cores: int) -> Verdict:
    """The ring by hand against ``dist.all_reduce``: every trial's time of each (any unit),
    each timed by its slowest rank, at ``ranks`` ranks on ``cores`` cores. A clause after
    "the ring by hand was", then what the run can say of the gap, ending in a full stop."""
    where = order(by_hand, library)
    had = f"Its {_number(ranks)} ranks had this machine's {cores} core{'s' * (cores != 1)}"
    if where == "higher":
        slower = ("slower in every trial: its fastest trial took longer than the library's "
                  "slowest")
        if cores < ranks:
            return Verdict("slower_shared", f"{slower}. {had} to share, so this run cannot "
                           "tell how much of the gap is that and how much the library's "
                           f"own work: {_SAME_ALGORITHM}.")
        if cores < 2 * ranks:
            return Verdict("slower_one_each", f"{slower}. {had}, at least one each, but "
                           "gloo runs more than one thread per rank, so part of the gap "
                           "may be turns on the cores; the rest is in how the two are "
                           f"built: the library runs {_SAME_ALGORITHM}.")
        return Verdict("slower_two_each", f"{slower}. {had}, two or more each, so they did "
                       "not take turns on the cores: the gap is in how the two are built, "
                       f"the library running {_SAME_ALGORITHM}.")
    if where == "lower":
        return Verdict("faster", "faster in every trial: its slowest trial took less time "
                                 "than the library's fastest, although the library runs "
                                 f"{_SAME_ALGORITHM}.")
    if statistics.median(by_hand) > statistics.median(library):
        return Verdict("slower_inside", f"slower by its median, but the ranges overlap: "
                       f"{NOISE}. The library runs {_SAME_ALGORITHM}; here that did not "
                       "show beyond the spread.")
    return Verdict("not_slower_inside", "not slower by its median, and the ranges "
                   f"overlap: {NOISE}. The library runs {_SAME_ALGORITHM}; here that did "
                   "not show.")


@verdict(
    tiny=dict(small=0.01, peak=1.2),
    modest=dict(small=0.4, peak=1.2),
    near=dict(small=1.18, peak=1.2),
)
def small_messages(small: float, peak: float) -> Verdict:
    """Bus bandwidth of the smallest message against the peak (medians, GB/s). A clause
    after "so their bandwidth is"."""
    # ratio() says one decimal: never "1.0 times", where close() says it otherwise
    times = ratio(peak, small)
    if peak >= 10 * small:
        return Verdict("tiny", f"tiny (the peak below is {times} as much)")
    if close(peak, small):
        return Verdict("near", "about as high as the peak below (within 5%)")
    return Verdict("modest", f"lower, though here the peak below is only {times} as much")


_TCP = {
    "lower": "below the plain socket's {t:.2f} GB/s in every trial (gloo also adds, and "
             "each rank sends and receives at once)",
    "inside": "level with the plain socket's {t:.2f} GB/s (their trials overlap: "
              + NOISE + ")",
    "higher": "above the plain socket's {t:.2f} GB/s in every trial (a gloo connection "
              "carried more than Python's sendall and recv_into did)",
}
_COPY = {
    "lower": "below the memory copy's {c:.2f} GB/s per rank (over loopback TCP, every "
             "byte is copied into the kernel and out again)",
    "inside": "level with the memory copy's {c:.2f} GB/s per rank (their trials overlap: "
              + NOISE + ")",
    "higher": "above the memory copy's {c:.2f} GB/s per rank (the copy ran one thread per "
              "rank; gloo runs several, and the kernel copies on both sides)",
}
_WORDS = {"lower": "below", "inside": "level", "higher": "above"}


def _references_example(tcp: float, copy: float) -> dict:
    def trials(median):
        return [median * 0.95, median, median * 1.05]

    return dict(gloo=trials(2.0), tcp=trials(tcp), copy=trials(copy), ranks=2)


@verdict(**{f"{_WORDS[t]}_tcp_{_WORDS[c]}_copy": _references_example(
                tcp={"lower": 3.0, "inside": 2.0, "higher": 1.0}[t],
                copy={"lower": 6.0, "inside": 2.0, "higher": 1.0}[c])
            for t in _TCP for c in _COPY})
def gloo_against_references(gloo: Sequence[float], tcp: Sequence[float],
                            copy: Sequence[float], ranks: int) -> Verdict:
    """Where gloo's bus bandwidth at one message size stands against two reference points,
    neither a bound: a plain TCP stream over loopback and a memory copy on every rank at
    once (per rank), with every trial of each, in GB/s. A clause after "At 16 MiB," or the
    like."""
    t, c = order(gloo, tcp), order(gloo, copy)
    reached = f"{_number(ranks)} ranks reached {statistics.median(gloo):.2f} GB/s"
    return Verdict(f"{_WORDS[t]}_tcp_{_WORDS[c]}_copy",
                   f"{reached} of bus bandwidth, "
                   f"{_TCP[t].format(t=statistics.median(tcp))}, and "
                   f"{_COPY[c].format(c=statistics.median(copy))}")


@verdict(
    shared=dict(ranks=4, cores=2),
    one_each=dict(ranks=4, cores=6),
    two_each=dict(ranks=4, cores=16),
)
def ranks_and_cores(ranks: int, cores: int) -> Verdict:
    """What this machine's cores mean for the bus bandwidth of ``ranks`` gloo ranks."""
    ran = f"{_number(ranks).capitalize()} ranks"
    if cores < ranks:
        cores_here = f"{cores} core{'s' if cores != 1 else ''}"
        return Verdict("shared",
                       f"{ran} share this machine's {cores_here}, more busy processes than "
                       "cores, so their bus bandwidth says as much about the sharing as "
                       "about the wire.")
    if cores < 2 * ranks:
        return Verdict("one_each",
                       f"{ran} ran on this machine's {cores} cores, at least one each; "
                       "but gloo runs more than one thread per rank, so at times they may "
                       "still have shared cores.")
    return Verdict("two_each",
                   f"{ran} ran on this machine's {cores} cores, two or more each, so they "
                   "did not have to take turns on the cores: their bus bandwidth is about "
                   "the wire and gloo's own work.")


def _number(n: int) -> str:
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight"]
    return words[n] if 0 <= n < len(words) else str(n)


def _listing(values: Sequence[Sequence[float]]) -> str:
    texts = ["[" + ", ".join(f"{v:g}" for v in value) + "]" for value in values]
    return texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " and " + texts[-1]


@verdict(
    scratch=dict(before=[[1.0], [1.0], [1.0]], after=[[3.0], [2.0], [1.0]], backend="gloo"),
    untouched=dict(before=[[1.0], [1.0], [1.0]], after=[[1.0], [1.0], [1.0]],
                   backend="nccl"),
)
def reduce_off_the_root(before: Sequence[Sequence[float]], after: Sequence[Sequence[float]],
                        backend: str) -> Verdict:
    """What ``reduce`` left on the ranks other than its root (unspecified by its contract):
    their tensors before and after, in rank order. A clause after "on the other ranks"."""
    if list(after) == list(before):
        return Verdict("untouched", f"{backend} left their tensors as they were, "
                                    f"{_listing(after)}; another backend need not")
    return Verdict("scratch", f"their tensors went from {_listing(before)} to "
                              f"{_listing(after)}: {backend} used them as scratch space, "
                              "so read a reduce's result on its root only")


@verdict(
    slower=dict(first=[0.9, 4.0, 4.9], second=[0.2, 0.24, 0.25], first_name="1 KiB",
                second_name="4 KiB"),
    level=dict(first=[0.11, 0.12, 0.13], second=[0.1, 0.11, 0.12], first_name="1 KiB",
               second_name="4 KiB"),
    unordered=dict(first=[0.70, 0.78, 3.6], second=[3.0, 4.1, 4.5], first_name="1 KiB",
                   second_name="4 KiB"),
    faster=dict(first=[0.09, 0.1, 0.1], second=[0.11, 0.12, 0.13], first_name="1 KiB",
                second_name="4 KiB"),
)
def smallest_against_next(first: Sequence[float], second: Sequence[float], first_name: str,
                          second_name: str) -> Verdict:
    """The smallest message size's trials against the next size's (any unit). A sentence."""
    where = order(first, second)
    if where == "higher":
        return Verdict("slower", f"{first_name}, measured first, took longer than "
                                 f"{second_name} in every trial, which no fixed cost of a "
                                 "message explains: it paid for something else (a "
                                 "connection or cache still warming up, or another "
                                 "process on the cores), so the latency is taken from the "
                                 "fastest small size, not the first.")
    if where == "lower":
        return Verdict("faster", f"{first_name} was faster than {second_name} in every "
                                 "trial: even among small messages, size costs a little.")
    low, high = sorted([statistics.median(first), statistics.median(second)])
    if high > 1.5 * low:  # overlapping ranges, but medians far apart
        slower = first_name if statistics.median(first) > statistics.median(second) \
            else second_name
        return Verdict("unordered", f"{slower}'s median was {high / low:.1f} times the "
                                    f"other's, but the trials of {first_name} and "
                                    f"{second_name} overlap: with this many trials the "
                                    f"run cannot order them.")
    return Verdict("level", f"{first_name} and {second_name} took about as long (medians "
                            f"within 1.5 times, trials overlapping): {NOISE}, and size did "
                            f"not show in the cost.")


@verdict(
    floor=dict(small_name="4 KiB", small_median=200.0,
               larger={"64 KiB": 260.0, "256 KiB": 700.0}, ranks=2, cores=2),
    below=dict(small_name="4 KiB", small_median=2170.0,
               larger={"64 KiB": 2163.0, "256 KiB": 1190.0, "1 MiB": 2500.0}, ranks=2,
               cores=2),
    below_shared=dict(small_name="4 KiB", small_median=2170.0,
                      larger={"64 KiB": 2163.0, "256 KiB": 1190.0}, ranks=2, cores=1),
)
def small_floor(small_name: str, small_median: float, larger: dict, ranks: int,
                cores: int) -> Verdict:
    """The fastest small size's median against the larger sizes' medians (any unit, the
    same for all), at ``ranks`` ranks on ``cores`` cores: whether it is a floor that no
    larger message went under. A sentence."""
    under = [name for name, median in larger.items() if median < small_median]
    if not under:
        return Verdict("floor", f"No larger size had a lower median than {small_name}: "
                                f"a floor that every message pays.")
    names = under[0] if len(under) == 1 else ", ".join(under[:-1]) + " and " + under[-1]
    noise, outcome = "the noise of the repeats", "below"
    if cores < ranks:
        noise = (f"the noise of {_number(ranks)} ranks taking turns on "
                 f"{cores} core{'s' if cores != 1 else ''}")
        outcome = "below_shared"
    return Verdict(outcome, f"But {names}, larger, had a lower median than {small_name}: "
                            f"at this many trials the fixed cost is lost in {noise}, and "
                            "the small-message time above bounds the latency from above "
                            "rather than measuring it.")
