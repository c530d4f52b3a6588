"""The reference solution of the barrier lab: it must pass."""

import torch.distributed as dist

calls = 0  # barriers this process has entered: every rank counts the same


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    global calls
    calls += 1
    key = f"barrier/{calls}"  # a new key each time: the store never forgets the old ones
    if store.add(key, 1) == world_size:  # the last rank to arrive opens the barrier
        store.set(f"{key}/open", "1")
    store.wait([f"{key}/open"])
