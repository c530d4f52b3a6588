"""Right, the other legal way: only the pair's members make its group
(use_local_synchronization=True, PyTorch 2.1 and later), from the module that defines
new_group."""

import torch
from torch.distributed.distributed_c10d import all_reduce, get_rank, new_group


def pair_sum(tensor: torch.Tensor) -> None:
    first = get_rank() // 2 * 2
    mine = new_group([first, first + 1], use_local_synchronization=True)
    all_reduce(tensor, group=mine)
