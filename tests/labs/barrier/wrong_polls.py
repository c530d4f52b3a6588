"""Wrong: it holds, but every waiting rank asks the store again and again."""

import time

import torch.distributed as dist

calls = 0


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    global calls
    calls += 1
    store.add(f"barrier/{calls}", 1)
    while store.add(f"barrier/{calls}", 0) < world_size:
        time.sleep(0.001)
