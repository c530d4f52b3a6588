"""Wrong: the forbidden all_reduce, imported from the module that defines it."""

import torch
from torch.distributed.distributed_c10d import all_reduce


def all_reduce_from_two(tensor: torch.Tensor) -> None:
    all_reduce(tensor)
