"""A job that hangs on purpose: rank 1 never calls the all_reduce rank 0 waits in. While it
hangs, look at it from a second terminal: `py-spy dump --pid PID` prints a rank's stack,
and `kill -USR1 PID` makes that rank print every thread's stack here (faulthandler)."""

import faulthandler
import os
import signal
import socket
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def main(rank: int, world_size: int, port: int) -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 PID: every stack
    # rank 0's store listens on loopback only: left to itself, it takes every address
    listening = socket.create_server(("127.0.0.1", port)).detach() if rank == 0 else None
    store = dist.TCPStore("127.0.0.1", port, world_size, rank == 0,
                          timeout=timedelta(seconds=60), master_listen_fd=listening)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=60))  # so the hang ends after 60 s
    print(f"[rank {rank}] pid {os.getpid()}", flush=True)
    if rank == 1:
        time.sleep(90)  # busy elsewhere, or stuck: it never calls the all_reduce
    else:
        dist.all_reduce(torch.ones(1))  # waits for rank 1, until the timeout
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2, int(os.environ.get("MASTER_PORT", "29500"))), nprocs=2)
