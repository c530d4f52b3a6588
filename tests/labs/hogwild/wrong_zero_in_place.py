"""Wrong (kept from a blind round, passed before): Zeroes the gradients in place
(zero_grad(set_to_none=False)); when the model arrives with a .grad (moved to shared
memory by share_memory(), inherited under fork) every process zeroes and accumulates
into that one shared tensor, so one process can wipe or add to another's gradient
between its backward and its step (timing-dependent: it showed on 4 processes x 300
steps, not on short runs)."""

import torch
import torch.nn.functional as F
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for inputs, targets in batches:
        optimizer.zero_grad(set_to_none=False)  # keep the buffers, saves allocations
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()
