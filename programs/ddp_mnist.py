import argparse
import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import datasets, transforms


def train(local_rank: int, args) -> None:  # called by mp.spawn, or once under torchrun
    rank = int(os.environ.get("RANK", args.node_rank * args.nproc_per_node + local_rank))
    world_size = int(os.environ.get("WORLD_SIZE", args.nodes * args.nproc_per_node))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)  # nccl on GPUs
    data = datasets.MNIST("data", download=False, transform=transforms.ToTensor())
    sampler = DistributedSampler(data, shuffle=True, seed=0)  # a 1/N share of one shuffle
    loader = DataLoader(data, batch_size=32, sampler=sampler, shuffle=False, drop_last=True)
    torch.manual_seed(0)  # the same initial weights under every launcher
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(28 * 28, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(2):
        sampler.set_epoch(epoch)  # else every epoch repeats epoch 0's order
        for images, labels in loader:
            loss = torch.nn.functional.cross_entropy(model(images.flatten(1)), labels)
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients over all ranks during backward
            optimizer.step()
        print(f"[rank {rank}] epoch {epoch}: loss {loss.item():.3f}", flush=True)
    if rank == 0:  # one writer; model.module: the weights without DDP's "module." prefix
        torch.save(model.module.state_dict(), "ddp_mnist.pt")
    del model  # DDP goes before its group does: freed after it, it can hang at exit
    dist.barrier()  # no rank goes on (to load it, say) before the file is complete
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Data-parallel MNIST with DDP")
    for option, default in [("--nodes", 1), ("--node-rank", 0), ("--nproc-per-node", 2)]:
        parser.add_argument(option, type=int, default=default)
    args = parser.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # where the others find rank 0
    os.environ.setdefault("MASTER_PORT", "29500")
    if "LOCAL_RANK" in os.environ:  # torchrun or a launch script started this one rank
        train(int(os.environ["LOCAL_RANK"]), args)
    else:  # global rank = node rank x processes per node + local rank (see train)
        torch.multiprocessing.spawn(train, args=(args,), nprocs=args.nproc_per_node)
