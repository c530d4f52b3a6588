"""Wrong: DDP's join() context: no rank hangs, and every rank trains on all of its own
batches, the others' all-reduces shadowed for the ranks that ran out."""

import torch
from torch import nn


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    with model.join():
        for batch in batches:
            optimizer.zero_grad()
            model(batch).pow(2).mean().backward()
            optimizer.step()
    return len(batches)
