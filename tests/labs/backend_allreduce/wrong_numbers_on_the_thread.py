"""Wrong: breaks "self.next_seq() (once per collective, in the call)": the number is taken
inside ``run``, on the backend's thread, so collectives called while the thread is busy
(async all_reduces, then a broadcast) get numbers that depend on each rank's timing: keys
mismatch, and a rank waits out the timeout (or reads another collective's bytes); a lone
all_reduce, and ``self.seq`` read much later, look right.
"""



def allreduce(self, tensors, opts):
    """All-reduce ``tensors`` through the store, on the backend's thread."""
    self.check(tensors, "allreduce")
    combine = self.reduction(opts, "allreduce")
    everyone = range(self.world_size)

    def run():
        seq = self.next_seq()  # numbered when it runs: the thread runs them in order
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
