"""The reference solution with the names PyTorch 2.13 gave the flat collectives: it passes too."""

import torch
import torch.distributed as dist
import torch.nn.functional as F


def all_reduce_from_two(tensor: torch.Tensor) -> None:
    n = dist.get_world_size()
    padded = F.pad(tensor, (0, -len(tensor) % n))
    part = torch.empty(len(padded) // n, dtype=tensor.dtype)
    dist.reduce_scatter_single(part, padded)
    dist.all_gather_single(padded, part)
    tensor.copy_(padded[: len(tensor)])
