"""Wrong (kept from a blind round, failed before with a message that named no mistake):
builds the padded buffers with torch.zeros(n), the default dtype float32, and
fills them by assignment, which casts silently, so in a float64 model the parts, their
gradients and Adam's state are float32: breaks "exactly the weights DDP would hold" (off by
float32 rounding, about 1e-8, caught only in float64, invisible when the model itself is
float32).
"""

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn


def zero1_optimizer(model: nn.Module, lr: float) -> Callable[[], None]:
    rank, world = dist.get_rank(), dist.get_world_size()
    params = list(model.parameters())
    lengths = [-(-p.numel() // world) for p in params]

    def padded(t: torch.Tensor, length: int) -> torch.Tensor:
        flat = torch.zeros(length * world)
        flat[: t.numel()] = t.reshape(-1)
        return flat

    parts = [padded(p.detach(), n).chunk(world)[rank].clone().requires_grad_()
             for p, n in zip(params, lengths)]
    adam = torch.optim.Adam(parts, lr=lr)

    def step() -> None:
        for p, part, n in zip(params, parts, lengths):
            grad = torch.zeros_like(p) if p.grad is None else p.grad
            mine = torch.empty_like(part)
            dist.reduce_scatter_single(mine, padded(grad, n))
            part.grad = mine / world
        adam.step()
        for p, part, n in zip(params, parts, lengths):
            whole = torch.zeros(n * world)
            dist.all_gather_single(whole, part.detach())
            with torch.no_grad():
                p.copy_(whole[: p.numel()].view_as(p))

    return step
