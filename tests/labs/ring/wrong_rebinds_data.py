"""Wrong: the ring sums a copy, then rebinds ``tensor.data`` to it: the name's storage
changes, but the caller's tensor (and every view of it) keeps the old values."""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    total = tensor.clone()
    chunks = total.chunk(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    incoming = torch.empty_like(chunks[0])
    for step in range(n - 1):
        sending = dist.isend(chunks[(rank - step) % n], dst=right)
        dist.irecv(incoming, src=left).wait()
        sending.wait()
        chunks[(rank - step - 1) % n].add_(incoming)
    for step in range(n - 1):
        sending = dist.isend(chunks[(rank - step + 1) % n], dst=right)
        dist.irecv(incoming, src=left).wait()
        sending.wait()
        chunks[(rank - step) % n].copy_(incoming)
    tensor.data = total
