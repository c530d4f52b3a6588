"""Wrong: breaks "in its own dtype: integers exactly" (as gloo's, which wrap around): integers
are accumulated in int64 and clamped to their dtype's range before being written back, so a
uint8 or int32 SUM/PRODUCT that overflows saturates (200+100 -> 255) instead of wrapping (44);
every result that fits is exact.
"""

import torch


def allreduce(self, tensors, opts):
    """All-reduce ``tensors`` through the store, on the backend's thread."""
    self.check(tensors, "allreduce")
    combine, seq = self.reduction(opts, "allreduce"), self.next_seq()
    everyone = range(self.world_size)

    def run():
        for i, tensor in enumerate(tensors):
            self.put(seq, f"t{i}", tensor)
        for i, tensor in enumerate(tensors):
            parts = self.get(seq, f"t{i}", tensor, everyone)
            if tensor.is_floating_point() or tensor.dtype == torch.int64:
                total = parts[0].clone()
                for part in parts[1:]:
                    combine(total, part)
            else:  # small integers: no silent overflow, keep the nearest value
                total = parts[0].to(torch.int64)
                for part in parts[1:]:
                    combine(total, part.to(torch.int64))
                info = torch.iinfo(tensor.dtype)
                total = total.clamp(info.min, info.max)
            tensor.copy_(total)
        self.finish(seq, [f"t{i}" for i in range(len(tensors))])

    return self.submit(run, tensors)
