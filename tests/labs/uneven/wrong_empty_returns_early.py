"""Wrong: a rank with no batch returns at once, "nothing to do": the others wait for it in
the all-reduce that should have told them to stop."""

import torch
import torch.distributed as dist
from torch import nn


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    if not batches:
        return 0
    steps = 0
    while True:
        has_batch = torch.tensor([1 if steps < len(batches) else 0])
        dist.all_reduce(has_batch, op=dist.ReduceOp.MIN)
        if has_batch.item() == 0:
            return steps
        optimizer.zero_grad()
        model(batches[steps]).pow(2).mean().backward()
        optimizer.step()
        steps += 1
