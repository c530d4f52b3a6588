"""Wrong: pads by N - length % N, which adds a whole part of zeros when N divides the
length: the sum is right, and every rank sends more than 1/N of the tensor."""

import torch
import torch.distributed as dist
import torch.nn.functional as F


def all_reduce_from_two(tensor: torch.Tensor) -> None:
    n = dist.get_world_size()
    padded = F.pad(tensor, (0, n - len(tensor) % n))
    part = torch.empty(len(padded) // n, dtype=tensor.dtype)
    dist.reduce_scatter_tensor(part, padded)
    dist.all_gather_into_tensor(padded, part)
    tensor.copy_(padded[: len(tensor)])
