"""Wrong (kept from a blind round, passed before): Takes an exclusive fcntl.flock on a
shared lock file around each step, a lock Hogwild must not take (and a call outside SGD,
functional and tensor operations); the weights end up right."""

import fcntl
import os
import tempfile

import torch
import torch.nn.functional as F
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    path = os.path.join(tempfile.gettempdir(), "hogwild-step.lock")
    with open(path, "a") as lock:
        for inputs, targets in batches:
            optimizer.zero_grad()
            F.mse_loss(model(inputs), targets).backward()
            fcntl.flock(lock, fcntl.LOCK_EX)  # no lost updates
            try:
                optimizer.step()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
