"""Wrong (kept from a blind round, passed before): To overlap communication with compute it
posts the next step's irecv into the single `incoming` buffer and only then add_s that
buffer, so it reads a tensor whose irecv has not been waited (the left neighbour's next
chunk can land mid-add); the rule is broken whatever the result."""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = tensor.chunk(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    incoming = torch.empty_like(chunks[0])
    recv = dist.irecv(incoming, left)  # post the first receive early
    for step in range(n - 1):  # reduce-scatter
        send = dist.isend(chunks[(rank - step) % n], right)
        recv.wait()
        send.wait()
        if step < n - 2:  # overlap: the next receive is already on its way
            recv = dist.irecv(incoming, left)
        chunks[(rank - step - 1) % n].add_(incoming)
    for step in range(n - 1):  # all-gather
        send = dist.isend(chunks[(rank - step + 1) % n], right)
        recv = dist.irecv(incoming, left)
        recv.wait()
        send.wait()
        chunks[(rank - step) % n].copy_(incoming)
