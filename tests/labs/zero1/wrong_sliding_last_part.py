"""Wrong (kept from a blind round, passed before):
breaks "no value's state is kept twice": avoids padding by giving every rank ceil(numel / N)
values and sliding the last windows back inside the tensor (start = min(r * size, numel -
size)), so when N does not divide numel two ranks own some of the same values; the weights
still equal DDP's and each rank holds as much state as padded parts would."""

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn


def zero1_optimizer(model: nn.Module, lr: float) -> Callable[[], None]:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    parameters = list(model.parameters())
    sizes = [-(-p.numel() // world_size) for p in parameters]
    starts = [[min(r * size, p.numel() - size) for r in range(world_size)]
              for p, size in zip(parameters, sizes)]
    parts = [p.detach().reshape(-1)[s[rank]:s[rank] + size].clone().requires_grad_(True)
             for p, s, size in zip(parameters, starts, sizes)]
    adam = torch.optim.Adam(parts, lr=lr)

    def step() -> None:
        for p, part, s in zip(parameters, parts, starts):
            flat_grad = p.grad.reshape(-1)
            windows = torch.cat([flat_grad[start:start + part.numel()] for start in s])
            summed = torch.empty_like(part)
            dist.reduce_scatter_single(summed, windows)
            part.grad = summed / world_size
        adam.step()
        with torch.no_grad():
            for p, part, s in zip(parameters, parts, starts):
                gathered = torch.empty(world_size * part.numel(), dtype=part.dtype)
                dist.all_gather_single(gathered, part.detach())
                flat = p.view(-1)
                for r, start in enumerate(s):
                    n = part.numel()
                    flat[start:start + n] = gathered[r * n:(r + 1) * n]

    return step
