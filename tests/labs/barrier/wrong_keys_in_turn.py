"""Wrong (kept from a blind round, passed before): Reuses the keys of three barriers in
turn (the counter is taken modulo 3), so from the 4th call on a barrier finds its key
already open and the count past world_size: every rank returns at once, before the late
rank entered (a check that calls it only 3 times in a row passes)."""

import torch.distributed as dist

_calls = 0  # how many barriers this process has entered (every rank counts the same)


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    global _calls
    _calls += 1
    key = f"store_barrier/{_calls % 3}"
    if store.add(key, 1) >= world_size:
        store.set(key + "/open", "1")
    store.wait([key + "/open"])
