"""Wrong: every rank makes every pair's group, but its own pair's first: the ranks call the
collective new_group in different orders."""

import torch
import torch.distributed as dist


def pair_sum(tensor: torch.Tensor) -> None:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    mine = rank - rank % 2
    order = [mine] + [k for k in range(0, world_size, 2) if k != mine]
    groups = {k: dist.new_group([k, k + 1]) for k in order}
    dist.all_reduce(tensor, group=groups[mine])
