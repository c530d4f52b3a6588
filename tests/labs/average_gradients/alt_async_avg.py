"""Right (kept from a blind round, failed before): Right: starts one asynchronous all-
reduce with ReduceOp.AVG per gradient, then waits for every Work before returning; AVG
already divides, so nothing is divided by hand and no tensor is touched before its
wait()."""

import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module) -> None:
    works = [dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, async_op=True)
             for p in model.parameters() if p.grad is not None]
    for work in works:
        work.wait()
