"""Wrong: divides by 2, the page's world size, not by the world size: right at 2 ranks
only."""

import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad)
        parameter.grad /= 2
