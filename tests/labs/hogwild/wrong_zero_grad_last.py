"""Wrong (kept from a blind round, passed before): Zeroes the gradients after each step
instead of before it, so a .grad the model arrives with (one the parent computed, shared
by share_memory() and so seen by every forked process) is added into the first step;
right only when the model comes without gradients."""

import torch
import torch.nn.functional as F
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for inputs, targets in batches:
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()
        optimizer.zero_grad()  # clean up for the next step
