"""Wrong: a right barrier, then 0.8 s of sleep "to let the store settle": every rank,
the last to arrive too, is held long after the barrier opened."""

import time

import torch.distributed as dist

calls = 0


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    global calls
    calls += 1
    key = f"barrier/{calls}"
    if store.add(key, 1) == world_size:
        store.set(f"{key}/open", "1")
    store.wait([f"{key}/open"])
    time.sleep(0.8)
