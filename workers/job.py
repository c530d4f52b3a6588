"""The set-up every distributed worker shares, written once.

A distributed demo has one shape wherever it runs:

    job = job_from_args(parser, args)      # world size, backend, where to meet, timeout
    return run_ranks(job, rank_main, args) # a process per rank, or this one is a rank

    def rank_main(rank, job, args):
        with joined(job, rank) as device:  # init_process_group ... destroy_process_group
            ...the demo...

Started from a shell (``python -m workers.collectives p2p --world-size 4``), ``run_ranks``
starts the ranks itself and they meet at a free port of 127.0.0.1, where rank 0's store
listens on loopback alone, as gloo does (``loopback_store``, ``sockets_on_loopback``).
Started by ``torchrun`` (or a script that sets ``RANK``, ``LOCAL_RANK`` and
``WORLD_SIZE``), this process *is* one rank, and the ranks meet through ``env://``. The
init-methods chapter shows every route.
"""

from __future__ import annotations

import os
import socket
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta

from workers.ranks import (
    MOST_PROCESSES,
    fail,
    free_port,
    import_modules,
    launch,
    physical_cores,
    positive_int,
    say_main,
    stop_with_its_launcher,
)


@dataclass(frozen=True)
class Job:
    """How this job is laid out, decided once from the command line or from the launcher."""

    world_size: int
    backend: str  # "gloo" or "nccl": --backend auto already resolved
    init_method: str  # "env://" when started as a rank, else "tcp://127.0.0.1:PORT"
    timeout: float  # seconds: rendezvous and every collective give up after it
    started_as_rank: bool  # by torchrun or a launch script, which set RANK and WORLD_SIZE

    @property
    def port(self) -> int:
        """The port of a ``tcp://127.0.0.1:PORT`` job: where rank 0's store listens."""
        return int(self.init_method.rsplit(":", 1)[1])

    def on_fresh_port(self) -> Job:
        """The same job meeting on a new port: for a second job in the same run."""
        return replace(self, init_method=f"tcp://127.0.0.1:{free_port()}")


def add_job_options(parser, world_size: int = 2) -> None:
    """``--world-size`` and ``--backend``, the options of every distributed demo."""
    parser.add_argument(
        "--world-size", type=positive_int, default=world_size,
        help=f"ranks to start (default {world_size}; under torchrun: its WORLD_SIZE)",
    )
    parser.add_argument(
        "--backend", choices=["auto", "gloo", "nccl"], default="auto",
        help="auto (default): nccl when every rank can have a GPU of its own, else gloo",
    )


def job_from_args(parser, args, least: int = 2) -> Job:
    """The job the command line (or the launcher) describes; a mistake is one line."""
    world_size = world_size_from(parser, args, least)
    if started_as_rank():
        init_method = "env://"  # MASTER_ADDR and MASTER_PORT come from the launcher
    else:
        init_method = f"tcp://127.0.0.1:{os.environ.get('MASTER_PORT') or free_port()}"
    backend = pick_backend(args.backend, ranks_on_this_machine(world_size))
    return Job(world_size, backend, init_method, args.timeout, started_as_rank())


def ranks_on_this_machine(world_size: int) -> int:
    """All the ranks, unless a launcher says how many it started here (LOCAL_WORLD_SIZE)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", world_size))


def started_as_rank() -> bool:
    """True when a launcher (torchrun, a launch script) started this process as one rank."""
    return "RANK" in os.environ and "LOCAL_RANK" in os.environ


def world_size_from(parser, args, least: int) -> int:
    """``--world-size`` or the launcher's ``WORLD_SIZE``, checked against the demo."""
    world_size = int(os.environ["WORLD_SIZE"]) if started_as_rank() else args.world_size
    check_world_size(parser, world_size, least)
    return world_size


def check_world_size(parser, world_size: int, least: int = 1) -> None:
    if world_size < least:
        parser.error(f"this demo needs a world size of at least {least}, got {world_size}")
    if world_size > MOST_PROCESSES:
        parser.error(f"at most {MOST_PROCESSES} ranks on one machine, got {world_size}")


def pick_backend(requested: str, ranks_here: int) -> str:
    """``auto``: nccl when every rank on this machine can have a GPU of its own, else gloo.

    Asking for nccl without enough GPUs ends the worker with one line saying so.
    """
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = backend_for(requested, ranks_here, gpus, dist.is_nccl_available())
    if backend is None:
        fail(f"--backend nccl needs one GPU per rank: {ranks_here} ranks here, {gpus} GPUs")
    return backend


