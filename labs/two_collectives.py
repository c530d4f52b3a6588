"""Lab: all_reduce from two other collectives (chapter: Point-to-point and collective
communication).

Check it with:  python -m workers.labs check two_collectives
"""

import torch
import torch.distributed as dist


def all_reduce_from_two(tensor: torch.Tensor) -> None:
    """Sum ``tensor`` over every rank of the default process group, in place, with one
    reduce-scatter and one all-gather.

    Arguments: ``tensor``, this rank's 1-D, contiguous float32 tensor. Every rank calls
    this function once, with a tensor of the same length; that length need not be a
    multiple of the world size.

    Afterwards: every rank's ``tensor`` holds the element-wise sum of all the ranks'
    tensors, exactly what ``dist.all_reduce(tensor)`` would leave in it.

    How: after the reduce-scatter each rank holds the sum of its own 1/N of the tensor
    (N the world size); the all-gather hands every rank every part. Pad the tensor to the
    next multiple of N first (no padding when N divides its length: each part is then
    exactly 1/N of it), and drop the padding at the end (zeros are the usual padding; as
    it is dropped, its values never reach the result).

    May call: dist.get_rank(), dist.get_world_size(), one dist.reduce_scatter_single (before
    PyTorch 2.13: dist.reduce_scatter_tensor; or the list form dist.reduce_scatter), one
    dist.all_gather_single (before 2.13: dist.all_gather_into_tensor; or dist.all_gather),
    and torch tensor operations (the same two collectives reached through the process
    group's own methods count as these); with async_op=True, wait() for each Work before
    you use its result. May not call: dist.all_reduce, or any other collective, by any
    name (the checker counts torch.distributed.distributed_c10d's and the process group's
    too).
    """
    raise NotImplementedError("write all_reduce_from_two, then run: "
                              "python -m workers.labs check two_collectives")
