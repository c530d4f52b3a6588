"""Wrong (kept from a blind round, passed before): The last rank sets the open key before
it bumps the shared generation, so a released rank that comes straight back can still
read the old generation, join the old (already open) barrier and leave before the others
enter; a race that shows only now and then."""

import torch.distributed as dist


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    gen = store.add("barrier/generation", 0)
    key = f"barrier/{gen}"
    if store.add(key, 1) == world_size:
        store.set(f"{key}/open", "1")
        store.add("barrier/generation", 1)  # too late: the others may already be back
    store.wait([f"{key}/open"])
