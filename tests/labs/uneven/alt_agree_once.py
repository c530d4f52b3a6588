"""Right, written another way: the counts are known before the first step, so one blocking
all-reduce (ReduceOp.MIN of the counts, from the module that defines it) agrees on the
number of steps once."""

import torch
from torch import nn
from torch.distributed.distributed_c10d import ReduceOp, all_reduce


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    count = torch.tensor([len(batches)])
    all_reduce(count, op=ReduceOp.MIN)
    for batch in batches[: count.item()]:
        optimizer.zero_grad()
        model(batch).pow(2).mean().backward()
        optimizer.step()
    return int(count.item())
