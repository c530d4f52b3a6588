"""Wrong: adds up the loss of every batch and takes one step at the end."""

import torch
import torch.nn.functional as F
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    optimizer.zero_grad()
    total = sum(F.mse_loss(model(inputs), targets) for inputs, targets in batches)
    total.backward()
    optimizer.step()
