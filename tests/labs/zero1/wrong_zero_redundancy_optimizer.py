"""Wrong: PyTorch's ZeroRedundancyOptimizer, the thing this lab builds by hand."""

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer


def zero1_optimizer(model: nn.Module, lr: float):
    optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                        lr=lr)

    def step() -> None:
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
            parameter.grad /= dist.get_world_size()
        optimizer.step()

    return step
