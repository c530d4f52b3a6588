"""Wrong (kept from a blind round, failed before as a deadlock that named no mistake):
breaks "with async_op=True and wait() before you read the flag": it starts the
all-reduce asynchronously and reads the flag before waiting, so a rank may act on its own
vote and go on alone into a backward that the others never join."""

import torch
import torch.distributed as dist
from torch import nn


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    steps = 0
    while True:
        flag = torch.tensor([1 if steps < len(batches) else 0])
        work = dist.all_reduce(flag, op=dist.ReduceOp.MIN, async_op=True)
        stop = flag.item() == 0  # read while the all-reduce may still be running
        work.wait()
        if stop:
            return steps
        optimizer.zero_grad()
        model(batches[steps]).pow(2).mean().backward()
        optimizer.step()
        steps += 1
