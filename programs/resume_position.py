import os
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, DistributedSampler


def train(rank, world_size, state, steps):  # state["done"]: the batches done so far
    sampler = DistributedSampler(range(24), world_size, rank, seed=0)  # shuffles
    loader = DataLoader(range(24), 2, sampler=sampler, generator=torch.Generator())
    used = []
    while len(used) < steps and state["done"] < 2 * len(loader):  # two epochs
        epoch, skip = divmod(state["done"], len(loader))
        sampler.set_epoch(epoch)  # the shuffle depends on the epoch
        for batch in list(loader)[skip:][:steps - len(used)]:  # skip the batches done
            used.append((batch.tolist(), torch.rand(1).item()))  # rand: dropout, say
            state["done"] += 1
    return used

def main(rank, world_size, folder):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(rank)
    whole = train(rank, world_size, {"done": 0}, steps=12)  # never stopped
    torch.manual_seed(rank)
    state, rng = {"done": 0}, f"rng{rank}"  # a key per rank: DCP saves a shared name once
    first = train(rank, world_size, state, steps=8)  # stops in epoch 1
    # a real loop saves its model's and optimizer's state in the same call
    dcp.save({**state, rng: torch.get_rng_state()}, checkpoint_id=folder)
    torch.manual_seed(99)  # as a new process: another random state, at position 0
    state = {"done": 0, rng: torch.get_rng_state()}
    dcp.load(state, checkpoint_id=folder)  # fills state in place
    torch.set_rng_state(state.pop(rng))
    assert first + train(rank, world_size, state, steps=12) == whole
    print(f"[rank {rank}] resumed at batch {len(first)}, as if never stopped", flush=True)
    dist.destroy_process_group()  # leave together: no rank's exit cuts a peer's sockets

if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    folder = os.path.join(tempfile.gettempdir(),  # one per user and job: /tmp is shared
                          f"resume-{os.getuid()}-{os.environ['MASTER_PORT']}")
    if "RANK" in os.environ:  # started by torchrun: this process is one rank
        main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), folder)
    else:
        mp.spawn(main, args=(2, folder), nprocs=2)
