"""Wrong: the same keys every time. The first barrier holds; the second finds it open."""

import torch.distributed as dist


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    if store.add("barrier", 1) == world_size:
        store.set("barrier/open", "1")
    store.wait(["barrier/open"])
