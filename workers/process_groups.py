"""Process groups and backends: subgroups, device meshes, what each backend supports, and
asynchronous collectives overlapped with computation.

    python -m workers.process_groups groups --world-size 4
    python -m workers.process_groups missing-group --world-size 3
    python -m workers.process_groups mesh --world-size 4
    python -m workers.process_groups backends --world-size 2
    python -m workers.process_groups overlap --world-size 2
    python -m workers.process_groups cleanup --world-size 2
    torchrun --standalone --nproc-per-node 4 -m workers.process_groups groups

Every rank starts with the value ``rank + 1``, so a sum over a group says who was in it.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from workers.job import Job, add_job_options, job_from_args, joined, run_ranks
from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    first_line,
    open_events,
    positive_int,
    say,
)

# --- the default group and subgroups ------------------------------------------------------


def subgroup_layout(world_size: int) -> dict[str, list[int]]:
    """Disjoint groups (even and odd ranks), two that overlap in rank 1, and every rank
    listed backwards (new_group sorts its ranks)."""
    return {
        "even": list(range(0, world_size, 2)),
        "odd": list(range(1, world_size, 2)),
        "head": [0, 1],
        "tail": list(range(1, world_size)),
        "backwards": list(reversed(range(world_size))),
    }


def groups(rank: int, world_size: int, device, events: Events, timeout: timedelta) -> None:
    # Every rank calls new_group for every group, in the same order, even for groups it is
    # not in: creating a group is itself a collective over the default group. A new group
    # does not inherit init_process_group's timeout: without timeout= it waits 30 minutes.
    layout = subgroup_layout(world_size)
    made = {name: dist.new_group(ranks, timeout=timeout) for name, ranks in layout.items()}
    made["world"], layout["world"] = dist.group.WORLD, list(range(world_size))

    for name in ["world", "even", "odd", "head", "tail", "backwards"]:
        group, members = made[name], layout[name]
        if rank not in members:
            # Outside a group get_rank(group) is -1, and its collectives are off limits.
            events.emit(rank, "member", group=name, members=members,
                        group_rank=dist.get_rank(group))
            continue
        group_rank = dist.get_rank(group)  # this rank's number inside the group
        assert group_rank == dist.get_group_rank(group, rank)
        first = dist.get_global_rank(group, 0)  # group rank 0, as a global rank
        total = torch.tensor([float(rank + 1)], device=device)
        dist.all_reduce(total, group=group)  # only the members take part
        leader = torch.tensor([float(rank)], device=device)
        dist.broadcast(leader, src=first, group=group)  # src is a *global* rank
        size = dist.get_world_size(group)
        say(rank, f"{name:>9} {members}: group rank {group_rank} of {size}, "
                  f"sum {total.item():g}, broadcast from global rank {first} gave "
                  f"{leader.item():g}")
        events.emit(rank, "member", group=name, members=members, group_rank=group_rank,
                    group_size=size, first_global=first, sum=total.item(),
                    broadcast=leader.item())


def missing_group(rank: int, world_size: int, device, events: Events, timeout: timedelta):
    """The last rank skips new_group for a group it is not in; then all make another."""
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
                  f"{type(error).__name__}: {first_line(error)}")
        raise SystemExit(1) from None


def mesh(rank: int, world_size: int, device, events: Events, timeout: timedelta) -> None:
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
    dp_ranks, tp_ranks = dist.get_process_group_ranks(dp), dist.get_process_group_ranks(tp)
    subgroup = dist.get_process_group_ranks(mine)
    say(rank, f"mesh coordinate {coordinate}: dp group {dp_ranks} sum {dp_sum.item():g}, "
              f"tp group {tp_ranks} sum {tp_sum.item():g}; new_subgroups gave {subgroup}")
    events.emit(rank, "mesh", coordinate=list(coordinate), dp=dp_ranks, tp=tp_ranks,
                dp_sum=dp_sum.item(), tp_sum=tp_sum.item(), subgroup=subgroup)


# --- backends -----------------------------------------------------------------------------

BACKEND_NAMES = ["gloo", "nccl", "mpi", "ucc", "xccl"]
DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "bool",
          "complex64", "float8_e4m3fn"]


def no_backend_given(rank: int, job: Job, events: Events) -> None:
    """What init_process_group() sets up when it is told no backend, and asking for two."""
    wait = timedelta(seconds=job.timeout)
    dist.init_process_group(init_method=job.init_method, rank=rank,
                            world_size=job.world_size, timeout=wait)
    try:
        picked = dist.get_backend_config()  # device type -> backend, e.g. "cpu:gloo"
        try:
            both = dist.get_backend_config(dist.new_group(backend="cpu:gloo,cuda:nccl"))
        except (RuntimeError, ValueError) as error:
            both = f"{type(error).__name__}: {first_line(error)}"
        gloo = dist.get_backend_config(dist.new_group(backend="gloo"))
        # new_group returns when this rank is connected, not every rank: a rank that tore
        # the groups down at once closed connections a slower rank was still making
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        say(rank, f"init_process_group() with no backend set up {picked!r}")
        say(rank, f"backend='cpu:gloo,cuda:nccl' gave {both!r}")
        say(rank, f"backend='gloo' gave {gloo!r}")
        events.emit(rank, "no backend", picked=picked, both=both, gloo=gloo)


def operations(rank: int, world_size: int, device, group) -> dict:
    """One call of each operation, on tensors of ``device``, inside ``group``."""
    n = world_size

    def t():
        return torch.ones(4, device=device)

    def one_per_rank():
        return [t() for _ in range(n)]

    def on_rank_0():
        return one_per_rank() if rank == 0 else None

    def send_recv():
        if rank == 0:
            dist.send(t(), dst=1, group=group)
        elif rank == 1:
            dist.recv(t(), src=0, group=group)

    return {
        "send/recv": send_recv,
        "broadcast": lambda: dist.broadcast(t(), src=0, group=group),
        "all_reduce": lambda: dist.all_reduce(t(), group=group),
        "reduce": lambda: dist.reduce(t(), dst=0, group=group),
        "all_gather": lambda: dist.all_gather(one_per_rank(), t(), group=group),
        "gather": lambda: dist.gather(t(), on_rank_0(), dst=0, group=group),
        "scatter": lambda: dist.scatter(t(), on_rank_0(), src=0, group=group),
        "reduce_scatter": lambda: dist.reduce_scatter(t(), one_per_rank(), group=group),
        "all_to_all": lambda: dist.all_to_all(one_per_rank(), one_per_rank(), group=group),
        "barrier": lambda: dist.barrier(group=group),
    }


def try_it(call) -> str | None:
    """None when ``call()`` worked, else its error in one line."""
    try:
        call()
        return None
    except (RuntimeError, ValueError, NotImplementedError) as error:
        return first_line(error)


def backends(rank: int, world_size: int, device, events: Events) -> None:
    """Try every operation and dtype on every backend and device this machine can run."""
    available = {name: bool(getattr(dist, f"is_{name}_available", lambda: False)())
                 for name in BACKEND_NAMES}
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if rank == 0:
        events.emit(rank, "available", built=available, gpus=gpus,
                    default=dict(dist.Backend.default_device_backend_map))
    devices = ["cpu"] + (["cuda"] if gpus >= world_size else [])
    for backend in ["gloo", "nccl"]:
        if not available[backend] or (backend == "nccl" and gpus < world_size):
            continue
        group = dist.new_group(backend=backend)
        for device_type in devices:
            here = torch.device(device_type, rank if device_type == "cuda" else None)
            for name, call in operations(rank, world_size, here, group).items():
                events.emit(rank, "support", backend=backend, device=device_type, op=name,
                            error=try_it(call))
            for dtype in DTYPES:
                x = torch.ones(4, device=here).to(getattr(torch, dtype))
                error = try_it(lambda x=x, g=group: dist.all_reduce(x, group=g))
                events.emit(rank, "dtype", backend=backend, device=device_type, dtype=dtype,
                            error=error)
        dist.barrier()
    built = ", ".join(name for name, ok in available.items() if ok)
    say(rank, f"tried {len(devices)} device type(s); backends built in: {built}")


# --- asynchronous collectives -------------------------------------------------------------


def fake_backward_step(weights: torch.Tensor) -> None:
    """Stands for computing one layer's gradients: a matrix product, real CPU work."""
    torch.tanh(weights @ weights)


