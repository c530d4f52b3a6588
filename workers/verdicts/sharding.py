"""What the sharding chapter says about what its runs measured: how far float32 training
with each strategy ended from DDP's, and whether keeping FSDP2's parameters after forward
saved time. Both depend on the machine: which ReLU input rounding tips over its kink depends
on the order in which the machine's matmuls sum, and the time on its cores."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from workers.verdicts import NOISE, Verdict, as_long, close, meet_as_shown, order, verdict


def _value(x: float) -> str:
    """A ReLU input as the text says it: ``1.5e-08``, ``-3.0e-09``, or ``exactly 0``."""
    return "exactly 0" if x == 0 else f"{x:.1e}"


def _names(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _from_ddp(largest: float) -> str:
    """How far final weights ended from DDP's, and why, when no ReLU input tipped."""
    if largest == 0:
        return ("exactly at DDP's, bit for bit: here every sum taken in another order "
                "rounded alike")
    return (f"at most {largest:.1e} from DDP's: the rounding of sums taken in another "
            f"order, as the data-parallel chapter measured")


@verdict(
    rounding=dict(runs=["ZeRO-1 on 2 ranks", "ZeRO-3 on 4 ranks"],
                  differences=[0.0, 1.1e-07], tipped=[0, 0]),
    identical=dict(runs=["ZeRO-1 on 2 ranks", "ZeRO-3 on 4 ranks"],
                   differences=[0.0, 0.0], tipped=[0, 0]),
    some_tipped=dict(runs=["ZeRO-1 on 2 ranks", "FSDP2 with reshard_after_forward=False on "
                           "4 ranks", "ZeRO-3 on 4 ranks"],
                     differences=[1.1e-07, 2.6e-04, 3.1e-04], tipped=[0, 1, 3]),
    all_tipped=dict(runs=["ZeRO-1 on 4 ranks", "ZeRO-3 on 4 ranks"],
                    differences=[2.6e-04, 3.1e-04], tipped=[2, 1]),
)
def equal_in_float32(runs: Sequence[str], differences: Sequence[float],
                     tipped: Sequence[int]) -> Verdict:
    """The float32 runs of every sharded strategy against DDP's: each run's name, the
    largest difference of its final weights from DDP's on any rank, and how many ReLU
    inputs landed on the other side of the kink at 0 from the same input in DDP's run."""
    kept = [d for d, t in zip(differences, tipped, strict=True) if not t]
    over = [(r, d) for r, d, t in zip(runs, differences, tipped, strict=True) if t]
    if not over:
        return Verdict("rounding" if max(kept) else "identical",
                       f"Every strategy's final weights, on every rank of both runs, ended "
                       f"{_from_ddp(max(kept))}.")
    why = (f"a ReLU input landed on the other side of its kink at zero from DDP's, and the "
           f"weights ended up to {max(d for _, d in over):.0e} from DDP's (below: how "
           f"rounding does that)")
    if not kept:
        return Verdict("all_tipped", f"In every sharded run here, {why}.")
    return Verdict("some_tipped", f"In {_names([r for r, _ in over])}, {why}. Every other "
                                  f"run's final weights ended {_from_ddp(max(kept))}.")


_ADAM = ("Adam, which divides each gradient by its own running size, {verb} the changed "
         "gradient into a step as large as the learning rate, {lr:g}")


