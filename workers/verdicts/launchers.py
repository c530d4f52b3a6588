"""What the launchers page says about its runs: whether mp.spawn's weights matched the other
launchers' (it depends on the thread counts the machine and its environment give), and
whether torchrun's unbuffered ranks ran their lines together (a race)."""

from __future__ import annotations

from workers.verdicts import Verdict, verdict


def _threads(count: int) -> str:
    return "1 thread" if count == 1 else f"{count} threads"


@verdict(
    rounding=dict(difference=1.5e-7, spawn_threads=2, launcher_threads=1),
    unexplained=dict(difference=2.0e-8, spawn_threads=1, launcher_threads=1),
    identical=dict(difference=0.0, spawn_threads=16, launcher_threads=1),
)
def spawn_weights(difference: float, spawn_threads: int, launcher_threads: int) -> Verdict:
    """mp.spawn's trained weights against torchrun's (largest difference), with the threads
    each of their ranks computed with. Markdown: a page glues it with ``glue:md``."""
    if difference == 0:
        return Verdict("identical", f"`mp.spawn`'s were identical too "
                                    f"({_threads(spawn_threads)} per rank, against the "
                                    f"others' {launcher_threads}).")
    said = f"`mp.spawn`'s ended {difference:.1e} from them."
    if spawn_threads != launcher_threads:
        return Verdict("rounding", f"{said} That difference is rounding, not the "
                                   "launcher's doing: `mp.spawn` hands its ranks the "
                                   "parent's environment unchanged, so they computed with "
                                   f"{_threads(spawn_threads)}, the others with "
                                   f"{launcher_threads}, which sum in another order.")
    return Verdict("unexplained", f"{said} Its ranks computed with as many threads as the "
                                  f"others ({spawn_threads}), so the thread count does not "
                                  "explain it; it is far below the weights' own size, as "
                                  "rounding is.")


@verdict(together=dict(ran_together=True), apart=dict(ran_together=False))
def torchrun_lines(ran_together: bool) -> Verdict:
    """Whether two of torchrun's ranks wrote their lines onto one line in this build."""
    if ran_together:
        return Verdict("together", "In this build's run two ranks' lines ran together "
                                   "(open the output above)")
    return Verdict("apart", "In this build's run they happened not to")
