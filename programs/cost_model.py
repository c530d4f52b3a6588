"""Time all_reduce at a few sizes on 2 ranks and fit T = 2(N-1) alpha + 2(N-1)/N n / beta.

    python programs/cost_model.py
"""
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20]  # bytes: 4 KiB to 4 MiB


def main(rank: int, world_size: int) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    fastest = []
    for size in SIZES:
        x = torch.ones(size // 4)  # float32: 4 bytes each
        seconds = []
        for _ in range(12):
            dist.barrier()  # the ranks start the call nearly together
            begin = time.perf_counter()
            dist.all_reduce(x)
            seconds.append(time.perf_counter() - begin)
        fastest.append(min(seconds[5:]))  # five warm up; the fastest is the undisturbed
    if rank == 0:
        # a ring all-reduce: 2(N-1) steps, each rank sending 2(N-1)/N of the bytes
        sent = [2 * (world_size - 1) / world_size * size for size in SIZES]
        slope, intercept = statistics.linear_regression(sent, fastest)
        for size, t in zip(SIZES, fastest):
            print(f"[rank 0] {size:>8} B: {t * 1e6:8.0f} us", flush=True)
        alpha = intercept / (2 * (world_size - 1))
        print(f"[rank 0] alpha = {alpha * 1e6:.0f} us per step, "
              f"beta = {1 / slope / 1e9:.2f} GB/s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ:  # started by torchrun, which sets the rest
        main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    else:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo's sockets on loopback
        if "MASTER_PORT" not in os.environ:  # a free one: torchrun's 29500 may be taken
            with socket.socket() as free:
                free.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(free.getsockname()[1])
        mp.spawn(main, args=(2,), nprocs=2)
