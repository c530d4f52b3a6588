"""Wrong: one blocking all-reduce (ReduceOp.MIN of the counts) agrees on the number of
steps before the first; the contract asks for a flag agreed before each step, which also
stops ranks that learn only on the way that they are out. (At 3 ranks, where one rank
has no batch, its one call is the one call the contract counts for no step.)"""

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
