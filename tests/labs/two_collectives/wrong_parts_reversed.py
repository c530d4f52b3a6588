"""Wrong: gathers the parts into a list and joins them last rank first."""

import torch
import torch.distributed as dist
import torch.nn.functional as F


def all_reduce_from_two(tensor: torch.Tensor) -> None:
    n = dist.get_world_size()
    padded = F.pad(tensor, (0, -len(tensor) % n))
    part = torch.empty(len(padded) // n, dtype=tensor.dtype)
    dist.reduce_scatter_tensor(part, padded)
    parts = [torch.empty_like(part) for _ in range(n)]
    dist.all_gather(parts, part)
    tensor.copy_(torch.cat(parts[::-1])[: len(tensor)])
