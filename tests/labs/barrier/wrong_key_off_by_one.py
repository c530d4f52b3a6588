"""Wrong: each rank sets its own key, then waits for ranks 1 to world_size: a key that no
rank sets (off by one), so every rank waits forever."""

import torch.distributed as dist

calls = 0


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    global calls
    calls += 1
    store.set(f"barrier/{calls}/{rank}", "here")
    store.wait([f"barrier/{calls}/{r}" for r in range(1, world_size + 1)])
