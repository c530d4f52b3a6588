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
