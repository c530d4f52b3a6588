"""What the process-groups page says about what this machine could set up."""

from __future__ import annotations

from workers.verdicts import Verdict, verdict


@verdict(
    worked=dict(ok=True, result="cpu:gloo,cuda:nccl", gpus=2),
    no_gpu=dict(ok=False, result="RuntimeError: nccl2 requires at least one CUDA device",
                gpus=0),
    failed=dict(ok=False, result="RuntimeError: NCCL error: unhandled system error",
                gpus=2),
)
def both_backends(ok: bool, result: str, gpus: int) -> Verdict:
    """What asking ``init_process_group`` (or ``new_group``) for ``cpu:gloo,cuda:nccl`` gave
    here: ``result`` is the backend set up, or the error. A clause in parentheses."""
    if ok:
        return Verdict("worked", f"here it set up {result}")
    if gpus == 0:
        return Verdict("no_gpu", "here it failed for want of a GPU")
    return Verdict("failed", f"here it failed, though this machine has {gpus} "
                             f"GPU{'s' if gpus != 1 else ''}: {result}")


@verdict(
    made=dict(groups={"[0, 2]": 4.0, "[1, 3]": 6.0}, error=None, release="2.15.0"),
    refused=dict(groups={}, release="2.14.1",
                 error="RuntimeError: No device associated with the default pg, not safe "
                       "to split any process groups"),
)
def split_group_here(groups: dict[str, float], error: str | None, release: str) -> Verdict:
    """What ``split_group`` did in this build: each group it made (its ranks, as text) with
    the sum its members' ``rank + 1`` all-reduced to, or the error every rank met."""
    if error is None:
        made = ", ".join(f"ranks {ranks} summed {total:g}"
                         for ranks, total in groups.items())
        return Verdict("made", f"Each rank got its own group from the one call: {made}.")
    return Verdict("refused", f"Here PyTorch {release} refused it ({error}): before 2.15, "
                              "split_group needs a default group bound to a GPU "
                              "(device_id), and this one is gloo's, on the CPU.")
