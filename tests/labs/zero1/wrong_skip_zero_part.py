"""Wrong (kept from a blind round, passed before): Sets a part's .grad to None when its
averaged gradient is all zeros, so Adam skips it; DDP's Adam still steps on a zero
gradient (its moments decay, the weights keep moving, its step count advances), so a
step where every rank's gradient is zero on some part (all ranks' inputs zeros) leaves
different weights."""

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn


def zero1_optimizer(model: nn.Module, lr: float) -> Callable[[], None]:
    rank, n = dist.get_rank(), dist.get_world_size()
    params = list(model.parameters())
    sizes = [-(-p.numel() // n) for p in params]  # each part's length, padding included
    parts = []
    for p, size in zip(params, sizes):
        flat = torch.zeros(size * n, dtype=p.dtype, device=p.device)
        flat[:p.numel()] = p.detach().reshape(-1)
        parts.append(flat[rank * size:(rank + 1) * size].clone().requires_grad_())
    optimizer = torch.optim.Adam(parts, lr=lr)

    def step() -> None:
        for p, size, part in zip(params, sizes, parts):
            whole = torch.zeros(size * n, dtype=p.dtype, device=p.device)
            if p.grad is not None:
                whole[:p.numel()] = p.grad.reshape(-1)
            mine = torch.empty(size, dtype=p.dtype, device=p.device)
            dist.reduce_scatter_tensor(mine, whole)
            part.grad = mine / n if mine.any() else None  # no gradient here: skip it
        optimizer.step()
        for p, size, part in zip(params, sizes, parts):
            whole = torch.empty(size * n, dtype=p.dtype, device=p.device)
            dist.all_gather_into_tensor(whole, part.detach())
            with torch.no_grad():
                p.copy_(whole[:p.numel()].view_as(p))

    return step
