"""Wrong: skips a tensor with no elements with ``return`` where ``continue`` was meant, so
in a list of several tensors every tensor after an empty one is left unreduced (breaks "each
tensor holds the reduction of that tensor over every rank", for 0-element tensors in lists)."""



def allreduce(self, tensors, opts):
    combine = self.reduction(opts, "allreduce")
    seq = self.next_seq()

    def run():
        for i, tensor in enumerate(tensors):
            self.put(seq, f"t{i}", tensor)
        for i, tensor in enumerate(tensors):
            if tensor.numel() == 0:
                return  # nothing to reduce
            parts = self.get(seq, f"t{i}", tensor, range(self.world_size))
            total = parts[0].clone()
            for part in parts[1:]:
                combine(total, part)
            tensor.copy_(total)
        self.finish(seq, [f"t{i}" for i in range(len(tensors))])

    return self.submit(run, tensors)
