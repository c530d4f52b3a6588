"""Wrong: the summed squared error, eight times the mean's gradient."""

import torch
import torch.nn.functional as F
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets, reduction="sum").backward()
        optimizer.step()
