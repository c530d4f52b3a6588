"""Wrong: assumes the world size divides the length (right at 2 ranks, not at 3)."""

import torch
import torch.distributed as dist


def all_reduce_from_two(tensor: torch.Tensor) -> None:
    n = dist.get_world_size()
    part = torch.empty(len(tensor) // n, dtype=tensor.dtype)
    dist.reduce_scatter_tensor(part, tensor)
    dist.all_gather_into_tensor(tensor, part)
