"""What the introduction says about this machine's cores against the ranks of the book's
runs: the larger runs share them where there are fewer cores than ranks; every rank can
have one of its own where there are as many."""

from __future__ import annotations

from workers.verdicts import Verdict, verdict


@verdict(
    shared=dict(cores=2, most_ranks=8),
    own=dict(cores=64, most_ranks=8),
)
def cores_for_ranks(cores: int, most_ranks: int) -> Verdict:
    """This machine's cores (hyper-threads counted once) against the most ranks one run of
    the book starts."""
    if cores < most_ranks:
        text = (f"Runs of more than {cores} ranks (the book's largest have {most_ranks}) "
                "start more processes than this machine has cores: they share the cores, "
                "and their times include waiting for one, which the chapters that measure "
                "say where it matters.")
        return Verdict("shared", text)
    text = (f"This machine has {cores} cores, at least as many as the book's largest run "
            f"has ranks ({most_ranks}): every rank can have a core of its own. Where a "
            "chapter's times include waiting for a core, it says so.")
    return Verdict("own", text)
