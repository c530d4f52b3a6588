"""Right, written another way (kept from a blind round, written as a wrong one): pads with
new_empty, whatever memory held, not zeros; the padding is dropped at the end, so its values
never reach the result."""

import torch
import torch.distributed as dist


def all_reduce_from_two(tensor: torch.Tensor) -> None:
    n = dist.get_world_size()
    length = tensor.numel()
    part = -(-length // n)
    buf = tensor.new_empty(part * n)     # the tail is whatever was in memory
    buf[:length] = tensor
    mine = tensor.new_empty(part)
    dist.reduce_scatter_single(mine, buf)
    dist.all_gather_single(buf, mine)
    tensor.copy_(buf[:length])
