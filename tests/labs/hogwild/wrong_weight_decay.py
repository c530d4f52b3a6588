"""Wrong (kept from a blind round, passed before): Adds a small weight_decay=1e-4 to the
SGD, so every step also shrinks the weights by lr*1e-4*w: the final weights differ from
plain SGD's by little, and by more with more steps, larger weights or larger lr."""

import torch
import torch.nn.functional as F
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, weight_decay=1e-4)
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()
