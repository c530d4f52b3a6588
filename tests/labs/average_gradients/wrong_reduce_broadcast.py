"""Wrong: the sum to rank 0, the mean back from it: right numbers, through one rank."""

import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    world_size = dist.get_world_size()
    for parameter in model.parameters():
        dist.reduce(parameter.grad, dst=0)
        if dist.get_rank() == 0:
            parameter.grad /= world_size
        dist.broadcast(parameter.grad, src=0)
