"""What the cost-model page says about its predictions: how far a model fitted at one world
size lands from what other world sizes measured depends on the machine (its cores above
all), so every comparison is worded here, one sentence per outcome."""

from __future__ import annotations

from collections.abc import Sequence

from workers.verdicts import Verdict, counted, verdict


def off_by(ratio: float) -> str:
    """``"1.8 times the prediction"`` or ``"0.6 of it"``: a measured / predicted ratio."""
    return f"{ratio:.1f} times" if ratio >= 1 else f"{ratio:.2f} of"


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
def held_out(world_size: int, cores: int, ratios: Sequence[float], spread: float) -> Verdict:
    """A world size the fit never saw: measured / predicted at each size (medians), against
    the fit's own spread (the largest relative miss at the points it was fitted on)."""
    if spread > LOOSE:
        return Verdict("loose", f"At {world_size} ranks the measurements were "
                                f"{ratio_range(ratios)} times the predictions, but the fit "
                                f"itself missed its own points by up to {spread:.0%}: too "
                                f"loose a fit to say whether the model carries over (its "
                                f"timings were noisy; a quieter run, or more trials, "
                                f"narrows it)")
    within = [abs(r - 1) <= spread for r in ratios]
    at = f"At {world_size} ranks the measurements were {ratio_range(ratios)} times the " \
         f"predictions"
    tolerance = f"the fit missed its own points by up to {spread:.0%}"
    crowded = world_size > cores
    if all(within):
        return Verdict("within", f"{at}: inside the spread, as {tolerance}. The model's "
                                 f"counts of steps and bytes carried over to {world_size} "
                                 f"ranks")
    cores_said = (f"{world_size} ranks on {counted(cores, 'core')}: each rank's thread and "
                  f"gloo's threads wait for a core, a cost no term of the model counts")
    if all(r > 1 + spread for r in ratios):
        if crowded:
            return Verdict("slower_oversubscribed", f"{at}: every one slower, beyond the "
                                                    f"spread ({tolerance}). {cores_said}")
        return Verdict("slower", f"{at}: every one slower, beyond the spread ({tolerance}), "
                                 f"with a core for every rank: a cost that grows with the "
                                 f"ranks faster than the model's steps and bytes (the "
                                 f"memory bandwidth the ranks share, or the operating "
                                 f"system's scheduling)")
    if all(r < 1 - spread for r in ratios):
        return Verdict("faster", f"{at}: every one faster, beyond the spread ({tolerance}): "
                                 f"the fitted alpha or beta was pessimistic, as a fit at one "
                                 f"world size can be when that run was slowed")
    inside = sum(within)
    some = (f"{at}: {inside} of {len(ratios)} inside the spread ({tolerance}), the rest "
            f"beyond it")
    if crowded:
        return Verdict("mixed_oversubscribed", f"{some}. {cores_said}, and how long they "
                                               f"wait differs from call to call")
    return Verdict("mixed", f"{some}: the model holds at some sizes and not at others, "
                            f"the sign of a regime it does not describe (latency at small "
                            f"sizes, memory bandwidth at large ones)")
