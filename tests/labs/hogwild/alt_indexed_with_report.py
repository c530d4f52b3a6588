"""Right, written another way: by index, momentum=0.0 given, and the loss computed a
second time without gradients, to report it (a forward pass that trains nothing)."""

import torch
from torch import nn
from torch.nn import functional


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.0)
    losses = []
    for index in range(len(batches)):
        inputs, targets = batches[index]
        optimizer.zero_grad()
        loss = functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            losses.append(functional.mse_loss(model(inputs), targets).item())
