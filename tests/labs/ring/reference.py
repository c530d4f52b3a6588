"""The reference solution of the ring lab: it must pass."""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = tensor.chunk(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    incoming = torch.empty_like(chunks[0])
    for step in range(n - 1):  # reduce-scatter: rank r ends with chunk (r + 1) % n summed
        sending = dist.isend(chunks[(rank - step) % n], dst=right)
        dist.irecv(incoming, src=left).wait()
        sending.wait()
        chunks[(rank - step - 1) % n].add_(incoming)
    for step in range(n - 1):  # all-gather: pass the summed chunks round
        sending = dist.isend(chunks[(rank - step + 1) % n], dst=right)
        dist.irecv(incoming, src=left).wait()
        sending.wait()
        chunks[(rank - step) % n].copy_(incoming)
