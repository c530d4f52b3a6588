"""What the pipelines page says about the bubbles it measured: they depend on the machine
(how long a stage's compute takes against a message), so every comparison is worded here,
one sentence per outcome."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from workers.verdicts import NOISE, Verdict, meet_as_shown, order, verdict


def shown(value: float) -> str:
    """A bubble as the page prints it: two decimals."""
    return f"{value:.2f}"


def median_range(values: Sequence[float]) -> str:
    """``"0.33 (0.30-0.35)"``: the median of the repeats and their range, as the tables
    say."""
    return f"{shown(statistics.median(values))} ({shown(min(values))}-{shown(max(values))})"


def just(lower: Sequence[float], upper: Sequence[float]) -> str:
    """What a reader needs when two ranges are apart but meet at two decimals."""
    return (f"only just: the printed ranges meet at two decimals (the largest below, "
            f"{max(lower):.4f}, against the smallest above, {min(upper):.4f})")


@verdict(
    shrank=dict(fewest=1, most=8, at_fewest=[0.55, 0.57, 0.60], at_most=[0.38, 0.40, 0.43]),
    shrank_just=dict(fewest=1, most=8, at_fewest=[0.553, 0.57, 0.60],
                     at_most=[0.38, 0.40, 0.551]),
    inside=dict(fewest=1, most=8, at_fewest=[0.52, 0.55, 0.61], at_most=[0.50, 0.56, 0.58]),
    grew=dict(fewest=1, most=8, at_fewest=[0.51, 0.52, 0.53], at_most=[0.60, 0.64, 0.66]),
)
def bubble_shrinks(fewest: int, most: int, at_fewest: Sequence[float],
                   at_most: Sequence[float]) -> Verdict:
    """GPipe's measured bubble with the most micro-batches against the fewest, every repeat
    of each (fractions of the step)."""
    where = order(at_most, at_fewest)
    with_most = f"With {most} micro-batches, at {median_range(at_most)}, the bubble"
    if where == "lower" and meet_as_shown(at_most, at_fewest, shown):
        return Verdict("shrank_just", f"{with_most} shrank beyond the spread of the "
                                      f"repeats, as the formula says, "
                                      f"{just(at_most, at_fewest)}")
    if where == "lower":
        return Verdict("shrank", f"{with_most} shrank beyond the spread of the repeats, "
                                 "as the formula says")
    if where == "higher":
        return Verdict("grew", f"{with_most} grew beyond the spread of the repeats, "
                               "against the formula: more micro-batches mean more messages "
                               "and smaller pieces of work, and here they cost more than "
                               "the shorter fill and drain saved")
    return Verdict("inside", f"{with_most}'s repeats overlap those with "
                             f"{batches(fewest)}, {NOISE}: "
                             "this run does not show the shrinking the formula predicts")


def batches(count: int) -> str:
    """``1 micro-batch``, ``4 micro-batches``."""
    return f"{count} micro-batch" if count == 1 else f"{count} micro-batches"


def listed(items: Sequence[str]) -> str:
    """``"a, b and c"``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


