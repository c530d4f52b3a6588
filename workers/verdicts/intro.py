"""What the introduction says about this machine's cores: a run of more ranks than there
are cores shares them, and its times include waiting for one."""

from __future__ import annotations

from workers.verdicts import Verdict, verdict


@verdict(
    one=dict(cores=1),
    several=dict(cores=16),
)
def cores_for_ranks(cores: int) -> Verdict:
    """This machine's cores (hyper-threads counted once), against the ranks a run starts."""
    if cores == 1:
        return Verdict("one", "This machine has one core (hyper-threads counted once): "
                              "every run of two or more ranks shares it, and its times "
                              "include waiting for it.")
    return Verdict("several", f"This machine has {cores} cores (hyper-threads counted "
                              f"once): a run of more than {cores} ranks starts more "
                              "processes than there are cores, which then share them, and "
                              "its times include waiting for one.")
