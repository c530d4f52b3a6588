"""Wrong: sends this rank's parts (``self.put``) in the call, before ``submit``, and leaves
only the reading and reducing to ``run``; the call still returns without waiting for the
others, but ``run`` no longer does all of the communication (breaks "run ... does all of
the communication", on the backend's thread)."""



def allreduce(self, tensors, opts):
    combine = self.reduction(opts, "allreduce")
    seq = self.next_seq()
    for i, tensor in enumerate(tensors):  # send now: the store's set never waits
        self.put(seq, f"t{i}", tensor)

    def run():
        for i, tensor in enumerate(tensors):
            parts = self.get(seq, f"t{i}", tensor, range(self.world_size))
            total = parts[0].clone()
            for part in parts[1:]:
                combine(total, part)
            tensor.copy_(total)
        self.finish(seq, [f"t{i}" for i in range(len(tensors))])

    return self.submit(run, tensors)
