"""Wrong: every rank's tensor to every rank, then each adds its partner's: right sums, no
group, and every rank receives the whole world's values."""

import torch
import torch.distributed as dist


def pair_sum(tensor: torch.Tensor) -> None:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    everyone = [None] * world_size
    dist.all_gather_object(everyone, tensor)
    tensor.add_(everyone[rank ^ 1])
