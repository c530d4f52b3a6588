"""The reference solution of the zero1 lab: it must pass."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

# PyTorch 2.13's names, and before it their older ones (the contract takes either)
reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


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
            reduce_scatter(part.grad, padded(parameter.grad.flatten()))
            part.grad /= n
        adam.step()
        for parameter, part in zip(parameters, parts):
            whole = torch.empty(len(part) * n, dtype=part.dtype)
            all_gather(whole, part.detach())
            parameter.data.copy_(whole[: parameter.numel()].view_as(parameter))

    return step
