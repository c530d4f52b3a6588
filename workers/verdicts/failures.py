"""What the failures page says about a mismatch's ranks: whether both waited for the timeout
or one left first, which depends on when each entered its collective (the machine's
scheduling), so both outcomes are worded here."""

from __future__ import annotations

from collections.abc import Sequence

from workers.verdicts import Verdict, verdict


@verdict(
    both=dict(seconds=[1.02, 1.03], timed_out=[True, True]),
    one=dict(seconds=[1.02, 1.31], timed_out=[True, False]),
)
def mismatch_waits(seconds: Sequence[float], timed_out: Sequence[bool]) -> Verdict:
    """A plain mismatch, each rank's seconds in its collective and whether its error was a
    timeout (at least one is: nothing else ends a wait for a message that never comes)."""
    if all(timed_out):
        return Verdict("both", f"both ranks waited {min(seconds):.1f} s and both timed "
                               "out, with a message that names neither the mismatch nor a "
                               "rank")
    first = timed_out.index(True)
    other = 1 - first
    return Verdict("one", f"rank {first} waited {seconds[first]:.1f} s and timed out, with "
                          "a message that names neither the mismatch nor a rank; rank "
                          f"{other}'s collective failed after {seconds[other]:.1f} s "
                          "without timing out, its peer gone")
