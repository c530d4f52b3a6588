"""Wrong: each rank waits for its left neighbour only (a ring, not a barrier): right with
2 ranks, where the neighbour is everyone else."""

import torch.distributed as dist

calls = 0


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    global calls
    calls += 1
    store.set(f"barrier/{calls}/{rank}", "here")
    store.wait([f"barrier/{calls}/{(rank - 1) % world_size}"])
