"""Wrong: the flag's all-reduce runs with async_op=True, and the flag is read without
waiting for it: a rank may see only its own vote."""

import torch
import torch.distributed as dist
from torch import nn


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    steps = 0
    while True:
        has_batch = torch.tensor([1 if steps < len(batches) else 0])
        dist.all_reduce(has_batch, op=dist.ReduceOp.MIN, async_op=True)
        if has_batch.item() == 0 or steps == len(batches):
            return steps
        optimizer.zero_grad()
        model(batches[steps]).pow(2).mean().backward()
        optimizer.step()
        steps += 1
