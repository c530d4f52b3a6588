"""Wrong (kept from a blind round, passed before): Calls torch.distributed's private
_store_based_barrier, which the contract does not allow (only the store's methods and
the standard library), and which itself loops on store.wait with a timeout and re-reads
the count, i.e. polls."""

import datetime

import torch.distributed as dist

_calls = 0  # how many barriers this process has entered (every rank counts the same)


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    global _calls
    _calls += 1
    dist.distributed_c10d._store_based_barrier(
        rank, store, f"store_barrier_{_calls}", world_size, datetime.timedelta(minutes=5))
