"""Wrong (kept from a blind round, passed before): Busy-polls work.is_completed() in a loop
instead of calling wait(), which the contract requires before reading the flag (results
are right)."""

import itertools

import torch
import torch.distributed as dist
from torch import nn


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    for step in itertools.count():
        flag = torch.tensor([int(step < len(batches))])
        work = dist.all_reduce(flag, op=dist.ReduceOp.MIN, async_op=True)
        while not work.is_completed():
            pass  # poll until gloo is done
        if not flag.item():
            return step
        optimizer.zero_grad()
        model(batches[step]).pow(2).mean().backward()
        optimizer.step()
