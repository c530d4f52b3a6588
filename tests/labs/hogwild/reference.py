"""The reference solution of the hogwild lab: it must pass."""

import torch
import torch.nn.functional as F
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)  # steps write shared memory
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()
