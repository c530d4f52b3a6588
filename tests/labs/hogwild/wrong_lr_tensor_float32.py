"""Wrong (kept from a blind round, passed before): turns lr into torch.tensor(lr), float32
by default, and steps p.sub_(lr_t * p.grad): for a float64 model the step uses lr rounded to
float32 (0.1 -> 0.10000000149), not lr, so p -= lr * p.grad is off in float64 (float32
models are unaffected)."""

import torch
import torch.nn.functional as F
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    lr_t = torch.tensor(lr)
    for inputs, targets in batches:
        for p in model.parameters():
            p.grad = None
        F.mse_loss(model(inputs), targets).backward()
        with torch.no_grad():
            for p in model.parameters():
                p.sub_(lr_t * p.grad)