@verdict(
    tipped=dict(drift=2.6e-04, tipped_runs=5, runs=6,
                strategy="FSDP2 with reshard_after_forward=False", rank=1, step=3,
                ddp_input=1.5e-08, other_input=0.0, nearest=1.5e-08, nearest_rank=1,
                lr=1e-3, eps=1.2e-07),
    rounding=dict(drift=1.5e-08, tipped_runs=0, runs=6, strategy=None, rank=None, step=None,
                  ddp_input=None, other_input=None, nearest=4.8e-08, nearest_rank=1,
                  lr=1e-3, eps=1.2e-07),
    identical=dict(drift=0.0, tipped_runs=0, runs=6, strategy=None, rank=None, step=None,
                   ddp_input=None, other_input=None, nearest=4.8e-08, nearest_rank=1,
                   lr=1e-3, eps=1.2e-07),
)
def padded_float32(drift: float, tipped_runs: int, runs: int, strategy: str | None,
                   rank: int | None, step: int | None, ddp_input: float | None,
                   other_input: float | None, nearest: float, nearest_rank: int, lr: float,
                   eps: float) -> Verdict:
    """The padded run in float32: ``drift``, the largest difference of any strategy's final
    weights from DDP's; ``tipped_runs`` of the ``runs`` sharded strategies had a ReLU input
    on the other side of the kink at 0 from DDP's, the first of them at ``step`` on
    ``rank`` in ``strategy``'s run (DDP's value, the strategy's); ``nearest``, the input
    DDP's run computed nearest to the kink (on ``nearest_rank``); Adam's ``lr``; float32's
    ``eps``."""
    spacing = f"float32 spaces numbers near 1 by {eps:.0e}"
    if tipped_runs:
        return Verdict("tipped", (
            f"In float32 the same training ended {drift:.0e} apart: in {tipped_runs} of "
            f"the {runs} sharded strategies' runs, a ReLU input landed on the other side "
            f"of its kink at zero from DDP's. The first, at step {step} on rank {rank}: "
            f"DDP's run computed it as {_value(ddp_input)}, the run of {strategy} as "
            f"{_value(other_input)}, a difference the rounding of the sums made "
            f"({spacing}). That ReLU passed its gradient in one run and not in the other, "
            f"and " + _ADAM.format(verb="turned", lr=lr) + "."))
    ended = (f"{drift:.0e} apart here, rounding too" if drift
             else "with DDP's weights here, bit for bit")
    return Verdict("rounding" if drift else "identical", (
        f"In float32 the same training ended {ended}: no ReLU input landed on the other "
        f"side of its kink at zero from DDP's. The nearest to it, on rank {nearest_rank}, "
        f"was {_value(nearest)} in DDP's run ({spacing}). Where rounding does tip one, in "
        f"another run or on a machine whose matmuls sum in another order, that ReLU passes "
        f"its gradient in one run and not in the other, and "
        + _ADAM.format(verb="turns", lr=lr) + ": the weights then end far apart."))


@verdict(
    lower=dict(default_ms=[40.0, 42.0, 45.0], kept_ms=[50.0, 52.0, 55.0]),
    lower_close=dict(default_ms=[149.0, 150.0, 151.0], kept_ms=[153.0, 154.0, 155.0]),
    lower_just=dict(default_ms=[40.0, 42.0, 49.8], kept_ms=[50.1, 52.0, 55.0]),
    higher=dict(default_ms=[60.0, 62.0, 65.0], kept_ms=[50.0, 52.0, 55.0]),
    higher_close=dict(default_ms=[153.0, 154.0, 155.0], kept_ms=[149.0, 150.0, 151.0]),
    higher_just=dict(default_ms=[55.4, 62.0, 65.0], kept_ms=[50.0, 52.0, 55.3]),
    inside=dict(default_ms=[50.0, 58.0, 61.0], kept_ms=[49.0, 55.0, 60.0]),
)
def reshard_timing(default_ms: Sequence[float], kept_ms: Sequence[float]) -> Verdict:
    """Each timed step of FSDP2 with the default ``reshard_after_forward=True`` against
    ``False`` (keeping), in ms: which was faster, and whether beyond the spread of the
    steps. Plain text: a glued sentence shows no Markdown."""
    where = order(default_ms, kept_ms)
    default, kept = statistics.median(default_ms), statistics.median(kept_ms)
    if where != "inside" and meet_as_shown(default_ms, kept_ms, lambda ms: f"{ms:.0f}"):
        faster, slower = ((default_ms, kept_ms) if where == "lower"
                          else (kept_ms, default_ms))
        name = "the default" if where == "lower" else "keeping"
        return Verdict(f"{where}_just", f"{name} was faster in every step, but only just: "
                                        f"the ranges meet at whole ms (its slowest step "
                                        f"{max(faster):.1f} ms, the other's fastest "
                                        f"{min(slower):.1f} ms), too close to say more")
    if where == "lower":
        return Verdict("lower_close" if close(kept, default) else "lower",
                       f"the default was faster in every step (keeping took "
                       f"{as_long(kept, default)}): keeping the parameters saved an "
                       f"all-gather, but not time, on this machine")
    if where == "higher":
        return Verdict("higher_close" if close(default, kept) else "higher",
                       f"keeping was faster in every step (the default took "
                       f"{as_long(default, kept)}): the all-gather it saved was time saved")
    return Verdict("inside", f"the ranges overlap, {NOISE}")
