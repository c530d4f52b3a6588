"""Wrong: the all-gather forwards what it received, and receives the next chunk into the
same buffer while its isend of that buffer may still be sending it."""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = tensor.chunk(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    incoming = torch.empty_like(chunks[0])
    for step in range(n - 1):
        sending = dist.isend(chunks[(rank - step) % n], dst=right)
        dist.irecv(incoming, src=left).wait()
        sending.wait()
        chunks[(rank - step - 1) % n].add_(incoming)
    passing = chunks[(rank + 1) % n].clone()
    for step in range(n - 1):
        sending = dist.isend(passing, dst=right)
        receiving = dist.irecv(passing, src=left)
        sending.wait()
        receiving.wait()
        chunks[(rank - step) % n].copy_(passing)
