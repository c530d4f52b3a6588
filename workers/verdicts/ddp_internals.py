"""What the Inside DDP page says about what its runs measured: the time per step for each
bucket cap, how much overlap hid for small and large messages and why, and how PowerSGD's
accuracy stood against the default's. Times in seconds, shares as fractions."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from workers.verdicts import NOISE, Verdict, as_long, close, order, verdict


def cap_name(cap: str | int) -> str:
    return "the unset default" if cap == "default" else f"cap {cap}"


def buckets_named(count: int) -> str:
    return f"{count} bucket" + "s" * (count != 1)


@verdict(
    more_slower=dict(caps=["default", 1, 4, 25], counts=[2, 8, 2, 1],
                     seconds=[[0.020, 0.021], [0.035, 0.036], [0.025, 0.027],
                              [0.016, 0.017]]),
    more_faster=dict(caps=["default", 1, 4, 25], counts=[2, 8, 2, 1],
                     seconds=[[0.020, 0.021], [0.012, 0.013], [0.025, 0.027],
                              [0.036, 0.037]]),
    apart=dict(caps=["default", 1, 4, 25], counts=[2, 8, 2, 1],
               seconds=[[0.020, 0.021], [0.025, 0.026], [0.032, 0.033], [0.026, 0.027]]),
    inside=dict(caps=["default", 1, 4, 25], counts=[2, 8, 2, 1],
                seconds=[[0.020, 0.030], [0.022, 0.031], [0.019, 0.028], [0.021, 0.029]]),
    one=dict(caps=[25], counts=[1], seconds=[[0.016, 0.017]]),
)
def cap_times(caps: Sequence[str | int], counts: Sequence[int],
              seconds: Sequence[Sequence[float]]) -> Verdict:
    """The fastest and the slowest bucket cap by median time per step, whether their
    ranges are apart, and which had more buckets (``counts``: each cap's buckets after
    step 0; ``seconds``: its timed steps; both in the order of ``caps``)."""
    if len(caps) < 2:
        return Verdict("one", f"only {cap_name(caps[0])} was timed")
    medians = [statistics.median(times) for times in seconds]
    fast = min(range(len(caps)), key=medians.__getitem__)
    slow = max(range(len(caps)), key=medians.__getitem__)
    if order(seconds[fast], seconds[slow]) != "lower":
        return Verdict("inside", f"the fastest median ({cap_name(caps[fast])}) and the "
                                 f"slowest ({cap_name(caps[slow])}) have overlapping "
                                 f"ranges, {NOISE}")
    slowest, fastest = cap_name(caps[slow]), cap_name(caps[fast])
    said = (f"the slowest median, {slowest}'s ({buckets_named(counts[slow])}), "
            f"took {as_long(medians[slow], medians[fast])}"
            f"{' than' if close(medians[slow], medians[fast]) else ' as'} the fastest, "
            f"{fastest}'s ({buckets_named(counts[fast])}), beyond their "
            "spreads")
    if counts[slow] > counts[fast]:
        return Verdict("more_slower", said + ": here the extra all-reduces cost more than "
                                             "starting them during backward saved (the "
                                             "next section measures the two apart)")
    if counts[slow] < counts[fast]:
        return Verdict("more_faster", said + ": here more buckets paid, their all-reduces "
                                             "started during backward")
    return Verdict("apart", said)


@verdict(
    small=dict(small=[0.60, 0.70, 0.80], large=[0.10, 0.20, 0.30]),
    large=dict(small=[0.10, 0.20, 0.30], large=[0.60, 0.70, 0.80]),
    inside=dict(small=[0.20, 0.50, 0.80], large=[0.01, 0.30, 0.64]),
)
def hid_compared(small: Sequence[float], large: Sequence[float]) -> Verdict:
    """Which size of message overlap hid more of, from each trial's share hidden."""
    where = order(large, small)
    if where == "lower":
        return Verdict("small", "Small messages hid more than large ones in every trial.")
    if where == "higher":
        return Verdict("large", "Large messages hid more than small ones in every trial.")
    return Verdict("inside", "The two ranges overlap: this run cannot tell which size of "
                             f"message hid more ({len(small)} trials each; medians "
                             f"{statistics.median(small):.0%} for small and "
                             f"{statistics.median(large):.0%} for large), {NOISE}.")


@verdict(
    large_busier=dict(small=[0.30, 0.40], large=[0.80, 0.90]),
    small_busier=dict(small=[0.80, 0.90], large=[0.30, 0.40]),
    inside=dict(small=[0.31, 0.81], large=[0.33, 0.54]),
)
def cpu_reading(small: Sequence[float], large: Sequence[float]) -> Verdict:
    """How busy an all-reduce alone kept its process (CPU time over wall time, each trial),
    for the small messages and the large."""
    said = (f"An all-reduce alone kept {min(small):.2f}-{max(small):.2f} of a core busy "
            f"for the small messages, {min(large):.2f}-{max(large):.2f} for the large: ")
    where = order(small, large)
    if where == "lower":
        return Verdict("large_busier", said + "busier for the large ones in every "
                                              "trial.")
    if where == "higher":
        return Verdict("small_busier", said + "busier for the small ones in every "
                                              "trial.")
    return Verdict("inside", said + f"the ranges overlap, {NOISE}.")


