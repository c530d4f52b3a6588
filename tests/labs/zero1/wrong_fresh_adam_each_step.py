"""Wrong (kept from a blind round, failed before with a message that named no mistake):
copies this rank's parts from the current weights and builds a new Adam over them
in every step(), so Adam's exp_avg, exp_avg_sq and step count restart each time: breaks
"after each step() the weights equal DDP's Adam" from the second step on (Adam's first step,
about lr*sign(grad), is the same either way); the state stays 1/N per rank.
"""

from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def zero1_optimizer(model: nn.Module, lr: float) -> Callable[[], None]:
    rank, world = dist.get_rank(), dist.get_world_size()
    params = list(model.parameters())

    def my_part(t: torch.Tensor) -> torch.Tensor:
        return F.pad(t.reshape(-1), (0, -t.numel() % world)).chunk(world)[rank]

    def step() -> None:
        # the parts must follow the weights the last all-gather wrote, so take them afresh
        parts = [my_part(p.detach()).clone().requires_grad_() for p in params]
        adam = torch.optim.Adam(parts, lr=lr)
        for p, part in zip(params, parts):
            grad = torch.zeros_like(p) if p.grad is None else p.grad
            mine = torch.empty_like(part)
            flat = F.pad(grad.reshape(-1), (0, -p.numel() % world))
            dist.reduce_scatter_single(mine, flat)
            part.grad = mine / world
        adam.step()
        for p, part in zip(params, parts):
            whole = part.new_empty(part.numel() * world)
            dist.all_gather_single(whole, part.detach())
            with torch.no_grad():
                p.copy_(whole[: p.numel()].view_as(p))

    return step
