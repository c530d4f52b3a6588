"""Wrong: all-reduces a copy of each gradient, and the copy is thrown away."""

import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    for parameter in model.parameters():
        grad = parameter.grad.clone()
        dist.all_reduce(grad)
        grad /= dist.get_world_size()
