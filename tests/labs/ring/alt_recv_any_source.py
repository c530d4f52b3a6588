"""Right (kept from a blind round): the receives name no source (``dist.irecv(buffer)``
receives from any rank); in this ring only the left neighbour ever sends to a rank, so the
message is the left's, and every Work is waited for before its tensor is touched."""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor) -> None:
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    if world_size == 1:
        return
    right = (rank + 1) % world_size
    chunks = tensor.chunk(world_size)

    buffer = torch.empty_like(chunks[0])
    for step in range(world_size - 1):
        send = dist.isend(chunks[(rank - step) % world_size], dst=right)
        recv = dist.irecv(buffer)
        recv.wait()
        send.wait()
        chunks[(rank - step - 1) % world_size].add_(buffer)
    for step in range(world_size - 1):
        send = dist.isend(chunks[(rank + 1 - step) % world_size], dst=right)
        recv = dist.irecv(chunks[(rank - step) % world_size])
        recv.wait()
        send.wait()
