"""Wrong: the last rank in sets a key, and the others spin on store.check until it
exists: no sleep, thousands of calls."""

import torch.distributed as dist

calls = 0


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    global calls
    calls += 1
    key = f"barrier/{calls}"
    if store.add(key, 1) == world_size:
        store.set(f"{key}/open", "1")
    while not store.check([f"{key}/open"]):
        pass
