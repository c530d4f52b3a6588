"""Wrong (kept from a blind round, written as right under the contract's earlier "a multiple
of N"): always appends world_size - len % world_size zeros, a whole extra zero chunk when the
length is already a multiple of N, so each part is more than 1/N of the tensor; pads with
torch.cat, and writes the result back with slice assignment after dropping the padding."""

import torch
import torch.distributed as dist


def all_reduce_from_two(tensor: torch.Tensor) -> None:
    world = dist.get_world_size()
    length = tensor.numel()
    padded = torch.cat([tensor, tensor.new_zeros(world - length % world)])
    part = padded.new_empty(padded.numel() // world)
    dist.reduce_scatter_single(part, padded)
    gathered = torch.empty_like(padded)
    dist.all_gather_single(gathered, part)
    tensor[:] = gathered[:length]
