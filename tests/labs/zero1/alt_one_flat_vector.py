"""Right, written another way: every parameter in one flat vector, cut once into N parts;
the list forms of the collectives, from the module that defines them."""

import torch
from torch import nn
from torch.distributed.distributed_c10d import (
    all_gather,
    get_rank,
    get_world_size,
    reduce_scatter,
)


def zero1_optimizer(model: nn.Module, lr: float):
    rank, n = get_rank(), get_world_size()
    parameters = list(model.parameters())
    total = sum(p.numel() for p in parameters)
    size = -(-total // n)

    def flat(tensors) -> list:
        whole = torch.zeros(size * n, dtype=parameters[0].dtype)
        whole[:total] = torch.cat([t.detach().flatten() for t in tensors])
        return list(whole.split(size))

    mine = flat(parameters)[rank].clone().requires_grad_()
    adam = torch.optim.Adam([mine], lr=lr)

    def step() -> None:
        mine.grad = torch.empty_like(mine)
        reduce_scatter(mine.grad, flat([p.grad for p in parameters]))
        mine.grad /= n
        adam.step()
        parts = [torch.empty_like(mine) for _ in range(n)]
        all_gather(parts, mine.detach())
        values = torch.cat(parts)[:total]
        offset = 0
        for parameter in parameters:
            parameter.data.copy_(values[offset: offset + parameter.numel()].view_as(parameter))
            offset += parameter.numel()

    return step
