"""Wrong: gathers every rank's gradient to every rank and takes the mean: right numbers,
N times the memory and traffic of an all-reduce."""

import torch
import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    world_size = dist.get_world_size()
    for parameter in model.parameters():
        every = [torch.empty_like(parameter.grad) for _ in range(world_size)]
        dist.all_gather(every, parameter.grad)
        parameter.grad.copy_(torch.stack(every).mean(dim=0))
