"""What the finding-each-other page says about its arrival run: how long a group took to
form with rank 0 at the store first, and with rank 0 last."""

from __future__ import annotations

from collections.abc import Sequence

from workers.verdicts import NOISE, Verdict, meet_as_shown, order, verdict


def ms_range(values: Sequence[float]) -> str:
    """``"5 to 9 ms"``, or ``"5 ms (every repeat)"`` where the ends read the same."""
    low, high = f"{min(values):,.0f}", f"{max(values):,.0f}"
    return f"{low} ms (every repeat)" if low == high else f"{low} to {high} ms"


@verdict(
    higher=dict(first=[17.0, 6.0, 6.0], last=[609.0, 392.0, 546.0], late=0.1,
                client_ms=[708.0, 708.0, 708.0, 491.0, 491.0, 492.0, 645.0, 645.0, 646.0]),
    higher_near=dict(first=[5.2, 5.4, 4.8], last=[1009.0, 1012.0, 1030.0], late=1.0,
                     client_ms=[1010.0, 1020.0, 1030.0] * 3),
    inside=dict(first=[17.0, 260.0, 6.0], last=[30.0, 392.0, 20.0], late=0.1,
                client_ms=[120.0, 130.0, 125.0, 491.0, 491.0, 492.0, 110.0, 118.0, 120.0]),
    lower=dict(first=[400.0, 390.0, 410.0], last=[20.0, 22.0, 25.0], late=0.1,
               client_ms=[120.0, 130.0, 125.0, 121.0, 119.0, 122.0, 110.0, 118.0, 120.0]),
)
def arrival(first: Sequence[float], last: Sequence[float], late: float,
            client_ms: Sequence[float]) -> Verdict:
    """How long after the last rank's call the group was complete (ms), per repeat, with
    rank 0 arriving first and with rank 0 arriving last, ``late`` seconds after the others;
    and each other rank's time inside ``init_process_group`` in the joins with rank 0
    last."""
    said = (f"With rank 0 first, the group was complete {ms_range(first)} after the last "
            f"rank arrived; with rank 0 last, {ms_range(last)} after rank 0 arrived")
    early = (f"The other ranks, there {1000 * late:,.0f} ms ahead of rank 0, spent "
             f"{ms_range(client_ms)} inside `init_process_group`")
    longer = min(client_ms) >= 2 * 1000 * late  # "far longer" only where it is
    where = order(last, first)
    just = " just" if meet_as_shown(last, first, lambda ms: f"{ms:,.0f}") else ""
    if where == "higher":
        return Verdict("higher" if longer else "higher_near",
                       f"{said},{just} longer in every repeat. {early}: "
                       + ("far longer than they were early." if longer else
                          "about as long as they were early, or not much longer."))
    if where == "lower":
        return Verdict("lower", f"{said}: here the joins with rank 0 last were complete "
                                f"{just.strip() + ' ' if just else ''}sooner, in every "
                                f"repeat. {early}: whether they waited out the backoff "
                                f"below, this run does not show.")
    return Verdict("inside", f"{said}: the two overlap, {NOISE}. {early}: whether they "
                             f"waited out the backoff below, this run does not show.")


@verdict(
    both=dict(gloo_minutes=30.0, nccl_minutes=10.0),
    no_nccl=dict(gloo_minutes=30.0, nccl_minutes=None),
)
def default_timeouts(gloo_minutes: float, nccl_minutes: float | None) -> Verdict:
    """This installation's default timeouts of a process group, in minutes:
    ``torch.distributed.constants.default_pg_timeout`` and ``default_pg_nccl_timeout``,
    which is None in a build without NCCL (the CPU wheels, aarch64's CPU builds)."""
    if nccl_minutes is None:
        return Verdict("no_nccl", f"default of {gloo_minutes:g} minutes for `gloo` (this "
                                  "build of PyTorch has no `nccl`, and so no default of "
                                  "its own for it)")
    return Verdict("both", f"defaults of {gloo_minutes:g} minutes for `gloo` and "
                           f"{nccl_minutes:g} for `nccl`")


@verdict(
    banner=dict(banner=True, preset=None),
    preset=dict(banner=False, preset="4"),
    quiet=dict(banner=False, preset=None),
)
def torchrun_threads(banner: bool, preset: str | None) -> Verdict:
    """What ``torchrun`` did about ``OMP_NUM_THREADS`` in a run of two processes per node:
    whether its output had the banner, and the value the environment already gave the
    variable (None where it was unset). ``torch/distributed/run.py`` sets it to 1, with
    the banner, only where it is unset and more than one process runs per node."""
    why = "so that processes sharing a machine do not oversubscribe its cores"
    where = "where the variable is not set and more than one process runs per machine"
    sets = "it sets `OMP_NUM_THREADS=1` for every process"
    if banner:
        return Verdict("banner", "The `OMP_NUM_THREADS` warning `torchrun` printed is its "
                                 f"own: {where}, {sets}, {why}.")
    if preset is not None:
        return Verdict("preset", "`torchrun` printed no `OMP_NUM_THREADS` warning here: "
                                 "this build's environment had set `OMP_NUM_THREADS="
                                 f"{preset}`, which it passes on to the ranks unchanged. "
                                 f"W{where[1:]}, {sets}, {why}, and prints a warning "
                                 "saying so.")
    return Verdict("quiet", "`torchrun` set `OMP_NUM_THREADS=1` for every process here, as "
                            f"it does {where}, {why}; the warning it prints to say so did "
                            "not appear in this run's output.")


@verdict(
    below=dict(start=32768, low=24576, high=32767),
    os_pick=dict(start=1024, low=0, high=0),
)
def port_choice(start: int, low: int, high: int) -> Verdict:
    """How ``workers.ranks.free_port`` picked every port of the page's runs: at random
    from ``low`` to ``high``, just below ``start``, where this machine's range of outgoing
    ports begins; or the operating system's pick (``low == high == 0``) where that range
    begins too low to leave room below it."""
    if low == high == 0:
        return Verdict("os_pick", "the runner asks the operating system for a free port "
                                  "(a bind to port 0, read back, closed) and passes it "
                                  "as `MASTER_PORT`. On most machines it does not: this "
                                  "one's range of ports for outgoing connections begins "
                                  f"at {start}, too low to leave room for its usual "
                                  "choice below that range, so the port comes from the "
                                  "outgoing range, where any program's next connection "
                                  "could take it")
    return Verdict("below", f"the runner picks one of the {high - low + 1:,} ports just "
                            f"below {start}, where this machine's ports for outgoing "
                            "connections begin, checks that it can bind it, and passes it "
                            "as `MASTER_PORT`; a port the system picks (a bind to port 0) "
                            "comes from the outgoing range, where any program's next "
                            "connection could take it")
