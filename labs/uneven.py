"""Lab: uneven inputs (chapter: When things go wrong).

Check it with:  python -m workers.labs check uneven
"""

import torch
import torch.distributed as dist
from torch import nn


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    """Train ``model`` on this rank's ``batches``, stopping when any rank runs out.

    Arguments: ``model``, a DistributedDataParallel model (the same on every rank);
    ``optimizer``, an SGD optimizer over its parameters; ``batches``, this rank's list of
    input tensors. How many batches there are differs from rank to rank, and may be none.

    One step: ``optimizer.zero_grad()``, ``loss = model(batch).pow(2).mean()``,
    ``loss.backward()`` (DDP all-reduces the gradients there, on every rank),
    ``optimizer.step()``.

    Afterwards: every rank has taken the same number of steps, as many as the rank with
    the fewest batches has, on its batches in order from the first; every rank has
    returned (none is left waiting in a backward that the others never join). Returns
    that number of steps, an int.

    How: before each step, agree with the other ranks whether every rank still has a
    batch: one all-reduce of a flag (1 if this rank has a batch, else 0) with
    ReduceOp.MIN; stop when it is 0 (or the opposite flag, 1 when out, with MAX; any
    reduction that agrees will do, such as a SUM compared with the world size).

    May call: dist.all_reduce (blocking, or with async_op=True and wait() before you read
    the flag),
    dist.get_world_size(), torch tensor operations, and the model and the optimizer. Not
    torch.distributed.algorithms.join.Join, nor model.join() (they let every rank use all
    of its batches; this lab stops at the shortest).
    """
    raise NotImplementedError("write train_uneven, then run: "
                              "python -m workers.labs check uneven")