def backend_for(requested: str, ranks_here: int, gpus: int, nccl_built: bool = True):
    """The backend ``--backend requested`` gives ``ranks_here`` ranks on a machine with
    ``gpus`` GPUs (None: nccl asked for, and not possible). A pure function, so a test can
    say what a page's run would use on a machine with 0, 1, 2, 4 or 8 GPUs."""
    nccl_possible = nccl_built and gpus >= ranks_here
    if requested == "auto":
        return "nccl" if nccl_possible else "gloo"
    if requested == "nccl" and not nccl_possible:
        return None
    return requested


def run_ranks(job: Job, rank_main, *args, preload: tuple = ()) -> int:
    """``rank_main(rank, job, *args)`` on every rank of the job; 0 when all succeeded.

    Started as a rank, this process runs its own rank. Otherwise it starts one process per
    rank and stops them all a few seconds after the job's timeout, so a rank's own timeout
    error is what the reader sees first. Either way the ``preload`` modules are imported
    before any rank joins the group.
    """
    if job.started_as_rank:
        import_modules(preload)
        rank_main(int(os.environ["RANK"]), job, *args)
        return 0
    say_main(f"{job.world_size} rank{'s' * (job.world_size != 1)}, backend {job.backend}")
    return launch(rank_main, (job, *args), job.world_size, job.timeout + 5, preload)


@contextmanager
def joined(job: Job, rank: int, store=None):
    """Be rank ``rank`` of the job's default process group for the block; yield its device.

    The group is destroyed however the block ends, so a second job in the same process
    starts clean. ``store`` replaces the init method (the failures chapter needs it).

    Build a DDP model in a function called in the block, so it is freed before the group
    is destroyed: a DDP model that outlives its group frees the group itself, holding the
    GIL, and that can deadlock with gloo's threads (pytorch/pytorch#56297).
    """
    import torch.distributed as dist

    stop_with_its_launcher(rank)  # a rank whose launcher died stops too
    device = rank_device(job.backend, int(os.environ.get("LOCAL_RANK", rank)))
    timeout = timedelta(seconds=job.timeout)
    if ranks_on_this_machine(job.world_size) == job.world_size:  # no rank elsewhere
        sockets_on_loopback()
    if store is None and not job.started_as_rank:  # under a launcher, it holds the store
        store = loopback_store(rank, job.world_size, job.port, timeout)
    dist.init_process_group(
        job.backend,
        init_method=None if store else job.init_method,
        store=store,
        rank=rank,
        world_size=job.world_size,
        timeout=timeout,
        device_id=device if device.type == "cuda" else None,  # nccl: bind the GPU at once
    )
    try:
        yield device
    finally:
        dist.destroy_process_group()


def loopback_store(rank: int, world_size: int | None, port: int, timeout: timedelta):
    """The store of a job whose ranks all run on this machine, on 127.0.0.1 alone.

    Rank 0 serves it on a socket it has bound to 127.0.0.1 and hands over (the store owns
    it from then on: ``detach`` gives up its descriptor); the other ranks connect there. A
    ``TCPStore`` that binds its own socket, as ``init_process_group`` makes it for a
    ``tcp://`` or ``env://`` address, listens on every address of the machine whatever the
    address says. ``port`` 0: rank 0 takes a free one (a job of one rank). ``world_size``
    None: a store for clients that come and go (torchft's groups), which rank 0 does not
    wait for.
    """
    import torch.distributed as dist

    listening = None
    if rank == 0:
        server = socket.create_server(("127.0.0.1", port))
        port, listening = server.getsockname()[1], server.detach()
    return dist.TCPStore("127.0.0.1", port, world_size, rank == 0, timeout=timeout,
                         master_listen_fd=listening)


def sockets_on_loopback() -> None:
    """The backends' connections between ranks on 127.0.0.1: told no interface
    (``GLOO_SOCKET_IFNAME``), gloo listens on the address this machine's hostname resolves
    to, and nccl opens its sockets (its bootstrap, between ranks on one machine) on the
    first interface it likes (``NCCL_SOCKET_IFNAME``). A reader's own settings win."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")


def rank_device(backend: str, local_rank: int):
    """The device a rank's tensors live on: its own GPU under nccl, else the CPU."""
    import torch

    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # before any collective: one GPU per rank
        return device
    return torch.device("cpu")


def wrap(model, device, **options):
    """DDP around a model already on its device: device_ids on a GPU, none on the CPU."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    device_ids = [device.index] if device.type == "cuda" else None
    return DDP(model, device_ids=device_ids, **options)


def synchronize(device) -> None:
    """Wait for the GPU's queued work, so that a clock reading means what it says."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def share_cores(world_size: int) -> None:
    """Give each of this machine's ranks its share of the cores this process may use,
    unless OMP_NUM_THREADS says otherwise (torchrun sets 1): ranks that each start a thread
    per core oversubscribe the machine, and their compute slows by far more than the share
    (the Hogwild chapter measures it)."""
    import torch

    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, physical_cores() // ranks_on_this_machine(world_size)))
