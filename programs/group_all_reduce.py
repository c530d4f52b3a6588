"""Four ranks, two process groups: an all_reduce inside each, and one outside its group."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def main(rank: int, world_size: int) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    # Every rank creates every group, in the same order, even the groups it is not in.
    even = dist.new_group(list(range(0, world_size, 2)))
    odd = dist.new_group(list(range(1, world_size, 2)))
    mine, other = (even, odd) if rank % 2 == 0 else (odd, even)

    x = torch.tensor([float(rank + 1)])
    dist.all_reduce(x, group=mine)  # only the members of `mine` take part
    print(f"[rank {rank}] group rank {dist.get_rank(mine)} of {dist.get_world_size(mine)}: "
          f"sum {x.item():g}", flush=True)

    y = torch.tensor([float(rank + 1)])
    dist.all_reduce(y, group=other)  # not a member: no error, only a warning, y unchanged
    print(f"[rank {rank}] outside the other group: get_rank {dist.get_rank(other)}, "
          f"y still {y.item():g}", flush=True)
    # No rank has heard from the other group since init_process_group, which does not
    # wait for the others: a rank leaving now can cut a peer still connecting to it.
    dist.barrier()  # so every rank waits for all of them before it leaves
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ:  # started by torchrun, which set RANK, WORLD_SIZE, MASTER_*
        main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    else:  # started with python: start the ranks here
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        mp.spawn(main, args=(4,), nprocs=4)
