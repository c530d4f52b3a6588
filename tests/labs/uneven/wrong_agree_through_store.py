"""Wrong (kept from a blind round, passed before): Agrees through the default group's
TCPStore (each rank writes whether it has a batch and waits for the others' keys)
instead of the all-reduce the contract asks for."""

import torch
import torch.distributed as dist
from torch import nn


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    store = dist.distributed_c10d._get_default_store()
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    steps = 0
    while True:
        store.set(f"uneven/{steps}/{rank}", "1" if steps < len(batches) else "0")
        keys = [f"uneven/{steps}/{r}" for r in range(world_size)]
        store.wait(keys)
        if any(store.get(k) == b"0" for k in keys):
            break

        optimizer.zero_grad()
        loss = model(batches[steps]).pow(2).mean()
        loss.backward()
        optimizer.step()
        steps += 1

    return steps
