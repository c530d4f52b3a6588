"""Right, written another way: the list forms of both collectives, imported from the module
that defines them."""

import torch
from torch.distributed.distributed_c10d import all_gather, get_world_size, reduce_scatter


def all_reduce_from_two(tensor: torch.Tensor) -> None:
    n = get_world_size()
    size = -(-len(tensor) // n)  # each part's length, the last one padded
    padded = torch.zeros(size * n, dtype=tensor.dtype)
    padded[: len(tensor)] = tensor
    mine = torch.empty(size, dtype=tensor.dtype)
    reduce_scatter(mine, list(padded.split(size)))
    parts = [torch.empty(size, dtype=tensor.dtype) for _ in range(n)]
    all_gather(parts, mine)
    tensor.copy_(torch.cat(parts)[: len(tensor)])
