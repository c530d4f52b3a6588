"""Wrong: a reduction the backend lacks falls back to a sum instead of raising."""

import torch


def allreduce(self, tensors, opts):
    try:
        combine = self.reduction(opts, "allreduce")
    except RuntimeError:
        combine = torch.Tensor.add_
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
            tensor.copy_(total)
        self.finish(seq, [f"t{i}" for i in range(len(tensors))])

    return self.submit(run, tensors)
