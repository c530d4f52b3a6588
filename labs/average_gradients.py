"""Lab: averaging gradients by hand (chapter: Data-parallel MNIST).

Check it with:  python -m workers.labs check average_gradients
"""

import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    """Replace every gradient of ``model`` by its mean over all the ranks.

    Arguments: ``model``, this rank's replica (the same architecture and the same weights
    on every rank). Every rank calls this function once per training step, after
    ``loss.backward()`` and before ``optimizer.step()``; each rank's loss was computed on
    its own equal share of the global batch.

    Afterwards: every parameter's ``.grad`` holds, on every rank, the mean of that
    parameter's gradients over all ranks, which is the gradient one process would compute
    on the whole global batch. The weights and the optimizer are left alone.

    May call: dist.get_world_size(), dist.all_reduce (with ReduceOp.SUM, the default, or
    ReduceOp.AVG; with async_op=True, wait() for its Work before you touch the tensor),
    and torch tensor operations. No other collective: a reduce to one rank and a
    broadcast back would average too, through one rank.
    """
    raise NotImplementedError("write average_gradients, then run: "
                              "python -m workers.labs check average_gradients")
