"""Right, written another way: rank 0 waits for every rank's key and then opens; the
others block in store.get, which waits until the key exists."""

from datetime import timedelta

import torch.distributed as dist

generation = 0


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    global generation
    generation += 1
    prefix = f"gen{generation}"
    store.set(f"{prefix}/{rank}", "1")
    if rank == 0:
        store.wait([f"{prefix}/{r}" for r in range(world_size)], timedelta(seconds=60))
        store.set(f"{prefix}/go", "1")
    else:
        store.get(f"{prefix}/go")