@verdict(
    lower=dict(blocking=[0.050, 0.052, 0.055], overlapped=[0.040, 0.041, 0.043]),
    higher=dict(blocking=[0.040, 0.041, 0.043], overlapped=[0.050, 0.052, 0.055]),
    inside=dict(blocking=[0.040, 0.045, 0.050], overlapped=[0.042, 0.044, 0.048]),
)
def overlap_result(blocking: Sequence[float], overlapped: Sequence[float]) -> Verdict:
    """Whether overlapped steps took less time than blocking ones, every trial of each."""
    where = order(overlapped, blocking)
    if where == "lower":
        return Verdict("lower", "overlapped steps were all faster than blocking ones")
    if where == "higher":
        return Verdict("higher", "overlapped steps were all slower than blocking ones")
    return Verdict("inside", f"the time ranges of blocking and overlapped steps overlap, "
                             f"{NOISE}")


@verdict(
    both=dict(small=([0.05, 0.052], [0.04, 0.041]), large=([0.20, 0.21], [0.15, 0.16])),
    small=dict(small=([0.05, 0.052], [0.04, 0.041]), large=([0.20, 0.21], [0.19, 0.22])),
    large=dict(small=([0.05, 0.052], [0.049, 0.053]), large=([0.20, 0.21], [0.15, 0.16])),
    neither=dict(small=([0.05, 0.052], [0.049, 0.053]), large=([0.20, 0.21], [0.22, 0.23])),
)
def overlap_summary(small: tuple[Sequence[float], Sequence[float]],
                    large: tuple[Sequence[float], Sequence[float]]) -> Verdict:
    """For the summary: for which size of message overlapped steps were faster than
    blocking ones in every trial (each argument: the blocking times, the overlapped)."""
    faster = [order(overlapped, blocking) == "lower" for blocking, overlapped in (small,
                                                                                  large)]
    said = "overlapped steps were faster than blocking ones in every trial"
    if all(faster):
        return Verdict("both", f"{said}, for small and for large messages")
    if faster[0]:
        return Verdict("small", f"{said} for the small messages only")
    if faster[1]:
        return Verdict("large", f"{said} for the large messages only")
    return Verdict("neither", "overlapped steps were not faster than blocking ones beyond "
                              "the spread, for either size of message")


@verdict(
    no_gpu=dict(gpus=0),
    one_gpu=dict(gpus=1),
    lower=dict(gpus=4, blocking=[0.050, 0.052, 0.055], overlapped=[0.030, 0.031, 0.033]),
    higher=dict(gpus=2, blocking=[0.030, 0.031, 0.033], overlapped=[0.050, 0.052, 0.055]),
    inside=dict(gpus=8, blocking=[0.040, 0.045, 0.050], overlapped=[0.042, 0.044, 0.048]),
)
def overlap_on_gpus(gpus: int, blocking: Sequence[float] = (),
                    overlapped: Sequence[float] = ()) -> Verdict:
    """What the overlap demo's nccl run, one rank per GPU of the machine, says of the large
    messages: blocking against overlapped step times, every trial of each."""
    if gpus == 0:
        return Verdict("no_gpu", "This build had no GPU to check it; on a GPU box the "
                                 "cell in the section of that name runs the demo on nccl "
                                 "and says here what it found.")
    if gpus == 1:
        return Verdict("one_gpu", "This build had one GPU, so it did not check that: "
                                  "the nccl run under On a GPU box had one rank, with "
                                  "no peer to all-reduce with.")
    said = f"On this build's {gpus} GPUs (the nccl run under On a GPU box),"
    where = order(overlapped, blocking)
    if where == "lower":
        return Verdict("lower", f"{said} overlapped steps with the large messages were "
                                f"all faster than blocking ones: large buckets overlapped "
                                f"there.")
    if where == "higher":
        return Verdict("higher", f"{said} overlapped steps with the large messages were "
                                 f"all slower than blocking ones: large buckets did not "
                                 f"overlap there.")
    return Verdict("inside", f"{said} the time ranges of blocking and overlapped steps "
                             f"with the large messages overlap, {NOISE}: that run does not "
                             f"show large buckets overlapping.")


