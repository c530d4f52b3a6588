"""Wrong: agrees right, but takes its batches from the end of the list."""

import torch
import torch.distributed as dist
from torch import nn


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    steps = 0
    while True:
        has_batch = torch.tensor([1 if steps < len(batches) else 0])
        dist.all_reduce(has_batch, op=dist.ReduceOp.MIN)
        if has_batch.item() == 0:
            return steps
        optimizer.zero_grad()
        model(batches[-1 - steps]).pow(2).mean().backward()
        optimizer.step()
        steps += 1
