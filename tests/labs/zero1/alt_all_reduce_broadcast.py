"""Right, written another way: all_reduce the gradients, step this rank's part of each,
and broadcast every part from its owner (every rank calls every broadcast)."""

import torch
import torch.distributed as dist
from torch import nn


def zero1_optimizer(model: nn.Module, lr: float):
    rank, n = dist.get_rank(), dist.get_world_size()
    parameters = list(model.parameters())
    sizes = [-(-p.numel() // n) for p in parameters]

    def part(tensor, size, owner):
        return tensor.flatten()[owner * size: (owner + 1) * size]

    mine = [part(p.detach(), size, rank).clone().requires_grad_()
            for p, size in zip(parameters, sizes)]
    adam = torch.optim.Adam(mine, lr=lr)

    def step() -> None:
        for parameter, size, own in zip(parameters, sizes, mine):
            dist.all_reduce(parameter.grad)
            own.grad = part(parameter.grad, size, rank) / n
        adam.step()
        for parameter, size, own in zip(parameters, sizes, mine):
            for owner in range(n):
                piece = part(parameter.data, size, owner)
                if piece.numel() == 0:
                    continue
                if owner == rank:
                    piece.copy_(own.detach())
                buffer = piece.clone()
                dist.broadcast(buffer, src=owner)
                piece.copy_(buffer)

    return step
