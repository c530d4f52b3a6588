"""Wrong (kept from a blind round, failed before with a message that named no mistake):
in step() all-gathers the parts into the model first (to have the weights whole
"before the next forward") and only then reduce-scatters and steps Adam, so after each
step() the model holds the previous step's weights: breaks the order "step Adam, then
all-gather the updated parts" and with it "after each step() the model holds DDP's weights";
the state is still 1/N.
"""

from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def zero1_optimizer(model: nn.Module, lr: float) -> Callable[[], None]:
    rank, world = dist.get_rank(), dist.get_world_size()
    params = list(model.parameters())
    parts = []
    for p in params:
        flat = F.pad(p.detach().reshape(-1), (0, -p.numel() % world))
        parts.append(flat.chunk(world)[rank].clone().requires_grad_())
    adam = torch.optim.Adam(parts, lr=lr)

    def step() -> None:
        for p, part in zip(params, parts):  # bring every rank's latest part into the model
            whole = part.new_empty(part.numel() * world)
            dist.all_gather_single(whole, part.detach())
            with torch.no_grad():
                p.copy_(whole[: p.numel()].view_as(p))
        for p, part in zip(params, parts):
            grad = torch.zeros_like(p) if p.grad is None else p.grad
            mine = torch.empty_like(part)
            flat = F.pad(grad.reshape(-1), (0, -p.numel() % world))
            dist.reduce_scatter_single(mine, flat)
            part.grad = mine / world
        adam.step()

    return step
