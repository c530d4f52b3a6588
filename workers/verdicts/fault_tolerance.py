"""What the fault-tolerance page says about its runs: the price of a healthy torchft step
against plain DDP's, how soon each job went on after the same failure, how far each got in
the same time after it, and whether the group killed by hand came back in time to heal.
Times in seconds."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from workers.verdicts import NOISE, Verdict, as_long, counted, order, ratio, verdict


@verdict(
    costlier=dict(ddp=[0.0021, 0.0022, 0.0020], torchft=[0.0074, 0.0080, 0.0077]),
    costlier_close=dict(ddp=[0.00440, 0.00441, 0.00442],
                        torchft=[0.00454, 0.00455, 0.00456]),
    cheaper=dict(ddp=[0.0090, 0.0093, 0.0095], torchft=[0.0061, 0.0064, 0.0060]),
    inside=dict(ddp=[0.0050, 0.0062, 0.0071], torchft=[0.0055, 0.0060, 0.0068]),
)
def healthy_step(ddp: Sequence[float], torchft: Sequence[float]) -> Verdict:
    """A step with no failure, under plain DDP and under torchft, at the same sizes: the
    median of each block of steps (repeats of the median, whose spread is the run's). From
    five blocks on, each run's fastest and slowest block are set aside before the ranges are
    compared, so that one disturbed block cannot hide a difference of several times."""
    d, t = statistics.median(ddp), statistics.median(torchft)
    medians = f"(medians {1000 * t:.2f} ms and {1000 * d:.2f} ms)"
    where = order(middle(torchft), middle(ddp))
    if where == "higher":
        longer = as_long(t, d)  # "3.1 times as long", or "3.3% longer" when close
        than = "than" if longer.endswith("longer") else "as"
        return Verdict("costlier_close" if than == "than" else "costlier",
                       f"a healthy step took {longer} under torchft {than} under plain "
                       f"DDP {medians}, beyond the spread of the run's repeats")
    if where == "lower":
        return Verdict("cheaper", f"a healthy step took less time under torchft than under "
                                  f"plain DDP here {medians}, beyond the spread of the "
                                  "repeats, which torchft's extra work cannot explain: "
                                  "something else slowed the DDP run, which this page does "
                                  "not measure")
    return Verdict("inside", f"this run cannot tell a healthy step under torchft from one "
                             f"under plain DDP {medians}: the repeats overlap, {NOISE}")


def middle(blocks: Sequence[float]) -> list[float]:
    """The blocks without the fastest and the slowest, from five blocks on."""
    return sorted(blocks)[1:-1] if len(blocks) >= 5 else list(blocks)


@verdict(
    torchft_sooner=dict(torchrun=5.8, torchft=1.05, heartbeat=1.0),
    torchrun_sooner=dict(torchrun=0.9, torchft=6.1, heartbeat=5.0),
    close=dict(torchrun=1.3, torchft=1.1, heartbeat=1.0),
)
def went_on(torchrun: float, torchft: float, heartbeat: float) -> Verdict:
    """Seconds from the kill until each job had finished a step again (the one killed run
    of each: one measurement, so only a difference of half or more is called one)."""
    said = (f"torchft's surviving group had finished a step again {torchft:.2f} s after "
            f"the kill, torchrun's restarted job {torchrun:.2f} s after it")
    lighthouse = (f"the lighthouse gives up on a group after {heartbeat:g} s without a "
                  "heartbeat")
    if torchrun > 1.5 * torchft:
        default = 5.0  # the lighthouse's --heartbeat_timeout_ms default, in seconds
        slower = (f" (at the default of {default:g} s, torchft's wait would have outlasted "
                  "torchrun's restart)" if torchft - heartbeat + default > torchrun else "")
        # ratio() says one decimal: never "1.0 times" here, where it is at least 1.5
        return Verdict("torchft_sooner", f"{said}, {ratio(torchrun, torchft)} as long. "
                                         f"torchft's wait was the lighthouse's: "
                                         f"{lighthouse}{slower}; torchrun's was starting "
                                         "two new processes, each importing PyTorch")
    if torchft > 1.5 * torchrun:
        return Verdict("torchrun_sooner", f"{said}: torchrun went on first this time, "
                                          f"since {lighthouse}")
    return Verdict("close", f"{said}: within half of each other, too close to call from "
                            "one failure each")


@verdict(
    torchft_more=dict(seconds=3.1, torchrun=-10, torchft=150),
    torchrun_more=dict(seconds=3.1, torchrun=120, torchft=40),
    same=dict(seconds=3.1, torchrun=150, torchft=150),
)
def in_the_same_time(seconds: float, torchrun: int, torchft: int) -> Verdict:
    """Steps each job had gained, beyond those done when the kill came, ``seconds`` after
    it (negative: a restarted job still computing again the steps since its checkpoint)."""

    def gained(count: int) -> str:
        if count < 0:
            return (f"was still {-count} step{'s' * (count != -1)} behind where it had "
                    "been (computing again what its checkpoint had not kept)")
        return f"had gained {count} step{'s' * (count != 1)}"

    said = (f"In the {seconds:.2f} s after the kill, torchft's job {gained(torchft)}, "
            f"torchrun's {gained(torchrun)}")
    if torchft > torchrun:
        return Verdict("torchft_more", f"{said}.")
    if torchrun > torchft:
        return Verdict("torchrun_more", f"{said}: torchrun got further this time.")
    return Verdict("same", f"{said}: as far as each other.")


@verdict(
    healed=dict(kill_step=300, first_again=900, alone=(400, 700)),
    too_late=dict(kill_step=300, first_again=100, alone=(400, 1500)),
    not_started=dict(kill_step=300, first_again=None, alone=(400, 1500)),
)
def by_hand(kill_step: int, first_again: int | None,
            alone: tuple[int, int] | None) -> Verdict:
    """What the group killed by hand did when started again: the first step it printed
    (None: it was not started again), and the first and last steps group 0 printed in a
    quorum of its own (None: it printed none)."""
    steps = (f"step {alone[0]}" if alone and alone[0] == alone[1] else
             f"steps {alone[0]} to {alone[1]}" if alone else "")
    alone_said = (f"group 0 printed {steps} in a quorum of its own"
                  if alone else "group 0 printed no step in a quorum of its own")
    if first_again is None:
        return Verdict("not_started", f"Group 1 was not started again, and {alone_said}.")
    if first_again > kill_step:
        return Verdict("healed", f"Meanwhile {alone_said}. Group 1, started again, printed "
                                 f"step {first_again} first: in the quorum it joined, it "
                                 "received group 0's weights and optimizer state, and "
                                 "trained on from there.")
    return Verdict("too_late", f"Then {alone_said}, and finished before group 1, started "
                               "again, could join: group 1 found no peer to heal from and "
                               f"trained alone from the start (its first line: step "
                               f"{first_again}).")


@verdict(
    one=dict(count=1),
    several=dict(count=3),
    none=dict(count=0),
)
def not_committed(count: int) -> Verdict:
    """How many of group 0's steps were not committed and were done again, in the run with
    the failure (the step it was in when group 1 died is one; a machine's load can add
    more: an all-reduce that timed out, a vote that failed)."""
    if count == 1:
        return Verdict("one", "One step, the one it was in when group 1 died, was not "
                              "committed and was done again.")
    if count > 1:
        return Verdict("several", f"{count} steps were not committed: the one it was in "
                                  f"when group 1 died, and {count - 1} more whose "
                                  "all-reduce or vote failed (a step not committed is done "
                                  "again with the same data, unless a peer committed it: "
                                  "then the group is behind at the next quorum and heals "
                                  "instead).")
    return Verdict("none", "No step of group 0 had to be done again.")


@verdict(
    once=dict(steps=[75], after=[74], final=150),
    at_the_end=dict(steps=[149], after=[0], final=150),
    again=dict(steps=[75, 90], after=[14, 59], final=150),
)
def healed(steps: Sequence[int], after: Sequence[int], final: int) -> Verdict:
    """The steps at which the group that came back healed, the steps it committed after
    each heal (until the next, or the end), and the step the job ended at."""
    if len(steps) == 1 and after[0] > 0:
        return Verdict("once", f"It healed once, and then committed "
                               f"{counted(after[0], 'step')} of its own with group 0, to "
                               f"the end at step {final}.")
    if len(steps) == 1:
        return Verdict("at_the_end", "It healed once, into the job's last steps, and "
                                     f"committed no step of its own before the end at step "
                                     f"{final}: the job ends only in a quorum of both "
                                     "groups at the same step, so it still ended with "
                                     "group 0's weights.")
    listed = ", ".join(str(step) for step in steps[:-1]) + f" and {steps[-1]}"
    return Verdict("again", f"It healed {len(steps)} times, at steps {listed}: after a "
                            "heal it missed a commit that group 0 made (each group votes "
                            "on its own), was behind at the next quorum, and healed "
                            f"again. It committed {counted(sum(after), 'step')} of its "
                            f"own in all, to the end at step {final}.")


@verdict(
    none=dict(heals=[]),
    late_start=dict(heals=[(0, 1, 0)]),
    missed=dict(heals=[(0, 93, 92)]),
    both=dict(heals=[(1, 2, 0), (0, 93, 92)]),
)
def other_heals(heals: Sequence[tuple[int, int, int]]) -> Verdict:
    """The heals that were not the killed group's return: for each, the group, the step it
    healed at, and how many steps that group had committed before it."""
    if not heals:
        return Verdict("none", "No group healed at any other step.")
    said, kinds = [], set()
    for group, step, before in heals:
        if before == 0:
            kinds.add("late_start")
            said.append(f"Group {group} healed at step {step} too, having committed no "
                        f"step yet: it asked for its first quorum after its peer had "
                        f"committed a step without it, and began behind.")
        else:
            kinds.add("missed")
            said.append(f"Group {group} healed at step {step} too: it missed a commit "
                        f"that its peer made (each group votes on its own) and was behind "
                        f"at the next quorum.")
    return Verdict("both" if len(kinds) == 2 else kinds.pop(), " ".join(said))


@verdict(
    went_on=dict(last_step=400, printed_after=True),
    done_before=dict(last_step=400, printed_after=False),
)
def after_the_kill(last_step: int, printed_after: bool) -> Verdict:
    """Whether group 0 printed any step after group 1 was killed by hand, and its last."""
    if printed_after:
        return Verdict("went_on", f"After the kill, group 0 went on to step {last_step}.")
    return Verdict("done_before", f"Group 0 had printed its last step, {last_step}, before "
                                  "group 1 was killed, so this run shows nothing going on "
                                  "after the failure: run it again.")
