"""DDP with a shipped communication hook (gradients sent in fp16) and gradient accumulation
with no_sync(): two ranks, four micro-batches per optimizer step."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP


def main(rank: int, world_size: int) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 1)))  # rank 0's weights, broadcast
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)  # half the bytes
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)  # each rank its own data
    for step in range(3):
        *first, last = [torch.randn(8, 32, generator=generator) for _ in range(4)]
        losses = []  # each micro-batch's loss / 4: their sum is the step's mean loss
        for x in first:
            with model.no_sync():  # forward inside too, or DDP still all-reduces
                losses.append(model(x).pow(2).mean() / 4)
                losses[-1].backward()  # gradients add up locally
        losses.append(model(last).pow(2).mean() / 4)
        losses[-1].backward()  # all-reduces everything accumulated since the last step
        optimizer.step()
        optimizer.zero_grad()
        print(f"[rank {rank}] step {step}: loss {sum(losses).item():.4f}", flush=True)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = [torch.empty_like(weights) for _ in range(world_size)]
    dist.all_gather(everyone, weights)
    print(f"[rank {rank}] same weights as every rank: "
          f"{all(torch.equal(weights, w) for w in everyone)}", flush=True)
    del model  # freed after its gloo group, DDP can hang at exit (pytorch#56297)
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ:  # started by torchrun, which set RANK, WORLD_SIZE, MASTER_*
        main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    else:  # started with python: start the ranks here
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        mp.spawn(main, args=(2,), nprocs=2)
