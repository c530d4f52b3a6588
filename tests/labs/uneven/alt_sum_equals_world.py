"""Right (kept from a blind round, failed before): All-reduces the 1/0 flags with SUM and
goes on only while the sum equals dist.get_world_size(), which is exactly 'every rank
still has a batch'."""

import torch
import torch.distributed as dist
from torch import nn


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    steps = 0
    while True:
        flag = torch.tensor([1 if steps < len(batches) else 0], dtype=torch.int64)
        work = dist.all_reduce(flag, op=dist.ReduceOp.SUM, async_op=True)
        work.wait()
        if flag.item() != dist.get_world_size():
            break
        batch = batches[steps]
        optimizer.zero_grad()
        loss = model(batch).pow(2).mean()
        loss.backward()
        optimizer.step()
        steps += 1
    return steps
