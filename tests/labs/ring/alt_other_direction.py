"""Right, written another way: the ring runs the other way round (send left, receive from
the right), with blocking send and recv, even ranks sending first so no two wait on
each other."""

import torch
import torch.distributed as dist


def swap(send_chunk, receive_into, to, source, rank):
    if rank % 2 == 0:
        dist.send(send_chunk, dst=to)
        dist.recv(receive_into, src=source)
    else:
        dist.recv(receive_into, src=source)
        dist.send(send_chunk, dst=to)


def ring_all_reduce(tensor: torch.Tensor) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = list(tensor.chunk(n))
    left, right = (rank - 1) % n, (rank + 1) % n
    incoming = torch.empty_like(chunks[0])
    for step in range(n - 1):  # rank r ends with chunk (r - 1) % n summed
        swap(chunks[(rank + step) % n], incoming, left, right, rank)
        chunks[(rank + step + 1) % n] += incoming
    for step in range(n - 1):
        swap(chunks[(rank + step - 1) % n], incoming, left, right, rank)
        chunks[(rank + step) % n].copy_(incoming)
