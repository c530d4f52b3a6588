"""Save an FSDP2 model with torch.distributed.checkpoint, every rank writing its own shards,
then load the checkpoint whole into one process that has no process group."""

import os
import shutil
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def save_then_load(rank: int, world_size: int, folder: str) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    fully_shard(model, mesh=init_device_mesh("cpu", (world_size,)))
    dcp.save(model.state_dict(), checkpoint_id=folder)  # every rank writes its own rows
    weight = model[0].weight  # a DTensor: full_tensor() gathers it, to check the load
    print(f"[rank {rank}] wrote its rows {tuple(weight.to_local().shape)}; the whole "
          f"weight sums to {weight.full_tensor().sum():.4f}", flush=True)
    dist.destroy_process_group()
    if rank == 0:  # now a process of its own, with no process group
        plain = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        state = plain.state_dict()
        dcp.load(state, checkpoint_id=folder, no_dist=True)  # reads every rank's file
        plain.load_state_dict(state)
        print(f"[rank 0] {sorted(os.listdir(folder))} loaded whole, unsharded: the weight "
              f"sums to {plain[0].weight.sum():.4f}", flush=True)
        shutil.rmtree(folder)


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    # a folder every rank can name, one per user and job (on several machines: a shared one,
    # DCP_FOLDER=/shared/path)
    job = f"{os.getuid()}-{os.environ['MASTER_PORT']}"
    folder = os.environ.get("DCP_FOLDER", os.path.join(tempfile.gettempdir(), f"dcp-{job}"))
    if "RANK" in os.environ:  # started by torchrun: this process is one rank
        save_then_load(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), folder)
    else:
        mp.spawn(save_then_load, args=(2, folder), nprocs=2)
