"""Wrong (kept from a blind round, passed before): All-reduces p.grad.reshape(-1), which is
a copy, not a view, when a gradient is not contiguous (a transposed parameter,
channels_last convolution weights), so those gradients stay this rank's own; contiguous
models such as MnistNet hide it."""

import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is None:
            continue
        flat = p.grad.reshape(-1)  # "a view of the gradient", except when it is not contiguous
        dist.all_reduce(flat)
        flat /= world_size
