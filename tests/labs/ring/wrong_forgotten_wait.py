"""Wrong: the isend's Work is never waited for."""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = tensor.chunk(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    incoming = torch.empty_like(chunks[0])
    for step in range(n - 1):
        dist.isend(chunks[(rank - step) % n].clone(), dst=right)
        dist.recv(incoming, src=left)
        chunks[(rank - step - 1) % n].add_(incoming)
    for step in range(n - 1):
        dist.isend(chunks[(rank - step + 1) % n].clone(), dst=right)
        dist.recv(incoming, src=left)
        chunks[(rank - step) % n].copy_(incoming)
