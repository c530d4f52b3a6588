"""Wrong (kept from a blind round, passed before): Waits for the 'open' key with a one-
second timeout and returns when the timeout fires, so it is a barrier only while every
rank arrives within a second."""

from datetime import timedelta

import torch.distributed as dist

_calls = 0


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    global _calls
    _calls += 1
    key = f"barrier/{_calls}"
    if store.add(key, 1) == world_size:
        store.set(key + "/open", "1")
    try:
        store.wait([key + "/open"], timedelta(seconds=1))
    except Exception:
        pass  # the others are surely here by now
