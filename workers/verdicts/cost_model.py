"""What the cost-model page says about its predictions: how far a model fitted at one world
size lands from what other world sizes measured depends on the machine (its cores above
all), so every comparison is worded here, one sentence per outcome."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from decimal import Decimal

from workers.verdicts import Verdict, counted, verdict


def ratio_range(ratios: Sequence[float]) -> str:
    low, high = min(ratios), max(ratios)
    return f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f} to {high:.2f}"


LOOSE = 0.5  # a fit that missed its own points by more than this cannot test a prediction


def side(ratio: float, spread: float) -> str:
    """"within", "slower" or "faster": a ratio against a spread as the sentences print them
    (1.26, 26.4%), compared as printed, so that a sentence never calls a printed ratio
    beyond the printed spread it lies within, nor the other way."""
    shown, tolerance = Decimal(f"{ratio:.2f}"), Decimal(f"{spread:.1%}"[:-1]) / 100
    if abs(shown - 1) <= tolerance:
        return "within"
    return "slower" if shown > 1 else "faster"


@verdict(
    loose=dict(world_size=4, cores=16, ratios=[0.95, 1.1, 3.0], spread=0.8),
    within=dict(world_size=4, cores=16, ratios=[0.95, 1.1, 1.2], spread=0.25),
    slower_oversubscribed=dict(world_size=4, cores=2, ratios=[1.6, 2.4, 5.0], spread=0.25),
    slower=dict(world_size=4, cores=16, ratios=[1.6, 2.4, 5.0], spread=0.25),
    faster=dict(world_size=4, cores=16, ratios=[0.3, 0.5, 0.6], spread=0.25),
    mixed_oversubscribed=dict(world_size=3, cores=2, ratios=[0.9, 1.1, 3.0], spread=0.25),
    mixed=dict(world_size=3, cores=16, ratios=[0.9, 1.1, 3.0], spread=0.25),
    scattered=dict(world_size=3, cores=16, ratios=[0.5, 1.5, 1.6], spread=0.25),
)
def held_out(world_size: int, cores: int, ratios: Sequence[float],
             spread: float) -> Verdict:
    """A world size the fit never saw: measured / predicted at each size (each size's
    fastest trial), against the fit's own spread (the largest relative miss at the
    points it was fitted on)."""
    at = (f"at {world_size} ranks the measurements were {ratio_range(ratios)} times the "
          f"predictions")
    if spread > LOOSE:
        return Verdict("loose", f"{at}, but the fit missed its own points by up to "
                                f"{spread:.1%}: too loose a fit to say whether the model "
                                f"carries over (its timings were noisy; a quieter run, or "
                                f"more trials, narrows it)")
    sides = [side(r, spread) for r in ratios]
    within = [s == "within" for s in sides]
    slower, faster = sides.count("slower"), sides.count("faster")
    tolerance = f"the fit missed its own points by up to {spread:.1%}"
    crowded = (f"{world_size} ranks on {counted(cores, 'core')}: the ranks' threads and "
               f"gloo's wait for a core, a cost no term of the model counts")
    if all(within):
        return Verdict("within", f"{at}: inside the spread, as {tolerance}; the model's "
                                 f"counts of steps and bytes carried over")
    if slower == len(ratios):
        if world_size > cores:
            return Verdict("slower_oversubscribed", f"{at}: every one slower, beyond the "
                                                    f"spread ({tolerance}). {crowded}")
        return Verdict("slower", f"{at}: every one slower, beyond the spread "
                                 f"({tolerance}), with a core for every rank: a cost "
                                 f"that grows with the ranks faster than the model's "
                                 f"steps and bytes, or this run's drift from the fit's "
                                 f"(each run is a job of its own)")
    if faster == len(ratios):
        return Verdict("faster", f"{at}: every one faster, beyond the spread "
                                 f"({tolerance}): the model overestimates at this world "
                                 f"size, as it does when the fit's α holds a cost paid "
                                 f"once per call, which the steps then multiply")
    ways = f"{counted(slower, 'size')} slower and {faster} faster"
    if not any(within):
        return Verdict("scattered", f"{at}: none inside the spread ({tolerance}), {ways}: "
                                    f"the model describes none of these calls")
    some = (f"{at}: {sum(within)} of {len(ratios)} inside the spread ({tolerance}), "
            f"{ways}")
    if world_size > cores and slower:
        return Verdict("mixed_oversubscribed", f"{some}. {crowded}, and how long they "
                                               f"wait differs from call to call")
    return Verdict("mixed", f"{some}: the model holds at some sizes and not at others "
                            f"here")


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
    where = side(ratio, spread)
    if spread > LOOSE:
        return Verdict("loose", f"{said}, {ratio:.2f} times the prediction; but the fit "
                                f"missed its own points by up to {spread:.1%}, too loose "
                                f"to judge the prediction")
    if where == "within":
        return Verdict("within", f"{said}, inside the fit's own spread (±{spread:.1%})")
    if where == "slower" and cores is not None and world_size > cores:
        return Verdict("slower_oversubscribed",
                       f"{said}, {ratio:.2f} times the prediction, beyond the fit's spread "
                       f"(±{spread:.1%}): {world_size} ranks on {counted(cores, 'core')} "
                       f"wait for a core, a cost no term of the model counts")
    if where == "slower":
        return Verdict("slower", f"{said}, {ratio:.2f} times the prediction, beyond the "
                                 f"fit's spread (±{spread:.1%})")
    return Verdict("faster", f"{said}, {ratio:.2f} of the prediction, beyond the fit's "
                             f"spread (±{spread:.1%})")


@verdict(
    loose=dict(size="4 MiB", ratios={"all_reduce": 1.05, "broadcast": 0.9},
               spreads={"all_reduce": 0.8, "broadcast": 0.2}),
    within=dict(size="4 MiB", ratios={"all_reduce": 1.05, "broadcast": 0.9},
                spreads={"all_reduce": 0.2, "broadcast": 0.2}),
    slower=dict(size="4 MiB", ratios={"all_reduce": 2.1, "broadcast": 1.9},
                spreads={"all_reduce": 0.2, "broadcast": 0.05}),
    faster=dict(size="4 MiB", ratios={"all_reduce": 0.5, "broadcast": 0.6},
                spreads={"all_reduce": 0.2, "broadcast": 0.05}),
    mixed=dict(size="4 MiB", ratios={"all_reduce": 1.05, "broadcast": 1.9},
               spreads={"all_reduce": 0.2, "broadcast": 0.05}),
    scattered=dict(size="4 MiB", ratios={"all_reduce": 0.5, "broadcast": 1.9},
                   spreads={"all_reduce": 0.2, "broadcast": 0.05}),
)
def beyond_fit(size: str, ratios: dict, spreads: dict) -> Verdict:
    """A size larger than every fitted one, at the fit's own world size: measured /
    predicted per collective, each against its fit's spread."""
    loose = [name for name in ratios if spreads[name] > LOOSE]
    if loose:
        fits = f"fit{'s' * (len(loose) > 1)} of {' and '.join(loose)}"
        return Verdict("loose", f"at {size} the {fits} missed "
                                f"{'their' if len(loose) > 1 else 'its'} own points by "
                                f"more than {LOOSE:.0%}: too loose to say whether the "
                                f"straight line held beyond the fitted sizes")
    sides = {name: side(r, spreads[name]) for name, r in ratios.items()}
    slower = [name for name, s in sides.items() if s == "slower"]
    faster = [name for name, s in sides.items() if s == "faster"]
    inside = len(ratios) - len(slower) - len(faster)
    if not slower and not faster:
        return Verdict("within", f"at {size} every collective landed inside its fit's "
                                 f"spread: the straight line held beyond the fitted sizes, "
                                 f"at the fit's own world size")
    if len(slower) == len(ratios):
        return Verdict("slower", f"at {size} every collective took longer than its line, "
                                 f"fitted on smaller sizes, predicts, at the fit's own "
                                 f"world size: the cost per byte grew beyond the fitted "
                                 f"sizes, or this run drifted from the fit's (each run is "
                                 f"a job of its own), so part of any miss at {size} in the "
                                 f"figure below may be the size, not the ranks")
    if len(faster) == len(ratios):
        return Verdict("faster", f"at {size} every collective took less than its line "
                                 f"predicts, at the fit's own world size: the cost per "
                                 f"byte fell beyond the fitted sizes, or this run drifted "
                                 f"from the fit's")
    if not inside:
        return Verdict("scattered", f"at {size} no collective landed inside its fit's "
                                    f"spread, {len(slower)} slower and {len(faster)} "
                                    f"faster: beyond the fitted sizes the line held for "
                                    f"none of them in this run, or this run drifted from "
                                    f"the fit's (each run is a job of its own)")
    return Verdict("mixed", f"at {size} {inside} of {len(ratios)} collectives landed "
                            f"inside their fits' spread, {len(slower)} slower and "
                            f"{len(faster)} faster: beyond the fitted sizes the line held "
                            f"for some collectives in this run and not for others, or the "
                            f"run drifted from the fit's")
