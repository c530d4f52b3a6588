"""Train a small model with FSDP2 on CPU ranks: each rank keeps 1/N of every weight."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def train(rank: int, world_size: int) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    mesh = init_device_mesh("cpu", (world_size,))  # the ranks, as FSDP2 addresses them
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 1))
    for layer in model[::2]:  # each linear layer is gathered on its own, when it runs
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)  # after fully_shard, always
    weight = model[0].weight  # a DTensor: this rank's rows of the whole weight
    print(f"[rank {rank}] holds {tuple(weight.to_local().shape)} of layer 0's weight "
          f"{tuple(weight.shape)}", flush=True)
    torch.manual_seed(rank)  # from here on, every rank draws its own batches
    for step in range(20):
        inputs = torch.randn(32, 64)
        loss = (model(inputs).squeeze(1) - inputs.sum(1)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()  # reduce-scattered: each rank gets its rows' mean over the ranks
        optimizer.step()  # on this rank's rows only
        if step % 5 == 4:
            print(f"[rank {rank}] step {step + 1}: loss {loss.item():.2f}", flush=True)
    print(f"[rank {rank}] full_tensor() sum {weight.full_tensor().sum():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if "RANK" in os.environ:  # started by torchrun, one process per rank
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    else:  # started with python: start the ranks here
        mp.spawn(train, args=(2,), nprocs=2)
