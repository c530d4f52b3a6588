"""Wrong: the all-gathers run with async_op=True and are never waited for."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def zero1_optimizer(model: nn.Module, lr: float):
    rank, n = dist.get_rank(), dist.get_world_size()
    parameters = list(model.parameters())

    def padded(flat):
        return F.pad(flat, (0, -len(flat) % n))

    parts = [padded(p.detach().flatten()).chunk(n)[rank].clone().requires_grad_()
             for p in parameters]
    adam = torch.optim.Adam(parts, lr=lr)

    def step() -> None:
        for parameter, part in zip(parameters, parts):
            part.grad = torch.empty_like(part)
            dist.reduce_scatter_tensor(part.grad, padded(parameter.grad.flatten()))
            part.grad /= n
        adam.step()
        for parameter, part in zip(parameters, parts):
            whole = torch.empty(len(part) * n, dtype=part.dtype)
            dist.all_gather_into_tensor(whole, part.detach(), async_op=True)
            parameter.data.copy_(whole[: parameter.numel()].view_as(parameter))

    return step
