"""Wrong: the groups are made, but the all-reduce forgets group=: it sums every rank (which
is right at world size 2, where the pair is the world)."""

import torch
import torch.distributed as dist


def pair_sum(tensor: torch.Tensor) -> None:
    world_size = dist.get_world_size()
    [dist.new_group([k, k + 1]) for k in range(0, world_size, 2)]
    dist.all_reduce(tensor)
