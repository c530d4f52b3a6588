"""Wrong: starts every all-reduce with async_op=True and never waits for one."""

import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad, async_op=True)
    for parameter in model.parameters():
        parameter.grad /= dist.get_world_size()
