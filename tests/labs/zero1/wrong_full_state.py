"""Wrong: DDP by hand, every rank with a whole Adam: right weights, N copies of the state."""

import torch
import torch.distributed as dist
from torch import nn


def zero1_optimizer(model: nn.Module, lr: float):
    adam = torch.optim.Adam(model.parameters(), lr=lr)

    def step() -> None:
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
            parameter.grad /= dist.get_world_size()
        adam.step()

    return step
