"""A backend of our own, all_reduce through the store: init_process_group("mine")."""
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch._C._distributed_c10d import Backend, _create_work_from_future


class Mine(Backend):  # Python can subclass Backend since torch 2.14
    def __init__(self, store, rank, size, timeout):  # what init_process_group hands over
        super().__init__(rank, size)
        self.store, self.me, self.ranks, self.calls = store, rank, size, 0

    def getBackendName(self):  # c10d asks every backend its name, and its options:
        return "mine"

    options = property(lambda self: Backend.Options("mine"))  # Python 3.13 needs it defined

    def allreduce(self, tensors, opts):  # every rank sums every rank's bytes, in rank order
        self.calls += 1
        for i, t in enumerate(tensors):
            key = f"{self.calls}/{i}/"  # this call, this tensor; then the rank
            self.store.set(key + str(self.me), t.numpy().tobytes())
            parts = [torch.frombuffer(bytearray(self.store.get(key + str(r))),
                                      dtype=t.dtype) for r in range(self.ranks)]
            t.view(-1).copy_(sum(parts[1:], parts[0].clone()))
        done = torch.futures.Future()
        done.set_result(tensors)  # already done: wait() returns at once
        return _create_work_from_future(done)


def main(rank: int, world_size: int) -> None:
    dist.Backend.register_backend("mine", Mine, devices=["cpu"])
    dist.init_process_group("mine", rank=rank, world_size=world_size)
    x, y = torch.arange(4.0) * (rank + 1), torch.arange(4.0) * (rank + 1)
    dist.all_reduce(x)  # the default group: "mine"
    dist.all_reduce(y, group=dist.new_group(backend="gloo"))  # the same ranks, on gloo
    print(f"[rank {rank}] mine: {x.tolist()}  gloo: {y.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ:  # started by torchrun, which sets the rest
        main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    else:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo's sockets on loopback
        if "MASTER_PORT" not in os.environ:  # a free one: torchrun's 29500 may be taken
            with socket.socket() as free:
                free.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(free.getsockname()[1])
        mp.spawn(main, args=(3,), nprocs=3)
