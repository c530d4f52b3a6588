"""Lab: a ring all-reduce by hand (chapter: Point-to-point and collective communication).

Check it with:  python -m workers.labs check ring
"""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor) -> None:
    """Sum ``tensor`` over every rank of the default process group, in place, in a ring.

    Arguments: ``tensor``, this rank's 1-D float32 tensor; its length is a positive
    multiple of the world size (``tensor.chunk(world_size)`` gives equal chunks). Every
    rank calls this function once, with a tensor of the same length.

    Afterwards: every rank's ``tensor`` holds the element-wise sum of all the ranks'
    tensors, exactly what ``dist.all_reduce(tensor)`` would leave in it.

    How: a reduce-scatter, then an all-gather, each of N-1 steps (N the world size). In
    each step a rank sends one chunk (1/N of the tensor) to its right neighbour,
    (rank + 1) % N, and receives one from its left neighbour, (rank - 1) % N (a ring
    that turns the other way is a ring too). So each rank sends 2(N-1) messages of 1/N
    of the tensor: 2(N-1)/N of the tensor in all.

    May call: dist.get_rank(), dist.get_world_size(), dist.isend, dist.irecv, dist.send,
    dist.recv (and wait() on each Work an isend or irecv returns; or the same sends and
    receives as dist.P2POp in dist.batch_isend_irecv), and torch tensor operations. Until
    a Work's wait() returns, leave its tensor alone: do not change a chunk that is being
    sent, nor receive into a buffer an earlier isend or irecv still uses. May not call: any
    collective (all_reduce, reduce_scatter, all_gather, broadcast, ...), by any name.
    """
    raise NotImplementedError("write ring_all_reduce, then run: "
                              "python -m workers.labs check ring")