@verdict(
    above=dict(counts=[1, 2, 4, 8], medians=[0.55, 0.41, 0.30, 0.3555],
               formulas=[0.5, 1 / 3, 0.2, 1 / 9]),
    below=dict(counts=[1, 2, 4, 8], medians=[0.55, 0.31, 0.30, 0.10],
               formulas=[0.5, 1 / 3, 0.2, 1 / 9]),
    below_just=dict(counts=[1, 2, 4, 8], medians=[0.499, 0.41, 0.30, 0.109],
                    formulas=[0.5, 1 / 3, 0.2, 1 / 9]),
)
def bubble_floor(counts: Sequence[int], medians: Sequence[float],
                 formulas: Sequence[float]) -> Verdict:
    """The measured bubble (median of the repeats) against the formula, for each number of
    micro-batches. The formula is a floor when each micro-batch takes a rank the same time
    and the time counted busy is compute: the fill and the drain then cost at least its
    slots, whatever the ranks' own speeds. A rank that lost its core while counted busy
    breaks the second; the run cannot tell the two apart. A median below the formula that
    prints the same at two decimals is told "only just", with four."""
    below = [(m, got, floor) for m, got, floor in zip(counts, medians, formulas)
             if got < floor]
    if not below:
        # from the numbers as printed beside it, so the difference is theirs
        excess = float(shown(medians[-1])) - float(shown(formulas[-1]))
        return Verdict("above", "The measured bubble stayed at or above the formula for "
                                f"every number of micro-batches ({excess:.2f} above its "
                                f"{shown(formulas[-1])} with {counts[-1]}): the formula "
                                "counts only the schedule, not the time a message takes "
                                "to arrive, nor micro-batches that take a rank unequal "
                                "times")
    close = any(shown(got) == shown(floor) for _, got, floor in below)
    where = listed([f"with {batches(m)} (only just: {got:.4f} against {floor:.4f})"
                    if shown(got) == shown(floor) else
                    f"with {batches(m)} ({shown(got)} against {shown(floor)})"
                    for m, got, floor in below])
    return Verdict("below_just" if close else "below",
                   f"The measured bubble fell below the formula {where}: the "
                   "formula is a floor only when each micro-batch takes a rank "
                   "the same time and a rank counted busy is computing (not "
                   "waiting for a core); this run does not show which failed")


@verdict(
    smaller=dict(ours=[0.10, 0.12, 0.13], gpipe=[0.20, 0.22, 0.25]),
    smaller_just=dict(ours=[0.28, 0.33, 0.3412], gpipe=[0.3414, 0.37, 0.37]),
    larger=dict(ours=[0.30, 0.32, 0.35], gpipe=[0.20, 0.22, 0.25]),
    larger_just=dict(ours=[0.2502, 0.32, 0.35], gpipe=[0.20, 0.22, 0.2498]),
    inside=dict(ours=[0.19, 0.23, 0.26], gpipe=[0.20, 0.22, 0.25]),
)
def against_gpipe(ours: Sequence[float], gpipe: Sequence[float]) -> Verdict:
    """A schedule's measured bubble against GPipe's, every repeat of each."""
    where = order(ours, gpipe)
    close = meet_as_shown(ours, gpipe, shown)
    if where == "lower" and close:
        return Verdict("smaller_just", f"smaller than GPipe's, beyond the spread of the "
                                       f"repeats but {just(ours, gpipe)}")
    if where == "lower":
        return Verdict("smaller", "smaller than GPipe's, beyond the spread of the repeats")
    if where == "higher" and close:
        return Verdict("larger_just", f"larger than GPipe's, beyond the spread of the "
                                      f"repeats but {just(gpipe, ours)}")
    if where == "higher":
        return Verdict("larger", "larger than GPipe's, beyond the spread of the repeats")
    return Verdict("inside", f"level with GPipe's: the ranges overlap, {NOISE}")


