"""Wrong: takes the step first and asks afterwards whether to go on: the shortest rank
steps once more than it has batches."""

import torch
import torch.distributed as dist
from torch import nn


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    steps = 0
    while True:
        optimizer.zero_grad()
        model(batches[steps]).pow(2).mean().backward()
        optimizer.step()
        steps += 1
        has_next = torch.tensor([1 if steps < len(batches) else 0])
        dist.all_reduce(has_next, op=dist.ReduceOp.MIN)
        if has_next.item() == 0:
            return steps
