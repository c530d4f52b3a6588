"""Right, written another way (a blind round wrote it as wrong; the contract's How is one way):
to spread the padding over the ranks, rank r owns part (r + i) % N of parameter i
rather than part ``rank`` of each, as the contract says; the weights equal DDP's and every
rank holds exactly 1/N of the padded values' state, but for every parameter after the first
it is the state of another rank's part.
"""

from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def zero1_optimizer(model: nn.Module, lr: float) -> Callable[[], None]:
    rank, world = dist.get_rank(), dist.get_world_size()
    params = list(model.parameters())
    owned = [(rank + i) % world for i in range(len(params))]  # which part of parameter i
    parts = []
    for p, index in zip(params, owned):
        flat = F.pad(p.detach().reshape(-1), (0, -p.numel() % world))
        parts.append(flat.chunk(world)[index].clone().requires_grad_())
    adam = torch.optim.Adam(parts, lr=lr)

    def step() -> None:
        for p, part, index in zip(params, parts, owned):
            grad = torch.zeros_like(p) if p.grad is None else p.grad
            summed = F.pad(grad.reshape(-1), (0, -p.numel() % world))
            dist.all_reduce(summed)
            part.grad = summed.chunk(world)[index] / world
        adam.step()
        for i, (p, part) in enumerate(zip(params, parts)):
            whole = F.pad(p.detach().reshape(-1), (0, -p.numel() % world)).clone()
            pieces = whole.chunk(world)
            for r in range(world):  # rank r holds part (r + i) % N
                piece = pieces[(r + i) % world]
                if r == rank:
                    piece.copy_(part.detach())
                dist.broadcast(piece, src=r)
            with torch.no_grad():
                p.copy_(whole[: p.numel()].view_as(p))

    return step
