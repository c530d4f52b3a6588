"""Wrong (kept from a blind round, passed before): A correct barrier followed by
time.sleep(0.05) "so the open key reaches every rank": sleeping is forbidden and it
holds the last rank after it arrived."""

import time

import torch.distributed as dist

_calls = 0


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    global _calls
    n = _calls
    _calls += 1
    if store.add(f"count/{n}", 1) == world_size:
        store.set(f"open/{n}", "1")
    store.wait([f"open/{n}"])
    time.sleep(0.05)
