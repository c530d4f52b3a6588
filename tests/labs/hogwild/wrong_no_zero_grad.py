"""Wrong: never zeroes the gradients, so each step adds up every gradient so far."""

import torch
import torch.nn.functional as F
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for inputs, targets in batches:
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()
