"""Wrong: breaks "a reduction the backend lacks ... raises, on every rank": besides the four
the backend knows, ReduceOp.AVG is accepted and computed as the sum divided by the world
size, instead of raising (BAND and the like still raise).
"""

import torch
from torch.distributed import ReduceOp


def allreduce(self, tensors, opts):
    """All-reduce ``tensors`` through the store, on the backend's thread."""
    self.check(tensors, "allreduce")
    op = getattr(opts.reduceOp, "op", opts.reduceOp)
    average = op == ReduceOp.AVG
    if average:  # gloo lacks it; it is only a sum and a division
        combine = torch.Tensor.add_
    else:
        combine = self.reduction(opts, "allreduce")
    seq = self.next_seq()
    everyone = range(self.world_size)

    def run():
        for i, tensor in enumerate(tensors):
            self.put(seq, f"t{i}", tensor)
        for i, tensor in enumerate(tensors):
            parts = self.get(seq, f"t{i}", tensor, everyone)
            total = parts[0].clone()
            for part in parts[1:]:
                combine(total, part)
            if average:
                total = total.div(self.world_size) if tensor.is_floating_point() \
                    else total.div(self.world_size, rounding_mode="floor")
            tensor.copy_(total)
        self.finish(seq, [f"t{i}" for i in range(len(tensors))])

    return self.submit(run, tensors)
