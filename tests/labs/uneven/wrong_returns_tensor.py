"""Wrong (kept from a blind round, passed before): Counts the steps by adding up the agreed
flags in a tensor and returns that 0-d tensor, not an int."""

import torch
import torch.distributed as dist
from torch import nn


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    steps = torch.zeros((), dtype=torch.int64)
    while True:
        flag = torch.tensor(1 if int(steps) < len(batches) else 0)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, async_op=True).wait()
        if flag.item() == 0:
            return steps
        optimizer.zero_grad()
        loss = model(batches[int(steps)]).pow(2).mean()
        loss.backward()
        optimizer.step()
        steps += flag