def overlap(rank: int, device, events: Events, buckets: int, numel: int, size: int,
            trials: int) -> None:
    """A backward pass in ``buckets`` pieces; each finished bucket of gradients is averaged.

    blocking: compute a bucket, all_reduce it, wait, compute the next.
    overlapped: compute a bucket, start its all_reduce with async_op=True, compute the next
    while it travels; wait for all of them at the end. That is what DDP does.
    """
    torch.set_num_threads(1)  # one core of compute per rank; the rest is for communication
    generator = torch.Generator().manual_seed(rank)
    weights = torch.randn(size, size, generator=generator).to(device)
    gradients = [torch.ones(numel, device=device) for _ in range(buckets)]

    def step(mode: str) -> tuple[float, list[dict]]:
        spans, pending = [], []
        dist.barrier()
        begin = time.time()
        for gradient in gradients:
            started = time.time()
            fake_backward_step(weights)
            spans.append(dict(event="compute", t=started, t_end=time.time(), lane=0))
            sent = time.time()
            if mode == "blocking":
                dist.all_reduce(gradient)
                spans.append(dict(event="all_reduce", t=sent, t_end=time.time(), lane=1))
            else:
                work = dist.all_reduce(gradient, async_op=True)  # returns at once
                done = {}  # the callback runs when the all_reduce completes: its real end
                work.get_future().then(lambda _, d=done: d.setdefault("t", time.time()))
                pending.append((work, sent, done))
        for work, sent, done in pending:
            work.wait()  # gradients must be complete before the optimizer uses them
            ended = done.get("t", time.time())
            spans.append(dict(event="all_reduce", t=sent, t_end=ended, lane=1))
        return time.time() - begin, spans

    seconds = {"blocking": [], "overlapped": []}
    for trial in range(trials + 1):  # the first round warms up and is not counted
        for mode in seconds:
            took, spans = step(mode)
            if trial:
                seconds[mode].append(took)
            if trial == trials:  # the last step of each mode is drawn
                for span in spans:
                    events.emit(rank, mode=mode, **span)
    for mode, times in seconds.items():
        median = statistics.median(times)
        events.emit(rank, "step time", mode=mode, seconds=median, trials=times)
        say(rank, f"{mode:>10}: median step {median * 1000:.1f} ms over {trials} trials")


