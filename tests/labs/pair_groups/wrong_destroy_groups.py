"""Wrong (kept from a blind round, passed before):
sums within its own pair's group correctly, then tidies up with
dist.destroy_process_group(group) on its own pair's group, now unused: a call outside the
contract's list ("nothing else"); the sums are right.
"""

import torch
import torch.distributed as dist


def pair_sum(tensor: torch.Tensor) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = [dist.new_group([k, k + 1]) for k in range(0, world, 2)]
    dist.all_reduce(tensor, group=groups[rank // 2])
    dist.destroy_process_group(groups[rank // 2])  # a group we no longer use
