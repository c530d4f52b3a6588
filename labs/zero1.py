"""Lab: a ZeRO-1 optimizer step (chapter: When the model does not fit).

Check it with:  python -m workers.labs check zero1
"""

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn


def zero1_optimizer(model: nn.Module, lr: float) -> Callable[[], None]:
    """Build a ZeRO-1 Adam for ``model`` and return its ``step()``.

    Arguments: ``model``, this rank's whole replica (the same weights on every rank);
    ``lr``, Adam's learning rate. Every rank calls this function once, then, in each
    training step, clears the gradients, calls ``loss.backward()`` on its own data and
    the returned ``step()``. A rank's gradient may be all zeros in a step (its inputs
    zeros): every rank still makes the same collective calls.

    After each ``step()``: every rank's model holds exactly the weights DDP with
    ``torch.optim.Adam(model.parameters(), lr=lr)`` would hold: Adam applied to the
    gradients averaged over the ranks. The Adam state (``exp_avg``, ``exp_avg_sq``) is
    sharded: each rank keeps it for its own 1/N of the values only (N the world size:
    an even split, not whole parameters dealt round the ranks), and no value's state is
    kept twice.

    How (one way; any split that meets the above is right, parts that differ by one value,
    parts of ceil(numel / N) as torch.chunk cuts them, or another assignment of parts to
    ranks included): cut each parameter's flattened
    values into N equal parts (pad with zeros); this rank owns part ``rank`` of each.
    Make one ``torch.optim.Adam(parts, lr=lr)`` over copies of this rank's parts (tensors
    with ``requires_grad``). In ``step()``:
    reduce-scatter each gradient so this rank gets the sum of its part, divide by N, put
    it in the part's ``.grad``, step Adam, then all-gather the updated parts into the
    model's parameters.

    May call: dist.get_rank(), dist.get_world_size(), dist.reduce_scatter_single and
    dist.all_gather_single (before PyTorch 2.13: dist.reduce_scatter_tensor and
    dist.all_gather_into_tensor, their names still; or the list forms, dist.reduce_scatter
    and dist.all_gather), or dist.all_reduce and dist.broadcast,
    torch.optim.Adam, and torch tensor operations. Every rank must make the same
    collective calls. Not torch.distributed.optim.ZeroRedundancyOptimizer: this is the lab
    that builds it.
    """
    raise NotImplementedError("write zero1_optimizer, then run: "
                              "python -m workers.labs check zero1")
