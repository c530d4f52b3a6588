"""Wrong: accumulates two batches' gradients per step, halving the steps."""

import torch
import torch.nn.functional as F
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    optimizer.zero_grad()
    for index, (inputs, targets) in enumerate(batches):
        F.mse_loss(model(inputs), targets).backward()
        if index % 2 == 1:
            optimizer.step()
            optimizer.zero_grad()
