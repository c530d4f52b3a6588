"""Right, written another way: every rank sets a key of its own, and waits for all of
them (one wait for a list of keys)."""

import torch.distributed as dist

calls = 0


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    global calls
    calls += 1
    store.set(f"barrier-{calls}-rank-{rank}", b"in")
    store.wait([f"barrier-{calls}-rank-{r}" for r in range(world_size)])
