"""Wrong: right, then a world-wide barrier that the pairs do not need."""

import torch
import torch.distributed as dist


def pair_sum(tensor: torch.Tensor) -> None:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    pairs = [dist.new_group([k, k + 1]) for k in range(0, world_size, 2)]
    dist.all_reduce(tensor, group=pairs[rank // 2])
    dist.barrier()
