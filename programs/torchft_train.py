"""One replica group of torchft: the page shows how to run a lighthouse and two of these."""

import os
import socket
from datetime import timedelta

import torch
import torchft.manager
from torch import nn
from torch.distributed import TCPStore
from torchft.checkpointing.pg_transport import PGTransport

WAIT = timedelta(seconds=10)  # the longest wait for a quorum, a peer or its weights
serve = torchft.manager.ManagerServer  # torchft 0.2.0 serves on every interface: not here
torchft.manager.ManagerServer = lambda **kw: serve(**kw | {"bind": "127.0.0.1:0"})


def main(group: int, steps: int) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # gloo listens on loopback
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,  # loopback too
                     master_listen_fd=socket.create_server(("127.0.0.1", 0)).detach())
    torch.manual_seed(0)  # the same weights in every group
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    gloo = torchft.ProcessGroupGloo(timeout=WAIT)  # rebuilt over each new quorum
    manager = torchft.Manager(
        pg=gloo, min_replica_size=1, replica_id=f"group{group}", rank=0, world_size=1,
        state_dict=lambda: {"model": model.state_dict(),  # what a group that heals gets
                            "optimizer": optimizer.state_dict()},
        load_state_dict=lambda s: (model.load_state_dict(s["model"]),
                                   optimizer.load_state_dict(s["optimizer"])),
        hostname="127.0.0.1", store_addr="127.0.0.1", store_port=store.port,
        init_sync=False, timeout=WAIT, quorum_timeout=WAIT, connect_timeout=WAIT,
        checkpoint_transport=PGTransport(gloo, timeout=WAIT, device=torch.device("cpu")))
    optimizer = torchft.Optimizer(  # steps only if no rank of this group saw an error
        manager, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    while manager.current_step() < steps:
        step = manager.current_step()
        seed = 1000 * step + group  # this group's batch for this step
        x = torch.randn(32, 64, generator=torch.Generator().manual_seed(seed))
        optimizer.zero_grad()  # asks the lighthouse for this step's quorum
        nn.functional.cross_entropy(model(x), x[:, :10].argmax(1)).backward()
        for work in [manager.allreduce(p.grad) for p in model.parameters()]:
            work.wait()  # the mean over the quorum; a dead peer is noted, not raised
        optimizer.step()
        if manager.current_step() > step and manager.current_step() % 100 == 0:
            print(f"group {group}: step {manager.current_step()}, "
                  f"{manager.num_participants()} group(s) contributing", flush=True)
    manager.shutdown(wait=False)


if __name__ == "__main__":
    main(int(os.environ["REPLICA_GROUP"]), int(os.environ.get("STEPS", 10_000)))
