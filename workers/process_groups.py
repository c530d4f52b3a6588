"""Process groups and backends: subgroups, device meshes, what each backend supports, and
asynchronous collectives overlapped with computation.

    python -m workers.process_groups groups --world-size 4
    python -m workers.process_groups missing-group --world-size 3
    python -m workers.process_groups mesh --world-size 4
    python -m workers.process_groups backends --world-size 2
    python -m workers.process_groups overlap --world-size 2
    python -m workers.process_groups cleanup --world-size 2 [--no-destroy]
    torchrun --standalone --nproc-per-node 4 -m workers.process_groups groups

Every rank starts with the value ``rank + 1``, so a sum over a group says which ranks were in it.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    first_line,
    from_torchrun,
    launch,
    open_events,
    pick_backend,
    positive_int,
    rank_device,
    say,
    say_main,
)
from workers.runner import free_port

# --- the default group and subgroups -------------------------------------------------------


def subgroup_layout(world_size: int) -> dict[str, list[int]]:
    """Disjoint groups (even and odd ranks) and two that overlap in rank 1."""
    return {
        "even": list(range(0, world_size, 2)),
        "odd": list(range(1, world_size, 2)),
        "head": [0, 1],
        "tail": list(range(1, world_size)),
    }


def groups(rank: int, world_size: int, device, events: Events, timeout) -> None:
    # Every rank calls new_group for every group, in the same order, even for groups it is
    # not in: creating a group is itself a collective over the default group.
    layout = subgroup_layout(world_size)
    made = {name: dist.new_group(members, timeout=timeout) for name, members in layout.items()}  # fmt: skip
    made["world"] = dist.group.WORLD
    layout["world"] = list(range(world_size))

    for name in ["world", "even", "odd", "head", "tail"]:
        group, members = made[name], layout[name]
        if rank not in members:
            # Outside a group, get_rank(group) is -1 and collectives on it must not be called.
            events.emit(rank, "member", group=name, members=members, group_rank=dist.get_rank(group))  # fmt: skip
            continue
        group_rank = dist.get_rank(group)  # this rank's number inside the group
        assert group_rank == dist.get_group_rank(group, rank)
        first = dist.get_global_rank(group, 0)  # group rank 0, as a global rank
        total = torch.tensor([float(rank + 1)], device=device)
        dist.all_reduce(total, group=group)  # only the members take part
        leader = torch.tensor([float(rank)], device=device)
        dist.broadcast(leader, src=first, group=group)  # src is a *global* rank
        say(rank, f"{name:>5} {members}: group rank {group_rank} of {dist.get_world_size(group)}, "
                  f"sum {total.item():g}, broadcast from global rank {first} gave {leader.item():g}")  # fmt: skip
        events.emit(rank, "member", group=name, members=members, group_rank=group_rank,
                    group_size=dist.get_world_size(group), first_global=first,
                    sum=total.item(), broadcast=leader.item())  # fmt: skip


def missing_group(rank: int, world_size: int, device, events: Events, timeout) -> None:
    """The last rank skips new_group for a group it is not in; then everyone makes another."""
    events.emit(rank, "started", pid=os.getpid())
    if rank != world_size - 1:
        dist.new_group([0, 1], timeout=timeout)
        say(rank, "made new_group([0, 1])")
    else:
        say(rank, "skipped new_group([0, 1]): 'I am not in it anyway'")
    begin = time.time()
    try:
        everyone = dist.new_group(list(range(world_size)), timeout=timeout)
        dist.all_reduce(torch.ones(1, device=device), group=everyone)
        say(rank, "new_group(all ranks) and its all_reduce finished")
    except RuntimeError as error:  # DistStoreError is a RuntimeError
        say(rank, f"new_group(all ranks) failed after {time.time() - begin:.1f} s: "
                  f"{type(error).__name__}: {first_line(error)}")  # fmt: skip
        raise SystemExit(1) from None


def mesh(rank: int, world_size: int, device, events: Events, timeout) -> None:
    """A 2-D layout: data parallel across rows, model (tensor) parallel along them."""
    from torch.distributed.device_mesh import init_device_mesh

    rows, columns = world_size // 2, 2
    grid = init_device_mesh(device.type, (rows, columns), mesh_dim_names=("dp", "tp"))
    dp, tp = grid["dp"].get_group(), grid["tp"].get_group()
    value = torch.tensor([float(rank + 1)], device=device)
    tp_sum = value.clone()
    dist.all_reduce(tp_sum, group=tp)  # e.g. combine the halves of a split layer
    dp_sum = value.clone()
    dist.all_reduce(dp_sum, group=dp)  # e.g. average gradients between replicas
    # new_subgroups cuts the world into consecutive groups of a given size in one call.
    mine, _ = dist.new_subgroups(group_size=columns, timeout=timeout)
    coordinate = grid.get_coordinate()
    say(rank, f"mesh coordinate {coordinate}: dp group {dist.get_process_group_ranks(dp)} "
              f"sum {dp_sum.item():g}, tp group {dist.get_process_group_ranks(tp)} sum "
              f"{tp_sum.item():g}; new_subgroups gave {dist.get_process_group_ranks(mine)}")  # fmt: skip
    events.emit(rank, "mesh", coordinate=list(coordinate), dp=dist.get_process_group_ranks(dp),
                tp=dist.get_process_group_ranks(tp), dp_sum=dp_sum.item(),
                tp_sum=tp_sum.item(), subgroup=dist.get_process_group_ranks(mine))  # fmt: skip


# --- backends ------------------------------------------------------------------------------

BACKEND_NAMES = ["gloo", "nccl", "mpi", "ucc", "xccl"]
DTYPES = [
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "uint8",
    "bool",
    "complex64",
    "float8_e4m3fn",
]


def operations(rank: int, world_size: int, device, group) -> dict:
    """One call of each operation, on tensors of ``device``, inside ``group``."""
    n = world_size

    def t(*shape):
        return torch.ones(*shape, device=device)

    def send_recv():
        if rank == 0:
            dist.send(t(4), dst=1, group=group)
        elif rank == 1:
            dist.recv(t(4), src=0, group=group)

    return {
        "send/recv": send_recv,
        "broadcast": lambda: dist.broadcast(t(4), src=0, group=group),
        "all_reduce": lambda: dist.all_reduce(t(4), group=group),
        "reduce": lambda: dist.reduce(t(4), dst=0, group=group),
        "all_gather": lambda: dist.all_gather(
            [t(4) for _ in range(n)], t(4), group=group
        ),
        "gather": lambda: dist.gather(
            t(4), [t(4) for _ in range(n)] if rank == 0 else None, dst=0, group=group
        ),
        "scatter": lambda: dist.scatter(
            t(4), [t(4) for _ in range(n)] if rank == 0 else None, src=0, group=group
        ),
        "reduce_scatter": lambda: dist.reduce_scatter(
            t(4), [t(4) for _ in range(n)], group=group
        ),
        "all_to_all": lambda: dist.all_to_all(
            [t(4) for _ in range(n)], [t(4) for _ in range(n)], group=group
        ),
        "barrier": lambda: dist.barrier(group=group),
    }


def try_it(call) -> str | None:
    """None when ``call()`` worked, else its error in one line."""
    try:
        call()
        return None
    except (RuntimeError, ValueError, NotImplementedError) as error:
        return first_line(error)


def backends(rank: int, world_size: int, device, events: Events, timeout) -> None:
    """Try every operation and dtype on every backend and device this machine can run."""
    available = {name: bool(getattr(dist, f"is_{name}_available", lambda: False)())
                 for name in BACKEND_NAMES}  # fmt: skip
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if rank == 0:
        events.emit(rank, "available", built=available, gpus=gpus,
                    default=dict(dist.Backend.default_device_backend_map))  # fmt: skip
    devices = ["cpu"] + (["cuda"] if gpus >= world_size else [])
    for backend in ["gloo", "nccl"]:
        usable = available[backend] and (backend == "gloo" or gpus >= world_size)
        if not usable:
            continue
        group = dist.new_group(backend=backend, timeout=timeout)
        for device_type in devices:
            here = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")  # fmt: skip
            for name, call in operations(rank, world_size, here, group).items():
                error = try_it(call)
                events.emit(rank, "support", backend=backend, device=device_type, op=name, error=error)  # fmt: skip
            for dtype in DTYPES:
                x = torch.ones(4, device=here).to(getattr(torch, dtype))
                error = try_it(lambda x=x, g=group: dist.all_reduce(x, group=g))
                events.emit(rank, "dtype", backend=backend, device=device_type, dtype=dtype, error=error)  # fmt: skip
        dist.barrier()
    say(rank, f"tried {len(devices)} device type(s); backends built in: "
              + ", ".join(name for name, built in available.items() if built))  # fmt: skip


# --- asynchronous collectives --------------------------------------------------------------


def fake_backward_step(weights: torch.Tensor) -> None:
    """Stands for computing one layer's gradients: a matrix product, real work for the CPU."""
    torch.tanh(weights @ weights)