@verdict(
    full_agree=dict(cores=2, ranks=2, cpu=([0.3, 0.4], [0.8, 0.9]),
                    hidden=([0.6, 0.7], [0.1, 0.2])),
    full_against=dict(cores=1, ranks=2, cpu=([0.8, 0.9], [0.3, 0.4]),
                      hidden=([0.6, 0.7], [0.1, 0.2])),
    full_unclear=dict(cores=2, ranks=2, cpu=([0.3, 0.4], [0.8, 0.9]),
                      hidden=([0.2, 0.8], [0.0, 0.6])),
    free_agree=dict(cores=16, ranks=2, cpu=([0.8, 0.9], [0.3, 0.4]),
                    hidden=([0.1, 0.2], [0.6, 0.7])),
    free_against=dict(cores=16, ranks=2, cpu=([0.3, 0.4], [0.8, 0.9]),
                      hidden=([0.1, 0.2], [0.6, 0.7])),
    free_unclear=dict(cores=16, ranks=2, cpu=([0.31, 0.81], [0.33, 0.54]),
                      hidden=([0.1, 0.2], [0.6, 0.7])),
)
def cores_for_copying(cores: int, ranks: int,
                      cpu: tuple[Sequence[float], Sequence[float]],
                      hidden: tuple[Sequence[float], Sequence[float]]) -> Verdict:
    """Whether the ranks' compute threads (one each) left cores to gloo's threads, and
    whether the size of message whose all-reduce alone kept its process busier hid less.
    ``cpu`` and ``hidden``: (small, large), each trial's CPU share and share hidden."""
    busier = {"lower": "large", "higher": "small", "inside": None}[order(*cpu)]
    hid_more = {"lower": "large", "higher": "small", "inside": None}[order(*hidden)]
    busy = f"the {busier} messages, whose all-reduce kept its process busier,"
    if cores <= ranks:
        all_cores = {1: "this build's one core", 2: "both of this build's cores"}.get(
            cores, f"all {cores} of this build's cores")
        shared = "the core" if cores == 1 else "the cores"
        said = (f"The {ranks} ranks' compute threads filled {all_cores}, so gloo's threads "
                f"shared {shared} with computation")
        if busier is None or hid_more is None:
            return Verdict("full_unclear", said + ".")
        if busier != hid_more:
            return Verdict("full_agree", said + f": {busy} hid less, as that predicts.")
        return Verdict("full_against", said + f", yet {busy} hid more: sharing {shared} "
                                              "does not explain this run.")
    said = (f"The {ranks} ranks' compute threads left {cores - ranks} of this build's "
            f"{cores} cores to gloo's threads")
    if busier is None or hid_more is None:
        return Verdict("free_unclear", said + ".")
    if busier != hid_more:
        return Verdict("free_agree", said + f", yet {busy} still hid less.")
    return Verdict("free_against", said + f", and {busy} hid more.")


@verdict(
    all_behind=dict(default_accuracy=0.95, ranks=[1, 4], accuracies=[0.90, 0.92]),
    some_behind=dict(default_accuracy=0.95, ranks=[1, 4], accuracies=[0.90, 0.945]),
    none_behind=dict(default_accuracy=0.95, ranks=[1, 4], accuracies=[0.94, 0.96]),
)
def powersgd(default_accuracy: float, ranks: Sequence[int],
             accuracies: Sequence[float]) -> Verdict:
    """Which of PowerSGD's approximation ranks ended more than 2 points of test accuracy
    behind the default hook, after the same training."""
    behind = [r for r, a in zip(ranks, accuracies) if a < default_accuracy - 0.02]
    if ranks and behind == list(ranks):
        return Verdict("all_behind", "every approximation rank tried ended more than 2 "
                                     "points behind the default after one epoch: it learns "
                                     "more slowly per step, which the bytes saved must pay "
                                     "for")
    if behind:
        rest = [r for r in ranks if r not in behind]
        return Verdict("some_behind", f"PowerSGD with {listed(behind)} ended more than 2 "
                                      "points behind the default after one epoch, with "
                                      f"{listed(rest)} it did not")
    return Verdict("none_behind", "no approximation rank tried ended more than 2 "
                                  "points behind the default after one epoch")


def listed(ranks: Sequence[int]) -> str:
    """``approximation rank 1`` or ``approximation ranks 1 and 4`` (PowerSGD's
    ``matrix_approximation_rank``, not a process's rank)."""
    names = [str(r) for r in ranks]
    if len(names) == 1:
        return f"approximation rank {names[0]}"
    return f"approximation ranks {', '.join(names[:-1])} and {names[-1]}"


@verdict(
    some=dict(differed=6, steps=48),
    one=dict(differed=1, steps=48),
    none=dict(differed=0, steps=48),
    no_steps=dict(differed=0, steps=0),
)
def completion_order(differed: int, steps: int) -> Verdict:
    """In how many of the recorded steps with several buckets (each cap, step and rank) the
    all-reduces finished in another order than DDP handed the buckets over."""
    if steps == 0:
        return Verdict("no_steps", "No step of this run had more than one bucket, so there "
                                   "was no order to compare")
    if differed == 0:
        return Verdict("none", f"In all {steps} recorded steps with several buckets (each "
                               "cap, step and rank), the all-reduces finished in the order "
                               "DDP handed the buckets over")
    said = "one" if differed == 1 else f"{differed}"
    return Verdict("one" if differed == 1 else "some",
                   f"In {said} of the {steps} recorded steps with several buckets (each "
                   "cap, step and rank), a bucket handed over later finished first")
