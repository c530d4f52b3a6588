"""Wrong: SGD by hand, out of place: p.data = p.data - ... puts a new, private tensor
where the shared one was."""

import torch
import torch.nn.functional as F
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    for inputs, targets in batches:
        model.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.data = parameter.data - lr * parameter.grad