@verdict(
    every=dict(counts=[1, 2, 4, 8], formulas=[1 / 2, 1 / 3, 1 / 5, 1 / 9],
               measured=[[0.55, 0.56, 0.6], [0.40, 0.42, 0.44], [0.30, 0.31, 0.33],
                         [0.20, 0.22, 0.25]]),
    every_just=dict(counts=[1, 2, 4], formulas=[1 / 2, 1 / 3, 1 / 5],
                    measured=[[0.5512, 0.56, 0.6], [0.40, 0.42, 0.5508],
                              [0.30, 0.31, 0.33]]),
    not_every=dict(counts=[1, 2, 4, 8], formulas=[1 / 2, 1 / 3, 1 / 5, 1 / 9],
                   measured=[[0.53, 0.55, 0.62], [0.45, 0.54, 0.55], [0.53, 0.54, 0.57],
                             [0.27, 0.33, 0.35]]),
    # a repeat with 2 (0.49) is below every one with 1, yet the two ranges overlap
    none=dict(counts=[1, 2, 4], formulas=[1 / 2, 1 / 3, 1 / 5],
              measured=[[0.50, 0.52, 0.55], [0.49, 0.53, 0.56], [0.51, 0.56, 0.58]]),
)
def bubble_each(counts: Sequence[int], formulas: Sequence[float],
                measured: Sequence[Sequence[float]]) -> Verdict:
    """Each number of micro-batches after the fewest against the fewest, as whole ranges
    of repeats: whether all its repeats measured a smaller bubble than every repeat with
    the fewest, as the formula (``formulas``, in the order of ``counts``) says each
    should. Single repeats are not compared: one below the fewest's range proves nothing
    while its range overlaps."""
    fewest = batches(counts[0])
    rest = list(zip(counts[1:], formulas[1:], measured[1:]))
    missed = [(m, f) for m, f, values in rest if order(values, measured[0]) != "lower"]
    if not missed:
        text = (f"For each larger number of micro-batches, every repeat measured a smaller "
                f"bubble than every repeat with {fewest}")
        touching = [values for _, _, values in rest
                    if meet_as_shown(values, measured[0], shown)]
        if touching:
            nearest = max(touching, key=max)
            return Verdict("every_just", f"{text}, {just(nearest, measured[0])}")
        return Verdict("every", f"{text} (in the table, no range meets the one with "
                                f"{fewest})")
    why = (f"though the formula gives {listed([shown(f) for _, f in missed])} against "
           f"{shown(formulas[0])}: it counts only the schedule's slots, and leaves out the "
           "messages and any unequal times of the same work (the next paragraph has rank "
           "0's)")
    whole = f"had all its repeats below every repeat with {fewest}"
    if len(missed) < len(rest):
        return Verdict("not_every", f"Not every larger number of micro-batches {whole}: "
                                    f"{listed([str(m) for m, _ in missed])} did not, "
                                    f"{why}")
    return Verdict("none", f"No larger number of micro-batches "
                           f"({listed([str(m) for m, _ in missed])}) {whole}, {why}")


def ms(seconds: float) -> str:
    """A time as the page prints a forward's: milliseconds, one decimal."""
    return f"{1000 * seconds:.1f} ms"


def spread_ms(times: Sequence[float]) -> str:
    """``4.0 to 6.5 ms``: the shortest and the longest of some times (seconds)."""
    return f"{1000 * min(times):.1f} to {ms(max(times))}"


@verdict(
    range=dict(forwards=[0.0041, 0.0046, 0.0043]),
    same=dict(forwards=[0.00041, 0.00043, 0.00039]),
)
def forward_times(forwards: Sequence[float]) -> Verdict:
    """How long the same forward took, each time in one step (seconds): a range, or one
    time when every one prints the same."""
    if ms(min(forwards)) == ms(max(forwards)):
        return Verdict("same", f"took {ms(min(forwards))} each, to the 0.1 ms shown")
    return Verdict("range", f"took {spread_ms(forwards)}")


@verdict(
    unequal=dict(forwards=[0.0041, 0.0046, 0.0043]),
    equal=dict(forwards=[0.00041, 0.00043, 0.00039]),
)
def formula_assumptions(forwards: Sequence[float]) -> Verdict:
    """What the run shows of the formulas' first assumption (every micro-batch takes a
    stage the same time), from rank 0's forwards in one step; nothing here times a message
    alone. The page goes on: ", and with two stages per rank ..."."""
    if ms(min(forwards)) == ms(max(forwards)):
        return Verdict("equal", "Rank 0's forwards in GPipe's step above took "
                                f"{ms(min(forwards))} each, to the 0.1 ms shown, so "
                                "unequal forwards on rank 0 do not explain the gap; the "
                                "messages, the backwards, rank 1's work and the step's own "
                                "Python are left")
    return Verdict("unequal", "Equal times do not hold here: the same forward on rank 0 "
                              f"took {spread_ms(forwards)} in GPipe's step above")
