"""Wrong: gathers every rank's count as Python objects, then trains the smallest number
of steps: right steps, but not with the all_reduce this lab allows."""

import torch
import torch.distributed as dist
from torch import nn


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    counts = [None] * dist.get_world_size()
    dist.all_gather_object(counts, len(batches))
    for batch in batches[: min(counts)]:
        optimizer.zero_grad()
        model(batch).pow(2).mean().backward()
        optimizer.step()
    return min(counts)
