"""Start ranks that find each other, all-reduce one tensor, and leave.

    python programs/join_and_all_reduce.py     # starts 2 ranks (mp.spawn)
    torchrun --standalone --nproc-per-node 2 programs/join_and_all_reduce.py
"""
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def main(rank: int, world_size: int) -> None:
    # env:// is the default: the store's address from MASTER_ADDR/MASTER_PORT
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=60))  # collectives' too
    rank, world_size = dist.get_rank(), dist.get_world_size()  # after init
    total = torch.tensor([rank])
    dist.all_reduce(total)  # SUM: every rank gets 0 + 1 + ... + (n - 1)
    print(f"[rank {rank}] one of {world_size}; all_reduce gave {total.item()}",
          flush=True)
    dist.destroy_process_group()  # leave: the group's sockets and threads go


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # the store's host
    os.environ.setdefault("MASTER_PORT", "29500")  # the same for every rank
    if "RANK" in os.environ:  # torchrun started this process as one rank
        main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    else:  # plain python: start the ranks here, a process each
        print("[main] mp.spawn starts 2 ranks", flush=True)
        mp.spawn(main, args=(2,), nprocs=2)  # main(rank, 2) in each; joins all
        print("[main] every rank exited with code 0", flush=True)
