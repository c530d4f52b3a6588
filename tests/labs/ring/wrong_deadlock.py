"""Wrong: every rank receives before it sends, with blocking calls: nobody ever sends."""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = tensor.chunk(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    incoming = torch.empty_like(chunks[0])
    for step in range(n - 1):
        dist.recv(incoming, src=left)
        dist.send(chunks[(rank - step) % n], dst=right)
        chunks[(rank - step - 1) % n].add_(incoming)
    for step in range(n - 1):
        dist.recv(incoming, src=left)
        dist.send(chunks[(rank - step + 1) % n], dst=right)
        chunks[(rank - step) % n].copy_(incoming)
