"""Wrong: averages only the weight matrices, forgetting the biases."""

import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    for name, parameter in model.named_parameters():
        if name.endswith("weight"):
            dist.all_reduce(parameter.grad)
            parameter.grad /= dist.get_world_size()
