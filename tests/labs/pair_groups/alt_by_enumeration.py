"""Right (a blind round's, kept): every pair's group in one call on every rank, with
dist.new_subgroups_by_enumeration, which the contract allows beside new_subgroups."""

import torch
import torch.distributed as dist


def pair_sum(tensor: torch.Tensor) -> None:
    world = dist.get_world_size()
    pairs = [[2 * k, 2 * k + 1] for k in range(world // 2)]
    mine, _ = dist.new_subgroups_by_enumeration(ranks_per_subgroup_list=pairs)
    dist.all_reduce(tensor, group=mine)
