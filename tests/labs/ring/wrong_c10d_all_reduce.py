"""Wrong: no ring at all: the library's all-reduce, reached through the module that
defines it."""

import torch
import torch.distributed.distributed_c10d as c10d


def ring_all_reduce(tensor: torch.Tensor) -> None:
    c10d.all_reduce(tensor)
