"""Wrong: stops right, and forgets to return the number of steps."""

import torch
import torch.distributed as dist
from torch import nn


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    steps = 0
    while True:
        has_batch = torch.tensor([1 if steps < len(batches) else 0])
        dist.all_reduce(has_batch, op=dist.ReduceOp.MIN)
        if has_batch.item() == 0:
            break
        optimizer.zero_grad()
        model(batches[steps]).pow(2).mean().backward()
        optimizer.step()
        steps += 1
