"""The reference solution of the zero1 lab: it must pass."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def zero1_optimizer(model: nn.Module, lr: float):
    rank, n = dist.get_rank(), dist.get_world_size()
    parameters = list(model.parameters())

    def padded(flat: torch.Tensor) -> torch.Tensor:  # splits into n equal parts
        return F.pad(flat, (0, -len(flat) % n))

    parts = [padded(p.detach().flatten()).chunk(n)[rank].clone().requires_grad_()
             for p in parameters]
    adam = torch.optim.Adam(parts, lr=lr)  # state for this rank's parts only

    def step() -> None:
        for parameter, part in zip(parameters, parts):
            part.grad = torch.empty_like(part)
            dist.reduce_scatter_single(part.grad, padded(parameter.grad.flatten()))
            part.grad /= n
        adam.step()
        for parameter, part in zip(parameters, parts):
            whole = torch.empty(len(part) * n, dtype=part.dtype)
            dist.all_gather_single(whole, part.detach())
            parameter.data.copy_(whole[: parameter.numel()].view_as(parameter))

    return step
