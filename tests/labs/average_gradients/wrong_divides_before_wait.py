"""Wrong: divides each gradient while its asynchronous all-reduce is still running, then
waits."""

import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    works = []
    for parameter in model.parameters():
        works.append(dist.all_reduce(parameter.grad, async_op=True))
        parameter.grad /= dist.get_world_size()
    for work in works:
        work.wait()
