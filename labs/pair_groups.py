"""Lab: groups of two (chapter: Process groups and backends).

Check it with:  python -m workers.labs check pair_groups
"""

import torch
import torch.distributed as dist


def pair_sum(tensor: torch.Tensor) -> None:
    """Sum ``tensor`` over this rank's pair only, in place.

    The world size is even. Ranks 2k and 2k+1 form a pair: ranks 0 and 1, ranks 2 and 3,
    and so on. Arguments: ``tensor``, this rank's tensor (the same shape on every rank).
    Every rank calls this function once.

    Afterwards: ranks 2k and 2k+1 both hold the sum of their two tensors, and nothing of
    any other rank's.

    How: make one group per pair with ``dist.new_group(ranks)``, then all-reduce within
    this rank's own group. ``new_group`` is itself collective: every rank must call it for
    every pair, even the pairs it is not in, with the same arguments in the same order.
    The other legal way (PyTorch 2.1 and later): ``dist.new_group(ranks,
    use_local_synchronization=True)`` is collective among the group's members only, so
    each rank may make just its own pair's group.

    May call: dist.get_rank(), dist.get_world_size(), dist.new_group (or
    dist.new_subgroups(group_size=2), or dist.new_subgroups_by_enumeration with the list
    of pairs, which make every pair's group with it in one call),
    dist.all_reduce(tensor, group=...), and torch tensor operations; nothing else (no
    send or recv to the partner, no collective over every rank).
    """
    raise NotImplementedError("write pair_sum, then run: "
                              "python -m workers.labs check pair_groups")
