"""Wrong (kept from a blind round, passed before): Averages the parameters of the model's
children only, so a parameter registered on the model itself is left un-averaged."""

import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    world_size = dist.get_world_size()
    for layer in model.children():
        for parameter in layer.parameters():
            dist.all_reduce(parameter.grad)
            parameter.grad /= world_size
