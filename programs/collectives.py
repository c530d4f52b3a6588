"""Point-to-point and collective calls on 3 ranks; each prints what it holds.

    python programs/collectives.py
    torchrun --standalone --nproc-per-node 2 programs/collectives.py
"""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def main(rank: int, n: int) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=n)
    x = torch.arange(n, dtype=torch.float32) + 10 * (rank + 1)  # rank 0: [10, 11, 12]
    got = torch.zeros(n)
    if rank == 0:
        dist.send(x, dst=1)  # point-to-point: to rank 1 only
    elif rank == 1:
        dist.recv(got, src=0)  # blocks until rank 0's tensor has arrived
    held = {"starts with": x, "recv": got}
    held["broadcast"] = x.clone()  # every rank calls every collective below
    dist.broadcast(held["broadcast"], src=0)  # rank 0's tensor, everywhere
    held["all_reduce"] = x.clone()
    dist.all_reduce(held["all_reduce"])  # element-wise SUM, on every rank
    parts = [torch.zeros(n) for _ in range(n)]
    dist.all_gather(parts, x)  # every rank's tensor, on every rank
    held["all_gather"] = torch.cat(parts)
    held["reduce_scatter"] = torch.zeros(1)  # rank r: the sum of element r
    dist.reduce_scatter(held["reduce_scatter"], list(x.split(1)))
    held["all_to_all_single"] = torch.zeros(n)  # element s of each rank: to s
    dist.all_to_all_single(held["all_to_all_single"], x)
    for name, tensor in held.items():
        print(f"[rank {rank}] {name:<17} {tensor.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if "RANK" in os.environ:  # started by torchrun as one rank
        main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    else:
        mp.spawn(main, args=(3,), nprocs=3)
