"""Wrong (kept from a blind round, passed before): Calls model.float() "to be safe" first;
for a float32 model that is a no-op, but for a model of another dtype (float64) it
replaces every parameter's .data with a private float32 tensor, so the process trains
its own copy and the shared weights never move."""

import torch
import torch.nn.functional as F
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    model.float()  # make sure weights and inputs agree
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs.float()), targets.float())
        loss.backward()
        optimizer.step()
