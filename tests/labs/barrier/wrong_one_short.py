"""Wrong: opens when world_size - 1 ranks are in (the count starts at 1, it reasons)."""

import torch.distributed as dist

calls = 0


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    global calls
    calls += 1
    key = f"barrier/{calls}"
    if store.add(key, 1) == world_size - 1:
        store.set(f"{key}/open", "1")
    store.wait([f"{key}/open"])