def overlap(rank, world_size, device, events: Events, buckets: int, numel: int,
            size: int, trials: int) -> None:  # fmt: skip
    """A backward pass in ``buckets`` pieces; each finished bucket of gradients is averaged.

    blocking: compute a bucket, all_reduce it, wait, compute the next.
    overlapped: compute a bucket, start its all_reduce with async_op=True, compute the next
    while it travels; wait for all of them at the end. That is what DDP does.
    """
    # one core of compute per rank; the rest is for communication
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(rank)
    weights = torch.randn(size, size, generator=generator).to(device)
    gradients = [torch.ones(numel, device=device) for _ in range(buckets)]

    def step(mode: str, record: bool) -> float:
        spans = []
        handles = []
        dist.barrier()
        begin = time.time()
        for gradient in gradients:
            started = time.time()
            fake_backward_step(weights)
            spans.append(dict(event="compute", t=started, t_end=time.time(), lane=0))
            sent = time.time()
            if mode == "blocking":
                dist.all_reduce(gradient)
                spans.append(
                    dict(event="all_reduce", t=sent, t_end=time.time(), lane=1)
                )
            else:
                work = dist.all_reduce(gradient, async_op=True)  # returns at once
                done = {}
                # the callback runs when the all_reduce completes: its real end time
                work.get_future().then(
                    lambda _, done=done: done.setdefault("t", time.time())
                )
                handles.append((work, sent, done))
        for work, sent, done in handles:
            work.wait()  # gradients must be complete before the optimizer uses them
            spans.append(
                dict(
                    event="all_reduce", t=sent, t_end=done.get("t", time.time()), lane=1
                )
            )
        seconds = time.time() - begin
        if record:
            for span in spans:
                events.emit(rank, mode=mode, **span)
        return seconds

    results = {"blocking": [], "overlapped": []}
    for trial in range(trials + 1):  # the first round warms up and is not counted
        for mode in results:
            seconds = step(mode, record=trial == trials)
            if trial:
                results[mode].append(seconds)
    for mode, seconds in results.items():
        median = statistics.median(seconds)
        events.emit(rank, "step time", mode=mode, seconds=median, trials=seconds)
        say(
            rank, f"{mode:>10}: median step {median * 1000:.1f} ms over {trials} trials"
        )


