"""Right, written another way: each rank votes "I am out of batches", the votes meet with
ReduceOp.MAX asynchronously, and the flag is read after wait()."""

import torch
from torch import nn
from torch.distributed import ReduceOp, all_reduce


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    for step in range(len(batches) + 1):
        out = torch.tensor([0 if step < len(batches) else 1])
        all_reduce(out, op=ReduceOp.MAX, async_op=True).wait()
        if out.item():
            return step
        optimizer.zero_grad()
        model(batches[step]).pow(2).mean().backward()
        optimizer.step()
    return len(batches)
