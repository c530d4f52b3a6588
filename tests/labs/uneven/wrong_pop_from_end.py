"""Wrong (kept from a blind round, failed before with a message that named no batch):
breaks "on its batches in order from the first": it takes batches with
``list.pop()``, which removes the *last* one, so every rank with more batches than the
shortest trains on its last ones, in reverse order (and it empties the caller's list)."""

import torch
import torch.distributed as dist
from torch import nn


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    steps = 0
    while True:
        flag = torch.tensor([1 if batches else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        if flag.item() == 0:
            return steps
        batch = batches.pop()
        optimizer.zero_grad()
        model(batch).pow(2).mean().backward()
        optimizer.step()
        steps += 1
