"""Wrong: the result replaces the list item instead of being written into the tensor."""

def allreduce(self, tensors, opts):
    combine, seq = self.reduction(opts, "allreduce"), self.next_seq()
    everyone = range(self.world_size)

    def run():
        for i, tensor in enumerate(tensors):
            self.put(seq, f"t{i}", tensor)
        for i, tensor in enumerate(tensors):
            parts = self.get(seq, f"t{i}", tensor, everyone)
            total = parts[0].clone()
            for part in parts[1:]:
                combine(total, part)
            tensors[i] = total
        self.finish(seq, [f"t{i}" for i in range(len(tensors))])

    return self.submit(run, tensors)
