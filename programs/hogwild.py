"""Hogwild: two processes train one model in shared memory, with no lock."""

import os

import torch
import torch.multiprocessing as mp
from torch import nn
from torch.nn import functional as F
from torchvision import datasets


def load(train: bool):
    mnist = datasets.MNIST("data", train=train, download=False)
    return (mnist.data.flatten(1) / 255 - 0.13) / 0.31, mnist.targets


def train(rank: int, model: nn.Module, steps: int) -> None:
    torch.set_num_threads(1)  # one thread per process, one process per core
    torch.manual_seed(rank)  # each process draws batches of its own
    images, labels = load(train=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        batch = torch.randint(len(labels), (32,))
        loss = F.cross_entropy(model(images[batch]), labels[batch])
        optimizer.zero_grad()  # the gradients are this process's own
        loss.backward()
        optimizer.step()  # writes into the shared weights, racing the other
    print(f"[rank {rank}] pid {os.getpid()}: {steps} steps, last loss "
          f"{loss.item():.3f}", flush=True)


if __name__ == "__main__":
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    model.share_memory()  # the parameters move to shared memory: one copy
    workers = [mp.Process(target=train, args=(rank, model, 300))
               for rank in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    images, labels = load(train=False)
    with torch.no_grad():  # the parent's model holds what the workers wrote
        right = (model(images).argmax(1) == labels).float().mean().item()
    print(f"[main] exit codes {[worker.exitcode for worker in workers]}; "
          f"the shared model, tested: {right:.1%} right", flush=True)
