"""Wrong: reduces the first tensor of the list only."""

def allreduce(self, tensors, opts):
    combine, seq = self.reduction(opts, "allreduce"), self.next_seq()
    everyone = range(self.world_size)

    def run():
        for i, tensor in enumerate(tensors[:1]):
            self.put(seq, f"t{i}", tensor)
        for i, tensor in enumerate(tensors[:1]):
            parts = self.get(seq, f"t{i}", tensor, everyone)
            total = parts[0].clone()
            for part in parts[1:]:
                combine(total, part)
            tensor.copy_(total)
        self.finish(seq, [f"t{i}" for i in range(1)])

    return self.submit(run, tensors)
