"""The reference solution of the average_gradients lab: it must pass."""

import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    world_size = dist.get_world_size()
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM)
        parameter.grad /= world_size
