"""What the multi-node page says about its Slurm run: whether this machine could run a local
two-node cluster at all (Slurm installed, and the build running as root), from the one line
``scripts/local_slurm.sh check`` prints."""

from __future__ import annotations

from workers.verdicts import Verdict, verdict


@verdict(
    ran=dict(why_not=""),
    missing=dict(why_not="Slurm is not installed here (no munged slurmd): see "
                         "scripts/local_slurm.sh"),
    no_root=dict(why_not="Slurm is installed, but a local cluster needs root (slurmd "
                         "starts each job as its user)"),
    other=dict(why_not="no munge key could be made"),
)
def slurm_here(why_not: str) -> Verdict:
    """Whether this build ran the local Slurm cluster: ``why_not`` is what
    ``local_slurm.sh check`` printed (nothing when it can run). A sentence."""
    if not why_not:
        return Verdict("ran", "This build ran it, as root, with Slurm installed: the cell "
                              "below shows the job's output and its final state.")
    if "not installed" in why_not:
        return Verdict("missing", "This build skipped it: Slurm is not installed here, "
                                  "and the cell below says which of its programs are "
                                  "missing.")
    if "needs root" in why_not:
        return Verdict("no_root", "This build skipped it: Slurm is installed, but the "
                                  "build ran without root, and a local cluster needs root, "
                                  "since slurmd starts each job as the job's user. Nothing "
                                  "else on this page needs root.")
    return Verdict("other", f"This build skipped it: {why_not}.")
