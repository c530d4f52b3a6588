"""Wrong: gives the model a fresh nn.Parameter to train: private to this process."""

import torch
import torch.nn.functional as F
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    model.weight = nn.Parameter(model.weight.detach().clone())
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()
