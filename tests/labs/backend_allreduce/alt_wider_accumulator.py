"""Right, written another way: floating-point parts accumulated in float64 and rounded once
to the tensor's dtype (wider is allowed), integers in their own dtype; the tensors put in
one loop and each read and reduced as soon as its parts are there."""

import torch


def allreduce(self, tensors, opts):
    combine = self.reduction(opts, "allreduce")
    seq = self.next_seq()

    def run():
        for index, tensor in enumerate(tensors):
            self.put(seq, str(index), tensor)
        for index, tensor in enumerate(tensors):
            wide = torch.float64 if tensor.is_floating_point() else tensor.dtype
            parts = self.get(seq, str(index), tensor, list(range(self.world_size)))
            total = parts[0].to(wide)
            for rank in range(1, self.world_size):
                combine(total, parts[rank].to(wide))
            tensor.copy_(total)
        self.finish(seq, [str(index) for index in range(len(tensors))])

    return self.submit(run, tensors)
