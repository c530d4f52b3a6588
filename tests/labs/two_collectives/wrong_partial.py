"""Wrong: the forbidden all_reduce, hidden in a functools.partial."""

import functools

import torch
import torch.distributed as dist

summed = functools.partial(dist.all_reduce, op=dist.ReduceOp.SUM)


def all_reduce_from_two(tensor: torch.Tensor) -> None:
    summed(tensor)
