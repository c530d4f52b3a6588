"""Lab: a barrier from a store (chapter: Finding each other: init methods and the store).

Check it with:  python -m workers.labs check barrier
"""

import torch.distributed as dist


def store_barrier(store: dist.Store, rank: int, world_size: int) -> None:
    """Block until every rank of the job has entered this barrier, using only ``store``.

    Arguments: ``store``, the job's key-value store (a TCPStore every rank reaches, used
    for nothing else); ``rank``, this process's rank, 0 to world_size - 1; ``world_size``,
    how many ranks call this function.

    Afterwards: no rank has returned from its k-th call before every rank has entered its
    k-th call. Every rank calls this function several times in a row, so each call must
    work however many calls came before it.

    May call: the store's methods (``store.add(key, amount)`` returns the new count,
    ``store.set(key, value)``, ``store.wait([keys])`` blocks until every key exists,
    ``store.get(key)``, ``store.check([keys])``) and the Python standard library. There is
    no process group here: no torch.distributed collective. Block in ``store.wait``, do not
    poll the store in a loop, and do not sleep: which rank comes last, and how late, is
    not known in advance (the checker picks them at random). Remember that a store never
    forgets a key.
    """
    raise NotImplementedError("write store_barrier, then run: "
                              "python -m workers.labs check barrier")
