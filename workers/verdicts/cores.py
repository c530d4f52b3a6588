"""How a page names the cores it ran on: a core's hyper-threads counted once, within the
CPUs this process's affinity allows (``workers.ranks.affinity_cores``), and no more than a
CPU quota allows (``workers.ranks.cpu_quota``: ``docker --cpus``, a Kubernetes limit),
which leaves the affinity as it was. ``workers.ranks.physical_cores`` gives the same
count."""

from __future__ import annotations

import math
import os

from workers.ranks import affinity_cores, cpu_quota
from workers.verdicts import Verdict, verdict


def _cores(n: int) -> str:
    return "one core" if n == 1 else f"{n} cores"


def _cpus(n: int) -> str:
    return "one logical CPU" if n == 1 else f"{n} logical CPUs"


def quota_phrase(quota: float) -> str:
    """``"a CPU quota of 1 CPU"``, ``"a CPU quota of 1.5 CPUs"``."""
    return f"a CPU quota of {quota:g} CPU{'' if quota == 1 else 's'}"


@verdict(
    cores=dict(affinity=2, logical=2, quota=None),
    one=dict(affinity=1, logical=1, quota=None),
    hyper_threads=dict(affinity=8, logical=16, quota=None),
    one_hyper_threaded=dict(affinity=1, logical=2, quota=None),
    quota=dict(affinity=32, logical=64, quota=4.0),
    quota_one=dict(affinity=2, logical=2, quota=0.5),
)
def cores_here(affinity: int, logical: int, quota: float | None) -> Verdict:
    """The cores this process may keep busy, as a noun phrase ("2 cores", "one core (2
    logical CPUs, ...)"): ``affinity`` cores and ``logical`` CPUs in its affinity, and its
    CPU quota in CPUs (None where there is none)."""
    if quota is not None and quota < affinity:  # named even where it rounds up to them all
        n = max(1, math.ceil(quota))
        rounded = "" if n == quota else ", rounded up"
        outcome = "quota_one" if n == 1 else "quota"
        return Verdict(outcome, f"{_cores(n)} ({quota_phrase(quota)}{rounded}; the "
                                f"affinity allows {_cores(affinity)}, {_cpus(logical)})")
    if affinity < logical:
        if affinity == 1:
            return Verdict("one_hyper_threaded", f"one core ({_cpus(logical)}, "
                                                 "hyper-threads of that one core)")
        return Verdict("hyper_threads", f"{_cores(affinity)} ({_cpus(logical)}, "
                                        "hyper-threads counted once)")
    return Verdict("one" if affinity == 1 else "cores",
                   f"{_cores(affinity)} ({_cpus(logical)}, no hyper-threads)")


def cores_of_this_process() -> Verdict:
    """``cores_here`` for the process that calls it."""
    return cores_here(affinity_cores(), len(os.sched_getaffinity(0)), cpu_quota())
