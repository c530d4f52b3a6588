"""Wrong (kept from a blind round, passed before): Each rank's share is round(numel / N)
instead of the ceiling, so when numel / N rounds down the last numel % N values are
never summed."""

import torch
import torch.distributed as dist


def all_reduce_from_two(tensor: torch.Tensor) -> None:
    n = dist.get_world_size()
    numel = tensor.numel()
    part = max(1, round(numel / n))  # each rank's share of the tensor, rounded
    size = part * n
    padded = tensor.new_zeros(size)
    kept = min(numel, size)
    padded[:kept] = tensor[:kept]
    share = tensor.new_empty(part)
    dist.reduce_scatter_single(share, padded)
    dist.all_gather_single(padded, share)
    tensor[:kept] = padded[:kept]
