"""Wrong: the irecv's Work is dropped, and the buffer read as if the chunk had arrived."""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = tensor.chunk(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    for step in range(n - 1):
        incoming = torch.zeros_like(chunks[0])
        sending = dist.isend(chunks[(rank - step) % n], dst=right)
        dist.irecv(incoming, src=left)
        sending.wait()
        chunks[(rank - step - 1) % n].add_(incoming)
    for step in range(n - 1):
        incoming = torch.zeros_like(chunks[0])
        sending = dist.isend(chunks[(rank - step + 1) % n], dst=right)
        dist.irecv(incoming, src=left)
        sending.wait()
        chunks[(rank - step) % n].copy_(incoming)
