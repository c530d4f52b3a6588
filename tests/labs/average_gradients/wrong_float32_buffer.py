"""Wrong (kept from a blind round, failed with unclear words before): The flat buffer is
always float32, so a float64 model's gradients come back rounded to float32."""

import torch
import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    world_size = dist.get_world_size()
    params = [p for p in model.parameters() if p.grad is not None]
    flat = torch.cat([p.grad.reshape(-1).float() for p in params])  # float32 always
    dist.all_reduce(flat)
    flat /= world_size
    offset = 0
    for p in params:
        n = p.grad.numel()
        p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
        offset += n
