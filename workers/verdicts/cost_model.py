"""What the cost-model page says about its predictions: how far a model fitted at one world
size lands from what other world sizes measured depends on the machine (its cores above
all), so every comparison is worded here, one sentence per outcome."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from workers.verdicts import Verdict, counted, verdict


def ratio_range(ratios: Sequence[float]) -> str:
    low, high = min(ratios), max(ratios)
    return f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f} to {high:.2f}"


LOOSE = 0.5  # a fit that missed its own points by more than this cannot test a prediction


@verdict(
    loose=dict(world_size=4, cores=16, ratios=[0.95, 1.1, 3.0], spread=0.8),
    within=dict(world_size=4, cores=16, ratios=[0.95, 1.1, 1.2], spread=0.25),
    slower_oversubscribed=dict(world_size=4, cores=2, ratios=[1.6, 2.4, 5.0], spread=0.25),
    slower=dict(world_size=4, cores=16, ratios=[1.6, 2.4, 5.0], spread=0.25),
    faster=dict(world_size=4, cores=16, ratios=[0.3, 0.5, 0.6], spread=0.25),
    mixed_oversubscribed=dict(world_size=3, cores=2, ratios=[0.9, 1.1, 3.0], spread=0.25),
    mixed=dict(world_size=3, cores=16, ratios=[0.9, 1.1, 3.0], spread=0.25),
)
def held_out(world_size: int, cores: int, ratios: Sequence[float],
             spread: float) -> Verdict:
    """A world size the fit never saw: measured / predicted at each size (medians),
    against the fit's own spread (the largest relative miss at the points it was fitted
    on)."""
    at = (f"at {world_size} ranks the measurements were {ratio_range(ratios)} times the "
          f"predictions")
    if spread > LOOSE:
        return Verdict("loose", f"{at}, but the fit missed its own points by up to "
                                f"{spread:.0%}: too loose a fit to say whether the model "
                                f"carries over (its timings were noisy; a quieter run, or "
                                f"more trials, narrows it)")
    within = [abs(r - 1) <= spread for r in ratios]
    tolerance = f"the fit missed its own points by up to {spread:.0%}"
    crowded = (f"{world_size} ranks on {counted(cores, 'core')}: the ranks' threads and "
               f"gloo's wait for a core, a cost no term of the model counts")
    if all(within):
        return Verdict("within", f"{at}: inside the spread, as {tolerance}; the model's "
                                 f"counts of steps and bytes carried over")
    if all(r > 1 + spread for r in ratios):
        if world_size > cores:
            return Verdict("slower_oversubscribed", f"{at}: every one slower, beyond the "
                                                    f"spread ({tolerance}). {crowded}")
        return Verdict("slower", f"{at}: every one slower, beyond the spread "
                                 f"({tolerance}), with a core for every rank: a cost "
                                 f"that "
                                 f"grows with the ranks faster than the model's steps and "
                                 f"bytes (the memory bandwidth the ranks share, or the "
                                 f"scheduler)")
    if all(r < 1 - spread for r in ratios):
        return Verdict("faster", f"{at}: every one faster, beyond the spread "
                                 f"({tolerance}): the fitted alpha or beta was "
                                 f"pessimistic, as a fit at one world size is when that "
                                 f"run was slowed")
    some = (f"{at}: {sum(within)} of {len(ratios)} inside the spread ({tolerance}), the "
            f"rest beyond it")
    if world_size > cores:
        return Verdict("mixed_oversubscribed", f"{some}. {crowded}, and how long they "
                                               f"wait differs from call to call")
    return Verdict("mixed", f"{some}: the model holds at some sizes and not at others, "
                            f"the sign of a regime its one α and one β do not describe")


@verdict(
    loose=dict(what="DDP's all-reduces", predicted=400e-6,
               measured=[380e-6, 420e-6, 450e-6], spread=0.9),
    within=dict(what="DDP's all-reduces", predicted=400e-6,
                measured=[380e-6, 420e-6, 450e-6], spread=0.25),
    slower=dict(what="DDP's all-reduces", predicted=400e-6,
                measured=[900e-6, 1000e-6, 1100e-6], spread=0.25),
    faster=dict(what="DDP's all-reduces", predicted=400e-6,
                measured=[150e-6, 200e-6, 210e-6], spread=0.25),
    slower_oversubscribed=dict(what="at degree 4", predicted=400e-6,
                               measured=[900e-6, 1000e-6, 1100e-6], spread=0.25,
                               world_size=4, cores=2),
)
def use_prediction(what: str, predicted: float, measured: Sequence[float],
                   spread: float, world_size: int = 2, cores: int | None = None) -> Verdict:
    """One cost predicted before it ran, against its timed trials (seconds), judged by the
    fit's own spread: the fastest trial, as the fit's points were. ``world_size`` and
    ``cores``: the run's ranks and this machine's cores, where more ranks than cores
    explain a slower call."""
    best = min(measured)
    median = statistics.median(measured)
    said = (f"{what}: predicted {predicted * 1e6:,.0f} µs, measured {best * 1e6:,.0f} µs "
            f"(the fastest of {len(measured)}; median {median * 1e6:,.0f})")
    ratio = best / predicted
    if spread > LOOSE:
        return Verdict("loose", f"{said}, {ratio:.2f} times the prediction; but the fit "
                                f"missed its own points by up to {spread:.0%}, too loose "
                                f"to judge the prediction")
    if abs(ratio - 1) <= spread:
        return Verdict("within", f"{said}, inside the fit's own spread (±{spread:.0%})")
    if ratio > 1 and cores is not None and world_size > cores:
        return Verdict("slower_oversubscribed",
                       f"{said}, {ratio:.1f} times the prediction, beyond the fit's spread "
                       f"(±{spread:.0%}): {world_size} ranks on {counted(cores, 'core')} "
                       f"wait for a core, a cost no term of the model counts")
    if ratio > 1:
        return Verdict("slower", f"{said}, {ratio:.1f} times the prediction, beyond the "
                                 f"fit's spread (±{spread:.0%})")
    return Verdict("faster", f"{said}, {ratio:.2f} of the prediction, beyond the fit's "
                             f"spread (±{spread:.0%})")


@verdict(
    alike=dict(hooked=[400e-6, 450e-6], bare=[380e-6, 500e-6], spread=0.25),
    slower=dict(hooked=[800e-6, 900e-6], bare=[380e-6, 500e-6], spread=0.25),
    faster=dict(hooked=[200e-6, 250e-6], bare=[380e-6, 500e-6], spread=0.25),
)
def where_called(hooked: Sequence[float], bare: Sequence[float], spread: float) -> Verdict:
    """DDP's one bucket, all-reduced in its communication hook, against an all-reduce of the
    same bytes called bare in the same run: the fastest trial of each (seconds)."""
    ratio = min(hooked) / min(bare)
    said = (f"the same bytes all-reduced bare, later in the same run, took "
            f"{min(bare) * 1e6:,.0f} µs at the fastest, against "
            f"{min(hooked) * 1e6:,.0f} µs in DDP's hook")
    if abs(ratio - 1) <= spread:
        return Verdict("alike", f"{said}: alike, inside the fit's spread (±{spread:.0%}), "
                                f"so calling it from the hook cost nothing the run could "
                                f"see")
    if ratio > 1:
        return Verdict("slower", f"{said}, {ratio:.1f} times as long: the difference is "
                                 f"where the call ran (inside DDP's hook, during "
                                 f"backward), not what it sent, and a model of messages "
                                 f"and bytes fitted on bare calls cannot predict it")
    return Verdict("faster", f"{said}: the hook's was {ratio:.2f} of the bare call's, "
                             f"beyond the fit's spread (±{spread:.0%}), a difference "
                             f"between the fastest of {len(hooked)} trials and of "
                             f"{len(bare)}, which a noisy run makes")
