"""Wrong: packs all the tensors of the call into one flat bucket with torch.cat (one put and
one get, like DDP's buckets) and unpacks it after; torch.cat promotes mixed dtypes, so an
int64 tensor beside a float16 or float32 one is reduced in floating point. Breaks: in its own
dtype, integers exactly (a call whose tensors share one dtype is right)."""

import torch


def allreduce(self, tensors, opts):
    self.check(tensors, "allreduce")
    combine, seq = self.reduction(opts, "allreduce"), self.next_seq()
    everyone = range(self.world_size)

    def run():
        bucket = torch.cat([t.reshape(-1) for t in tensors])
        self.put(seq, "bucket", bucket)
        parts = self.get(seq, "bucket", bucket, everyone)
        total = parts[0].clone()
        for part in parts[1:]:
            combine(total, part)
        offset = 0
        for tensor in tensors:
            n = tensor.numel()
            tensor.copy_(total[offset:offset + n].view(tensor.shape))
            offset += n
        self.finish(seq, ["bucket"])

    return self.submit(run, tensors)
