"""Wrong: every rank trains on all of its own batches, and the shortest leaves first."""

import torch
from torch import nn


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    for batch in batches:
        optimizer.zero_grad()
        model(batch).pow(2).mean().backward()
        optimizer.step()
    return len(batches)
