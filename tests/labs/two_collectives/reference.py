"""The reference solution of the two_collectives lab: it must pass."""

import torch
import torch.distributed as dist
import torch.nn.functional as F


def all_reduce_from_two(tensor: torch.Tensor) -> None:
    n = dist.get_world_size()
    padded = F.pad(tensor, (0, -len(tensor) % n))  # a multiple of n: equal parts
    part = torch.empty(len(padded) // n, dtype=tensor.dtype)
    dist.reduce_scatter_tensor(part, padded)  # this rank's part, summed over the ranks
    dist.all_gather_into_tensor(padded, part)  # every rank's part, to every rank
    tensor.copy_(padded[: len(tensor)])
