"""Wrong: sums the gradients and forgets / world_size."""

import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad)
