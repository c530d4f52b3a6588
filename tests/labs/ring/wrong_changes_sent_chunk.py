"""Wrong: adds the incoming chunk into the chunk it is still sending, before the isend's
wait(): what the neighbour gets depends on which came first."""

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
        chunks[(rank - step) % n].add_(incoming)
        sending.wait()
    for step in range(n - 1):
        sending = dist.isend(chunks[(rank - step + 1) % n], dst=right)
        dist.recv(incoming, src=left)
        sending.wait()
        chunks[(rank - step) % n].copy_(incoming)
