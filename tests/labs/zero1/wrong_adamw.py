"""Wrong (kept from a blind round, failed before with a message that named no mistake):
steps the parts with torch.optim.AdamW(parts, lr=lr), whose default
weight_decay=0.01 shrinks every weight by lr*0.01 of itself each step, instead of
torch.optim.Adam: breaks "the weights DDP with torch.optim.Adam would hold" by about 1e-5 of
a weight per step, below a float32 comparison's default tolerance; everything else (split,
collectives, state) is right.
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
    adam = torch.optim.AdamW(parts, lr=lr)  # "Adam, with decoupled weight decay done right"

    def step() -> None:
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
