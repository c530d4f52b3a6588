"""Wrong (kept from a blind round, passed before): Waits for each async all_reduce by
spinning on work.is_completed() instead of calling wait(): a busy loop (one core at 100%
per rank) through a call the contract does not allow, and it never sees an error the
Work carries (is_completed() turns true on failure too, and the gradient is then used as
if averaged)."""

import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    world_size = dist.get_world_size()
    for parameter in model.parameters():
        work = dist.all_reduce(parameter.grad, async_op=True)
        while not work.is_completed():
            pass
        parameter.grad /= world_size
