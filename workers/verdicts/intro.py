"""What the introduction says about this machine's cores: a run of more ranks than there
are cores shares them, and its times include waiting for one."""

from __future__ import annotations

import math

from workers.verdicts import Verdict, verdict
from workers.verdicts.cores import quota_phrase


@verdict(
    one=dict(affinity=1),
    several=dict(affinity=16),
    quota_below_one=dict(affinity=16, quota=0.5),
    quota_one=dict(affinity=16, quota=1.0),
    quota=dict(affinity=64, quota=3.5),
)
def cores_for_ranks(affinity: int, quota: float | None = None) -> Verdict:
    """The cores (hyper-threads counted once) that this process's affinity allows, and
    its CPU quota in CPUs (None where there is none), against the ranks a run starts."""
    if quota is not None and quota < affinity:
        worth = "1 core's" if quota == 1 else f"{quota:g} cores'"
        limit = (f"A{quota_phrase(quota)[1:]} gives this build's processes {worth} worth "
                 f"of CPU time a second, of the {affinity} cores their CPU affinity allows")
        if quota < 1:
            return Verdict("quota_below_one", f"{limit}: even one busy rank is held to "
                                              "part of a core, and every run's times "
                                              "include waiting for the quota.")
        covered = math.floor(quota)  # 4 busy ranks need 4 CPUs' worth: more than 3.5
        runs = "two or more ranks" if covered == 1 else f"more than {covered} ranks"
        return Verdict("quota_one" if covered == 1 else "quota",
                       f"{limit}: a run of {runs} keeps more processes busy than the "
                       "quota covers, which then take turns, and its times include "
                       "waiting for one.")
    if affinity == 1:
        return Verdict("one", "This build may use one core (its CPU affinity, "
                              "hyper-threads counted once): every run of two or more "
                              "ranks shares it, and its times include waiting for it.")
    return Verdict("several", f"This build may use {affinity} cores (its CPU affinity, "
                              f"hyper-threads counted once): a run of more than {affinity} "
                              "ranks starts more processes than there are cores, which "
                              "then share them, and its times include waiting for one.")
