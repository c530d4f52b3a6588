"""Right, written another way: SGD by hand with p.sub_ under no_grad, the gradients dropped
with p.grad = None (a blind round's solution, which the contract's words then seemed to
forbid; they now allow a step by hand)."""

import torch
import torch.nn.functional as F
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    for inputs, targets in batches:
        for p in model.parameters():
            p.grad = None
        F.mse_loss(model(inputs), targets).backward()
        with torch.no_grad():
            for p in model.parameters():
                p.sub_(lr * p.grad)
