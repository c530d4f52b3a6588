"""Wrong: the all-gather sends chunk (rank - step) instead of (rank - step + 1): an
off-by-one chunk index."""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = tensor.chunk(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    incoming = torch.empty_like(chunks[0])
    for step in range(n - 1):
        sending = dist.isend(chunks[(rank - step) % n], dst=right)
        dist.recv(incoming, src=left)
        sending.wait()
        chunks[(rank - step - 1) % n].add_(incoming)
    for step in range(n - 1):
        sending = dist.isend(chunks[(rank - step) % n], dst=right)
        dist.recv(incoming, src=left)
        sending.wait()
        chunks[(rank - step - 1) % n].copy_(incoming)
