"""Wrong (kept from a blind round, passed before): All-reduces a float32 copy and copies it
back, which loses precision for float64 tensors and integers above 2**24."""

import torch
import torch.distributed as dist


def pair_sum(tensor: torch.Tensor) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    mine = None
    for k in range(0, n, 2):
        group = dist.new_group([k, k + 1])  # every rank makes every pair, in the same order
        if rank in (k, k + 1):
            mine = group

    buffer = tensor.to(torch.float32)  # one dtype for the backend
    dist.all_reduce(buffer, group=mine)
    tensor.copy_(buffer)
