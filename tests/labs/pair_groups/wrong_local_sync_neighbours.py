"""Wrong: use_local_synchronization=True, but each rank makes the group of itself and its
right neighbour: rank 1 makes [1, 2], which rank 2 never makes."""

import torch
import torch.distributed as dist


def pair_sum(tensor: torch.Tensor) -> None:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ranks = sorted([rank, (rank + 1) % world_size])
    group = dist.new_group(ranks, use_local_synchronization=True)
    dist.all_reduce(tensor, group=group)