# --- cleanup -------------------------------------------------------------------------------


def cleanup(rank, world_size, device, events: Events, destroy: bool, backend: str,
            init_method: str, timeout) -> None:  # fmt: skip
    """Two jobs one after the other in the same process, as a sweep or a test suite does."""
    total = torch.ones(1, device=device)
    dist.all_reduce(total)
    say(rank, f"first job: all_reduce gave {total.item():g}")
    if destroy:
        dist.destroy_process_group()  # frees the sockets, the store and the threads
    try:
        dist.init_process_group(backend, init_method=init_method, rank=rank,
                                world_size=world_size, timeout=timeout)  # fmt: skip
    except (RuntimeError, ValueError) as error:
        say(rank, f"second init_process_group failed: {type(error).__name__}: {first_line(error)}")  # fmt: skip
        events.emit(rank, "second job", error=first_line(error))
        raise SystemExit(1) from None
    dist.all_reduce(total)
    say(rank, f"second job: all_reduce gave {total.item():g}")
    events.emit(rank, "second job", error=None, value=total.item())


# --- one rank, from start to finish --------------------------------------------------------


def rank_main(rank, world_size, args, address, ports) -> None:
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    device = rank_device(args.backend, local_rank)
    timeout = timedelta(seconds=args.timeout)
    if from_torchrun():
        dist.init_process_group(args.backend, timeout=timeout)  # env:// from torchrun
    else:
        dist.init_process_group(args.backend, init_method=f"tcp://{address}:{ports[0]}",
                                rank=rank, world_size=world_size, timeout=timeout)  # fmt: skip
    events = Events(args.events)
    try:
        if args.demo == "groups":
            groups(rank, world_size, device, events, timeout)
        elif args.demo == "missing-group":
            missing_group(rank, world_size, device, events, timeout)
        elif args.demo == "mesh":
            mesh(rank, world_size, device, events, timeout)
        elif args.demo == "backends":
            backends(rank, world_size, device, events, timeout)
        elif args.demo == "overlap":
            overlap(rank, world_size, device, events, args.buckets, args.numel, args.size,
                    args.trials)  # fmt: skip
        else:
            second_job = f"tcp://{address}:{ports[1]}"
            cleanup(rank, world_size, device, events, args.destroy, args.backend, second_job, timeout)  # fmt: skip
    finally:
        # Always, even when the demo raised: sockets, threads and the store are released,
        # and the next init_process_group in this process starts clean.
        if args.destroy and dist.is_initialized():
            dist.destroy_process_group()


