"""Wrong (kept from a blind round, passed before): Computes the loss in float32 (.float()
on the output and the targets): the gradients of a float64 model are rounded to float32
precision, so its steps are about 1e-8 off; right in float32 only."""

import torch
from torch import nn
from torch.nn import functional as F


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs).float(), targets.float()).backward()
        optimizer.step()
