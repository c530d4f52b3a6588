"""Wrong: runs the communication on a thread of its own and returns a Work that is already
done (a missing wait)."""

import threading


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
            tensor.copy_(total)
        self.finish(seq, [f"t{i}" for i in range(len(tensors))])

    threading.Thread(target=run).start()
    return self.submit(lambda: None, tensors)
