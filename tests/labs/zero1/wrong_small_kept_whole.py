"""Wrong: keeps the Adam state of every parameter smaller than 8 values whole on every rank
(too small to be worth sharding, it reasons), and shards the rest."""

import torch
import torch.distributed as dist
from torch import nn


def zero1_optimizer(model: nn.Module, lr: float):
    rank, n = dist.get_rank(), dist.get_world_size()
    params = list(model.parameters())
    small = [p for p in params if p.numel() < 8]
    large = [p for p in params if p.numel() >= 8]
    sizes = [-(-p.numel() // n) for p in large]
    parts = []
    for p, s in zip(large, sizes):
        flat = torch.cat([p.detach().flatten(), p.new_zeros(s * n - p.numel())])
        parts.append(torch.nn.Parameter(flat[rank * s:(rank + 1) * s].clone()))
    whole = torch.optim.Adam(small, lr=lr) if small else None
    adam = torch.optim.Adam(parts, lr=lr)

    def step():
        for p in small:
            dist.all_reduce(p.grad)
            p.grad /= n
        for p, s, part in zip(large, sizes, parts):
            flat = torch.cat([p.grad.flatten(), p.grad.new_zeros(s * n - p.numel())])
            out = flat.new_empty(s)
            dist.reduce_scatter_tensor(out, flat)
            part.grad = out / n
        adam.step()
        if whole:
            whole.step()
        for p, s, part in zip(large, sizes, parts):
            gathered = part.new_empty(s * n)
            dist.all_gather_into_tensor(gathered, part.detach())
            p.data.copy_(gathered[:p.numel()].view_as(p))

    return step