# --- cleanup ------------------------------------------------------------------------------


def cleanup(rank: int, jobs: list[Job], events: Events) -> None:
    """Jobs one after the other in one process, as a sweep or a test suite runs them."""
    for job in jobs[:2]:  # joined() calls destroy_process_group when its block ends
        with joined(job, rank) as device:
            total = torch.ones(1, device=device)
            dist.all_reduce(total)
        say(rank, f"job on {job.init_method}: all_reduce gave {total.item():g}; destroyed")
        events.emit(rank, "job", destroyed=True, value=total.item())
    # Without destroy_process_group, the next init_process_group in the process refuses.
    job = jobs[2]
    wait = timedelta(seconds=job.timeout)
    dist.init_process_group(job.backend, init_method=job.init_method, rank=rank,
                            world_size=job.world_size, timeout=wait)
    try:
        dist.init_process_group(job.backend, init_method=job.init_method, rank=rank,
                                world_size=job.world_size, timeout=wait)
    except ValueError as error:
        say(rank, f"init_process_group again, without destroying: {first_line(error)}")
        events.emit(rank, "job", destroyed=False, error=first_line(error))
    finally:
        dist.destroy_process_group()


# --- one rank, from start to finish -------------------------------------------------------


def rank_main(rank: int, job: Job, args, spares: list[Job]) -> None:
    """One rank. ``spares``: the same job on other ports, for demos that start more jobs."""
    events = Events(args.events)
    if args.demo == "cleanup":
        return cleanup(rank, [job, *spares], events)
    if args.demo == "backends":
        no_backend_given(rank, spares[0], events)
    wait = timedelta(seconds=job.timeout)  # for the groups a demo makes
    with joined(job, rank) as device:
        if args.demo == "groups":
            groups(rank, job.world_size, device, events, wait)
        elif args.demo == "missing-group":
            missing_group(rank, job.world_size, device, events, wait)
        elif args.demo == "mesh":
            mesh(rank, job.world_size, device, events, wait)
        elif args.demo == "backends":
            backends(rank, job.world_size, device, events)
        else:
            overlap(rank, device, events, args.buckets, args.numel, args.size, args.trials)


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.process_groups",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    made = [
        demos.add_parser("groups", help="disjoint and overlapping subgroups, group ranks"),
        demos.add_parser("missing-group", help="a rank that skips new_group"),
        demos.add_parser("mesh", help="a 2-D device mesh and new_subgroups"),
        demos.add_parser("backends", help="what each backend supports here, tried"),
        demos.add_parser("overlap", help="async all_reduce overlapped with computation"),
        demos.add_parser("cleanup", help="jobs in one process, with and without destroy"),
    ]
    overlap_demo = made[4]
    overlap_demo.add_argument("--buckets", type=positive_int, default=8,
                              help="gradient buckets per step (default 8)")
    overlap_demo.add_argument("--numel", type=positive_int, default=1 << 18,
                              help="floats per bucket (default 256K = 1 MB)")
    overlap_demo.add_argument("--size", type=positive_int, default=400,
                              help="side of the matrix multiplied per bucket (default 400)")
    overlap_demo.add_argument("--trials", type=positive_int, default=15,
                              help="timed steps per mode (default 15)")
    for demo in made:
        add_job_options(demo, world_size=4 if demo.prog.endswith(("groups", "mesh")) else 2)
        add_common_options(demo, timeout=30)
    return parser


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    least = {"missing-group": 3, "mesh": 4}.get(args.demo, 2)
    job = job_from_args(parser, args, least)
    if args.demo == "mesh" and job.world_size % 2:
        parser.error("mesh lays the ranks out as N/2 x 2: the world size must be even")
    if job.started_as_rank and args.demo in ("backends", "cleanup"):
        parser.error(f"{args.demo} starts more than one job: run it without torchrun")
    open_events(args.events)
    spares = [job.on_fresh_port(), job.on_fresh_port()]
    # slicing a mesh imports torch._dynamo: before the group (workers.ranks.import_modules)
    preload = ("torch._dynamo",) if args.demo == "mesh" else ()
    return run_ranks(job, rank_main, args, spares, preload=preload)


if __name__ == "__main__":
    sys.exit(main())