def parse_args(argv=None):
    parser = Parser(
        prog="python -m workers.process_groups", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "demo",
        choices=["groups", "missing-group", "mesh", "backends", "overlap", "cleanup"],
    )
    parser.add_argument(
        "--world-size", type=positive_int, default=4, help="ranks (default 4)"
    )
    parser.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto",
                        help="auto: nccl with one GPU per rank when there are enough, else gloo")  # fmt: skip
    parser.add_argument("--buckets", type=positive_int, default=8,
                        help="overlap: gradient buckets per step (default 8)")  # fmt: skip
    parser.add_argument("--numel", type=positive_int, default=1 << 18,
                        help="overlap: floats per bucket (default 256K = 1 MB)")  # fmt: skip
    parser.add_argument("--size", type=positive_int, default=400,
                        help="overlap: side of the matrix multiplied per bucket (default 400)")  # fmt: skip
    parser.add_argument("--trials", type=positive_int, default=15,
                        help="overlap: timed steps per mode (default 15)")  # fmt: skip
    parser.add_argument("--no-destroy", dest="destroy", action="store_false",
                        help="skip destroy_process_group (to see what it is for)")  # fmt: skip
    add_common_options(parser, timeout=30)
    args = parser.parse_args(argv)
    torchrun = from_torchrun()
    world_size = torchrun[1] if torchrun else args.world_size
    least = {"missing-group": 3, "mesh": 4}.get(args.demo, 2)
    if world_size < least:
        parser.error(f"{args.demo} needs --world-size of at least {least}")
    if world_size > 64:
        parser.error("at most 64 ranks on one machine")
    if args.demo == "mesh" and world_size % 2:
        parser.error("mesh lays the ranks out as N/2 x 2: --world-size must be even")
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    args.backend = pick_backend(args.backend, local_ranks)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    open_events(args.events)
    torchrun = from_torchrun()
    if torchrun:  # started by torchrun as one rank
        rank, world_size = torchrun
        rank_main(rank, world_size, args, None, None)
        return 0
    address = "127.0.0.1"
    ports = (
        int(os.environ.get("MASTER_PORT") or free_port(address)),
        free_port(address),
    )
    say_main(f"{args.world_size} ranks, backend {args.backend}")
    job = (args.world_size, args, address, ports)
    # missing-group hangs on purpose: the ranks' own deadline is the one that ends it
    slack = 5 if args.demo == "missing-group" else 30
    # slicing a mesh imports torch._dynamo (a second of CPU): once, in the forkserver
    preload = ("torch._dynamo",) if args.demo == "mesh" else ()
    return launch(
        rank_main, job, args.world_size, timeout=args.timeout + slack, preload=preload
    )


if __name__ == "__main__":
    sys.exit(main())
