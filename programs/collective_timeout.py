"""A rank that does not come to a collective in time: the other gives up at the group's
timeout. @record hands a rank's exception to torchrun's report."""

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.elastic.multiprocessing.errors import record


@record  # under torchrun: an exception here, and its traceback, go into torchrun's report
def main(rank: int, world_size: int) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world_size)  # 30 min by default
    group = dist.new_group(timeout=timedelta(seconds=2))  # its collectives wait 2 s at most
    if rank == 1:
        time.sleep(4)  # busy elsewhere, or stuck: rank 0 cannot tell which
    else:
        began = time.time()
        try:
            dist.all_reduce(torch.ones(1), group=group)
        except RuntimeError as error:  # gloo's timeout is a RuntimeError, not a crash
            print(f"[rank 0] gave up after {time.time() - began:.1f} s: "
                  f"{str(error).split('] ')[-1]}", flush=True)
    print(f"[rank {rank}] leaves", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if "RANK" in os.environ:  # started by torchrun: this process is one rank
        main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    else:
        mp.spawn(main, args=(2,), nprocs=2)
