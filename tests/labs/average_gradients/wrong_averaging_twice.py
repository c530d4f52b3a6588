"""Wrong: ReduceOp.AVG already averages; dividing again averages twice."""

import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad, op=dist.ReduceOp.AVG)
        parameter.grad /= dist.get_world_size()
