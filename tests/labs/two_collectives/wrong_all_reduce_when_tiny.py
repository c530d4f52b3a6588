"""Wrong (kept from a blind round, passed before): Falls back to dist.all_reduce when the
tensor is shorter than the world size ("too small to split"), a forbidden collective
that only tiny inputs reach."""

import torch
import torch.distributed as dist


def all_reduce_from_two(tensor: torch.Tensor) -> None:
    n = dist.get_world_size()
    length = tensor.numel()
    per = (length + n - 1) // n

    if length < n:
        dist.all_reduce(tensor)
        return
    padded = torch.cat([tensor, tensor.new_zeros(per * n - length)])
    out = tensor.new_empty(per)
    dist.reduce_scatter_single(out, padded)
    dist.all_gather_single(padded, out)
    tensor.copy_(padded[:length])
