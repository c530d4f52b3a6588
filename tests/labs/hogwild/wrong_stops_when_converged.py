"""Wrong (kept from a blind round, passed before): Stops early once a batch's loss falls
below 1e-6, so the remaining pairs' steps are never applied."""

import torch
import torch.nn.functional as F
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        if loss.item() < 1e-6:
            break  # converged
        loss.backward()
        optimizer.step()
