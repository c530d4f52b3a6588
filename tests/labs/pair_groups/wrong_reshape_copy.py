"""Wrong (kept from a blind round, passed before): All-reduces `tensor.reshape(-1)`, which
is a view only for contiguous tensors; for a non-contiguous tensor (a transpose, a slice
with a step) it is a copy and `tensor` keeps its own values."""

import torch
import torch.distributed as dist


def pair_sum(tensor: torch.Tensor) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = [dist.new_group([2 * k, 2 * k + 1]) for k in range(world // 2)]
    flat = tensor.reshape(-1)  # "collectives like flat tensors"
    dist.all_reduce(flat, group=groups[rank // 2])
