"""Wrong (kept from a blind round, failed before with a message that guessed at copies):
breaks "one SGD step per pair, in order": it concatenates all of this process's
pairs into one batch and makes a single step on their mean loss (right only when there is
one pair, or nothing to train)."""

import torch
from torch import nn
from torch.nn import functional as F


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    if not batches:
        return
    inputs = torch.cat([x for x, _ in batches])
    targets = torch.cat([t for _, t in batches])
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    optimizer.zero_grad()
    F.mse_loss(model(inputs), targets).backward()
    optimizer.step()
