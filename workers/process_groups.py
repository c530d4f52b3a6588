"""Process groups and backends: subgroups, device meshes, what each backend supports, and
the backend's own threads behind an asynchronous collective.

    python -m workers.process_groups groups --world-size 4
    python -m workers.process_groups missing-group --world-size 3
    python -m workers.process_groups missing-group --world-size 3 --local-sync
    python -m workers.process_groups mesh --world-size 4
    python -m workers.process_groups split --world-size 4
    python -m workers.process_groups backends --world-size 2
    python -m workers.process_groups threads --world-size 2
    torchrun --standalone --nproc-per-node 4 -m workers.process_groups groups

Every rank starts with the value ``rank + 1``, so a sum over a group says who was in it.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from workers.job import (
    Job,
    add_job_options,
    job_from_args,
    joined,
    loopback_store,
    ranks_on_this_machine,
    run_ranks,
    sockets_on_loopback,
)
from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    exit_now,
    first_line,
    open_events,
    positive_float,
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


def groups(rank: int, world_size: int, device, timeout: timedelta) -> list[dict]:
    """Every group of ``subgroup_layout`` and the world: what this rank sees in each."""
    # Every rank calls new_group for every group, in the same order, even for groups it is
    # not in: each rank numbers its groups by counting these calls.
    layout = subgroup_layout(world_size)
    made = {name: dist.new_group(ranks, timeout=timeout) for name, ranks in layout.items()}
    made["world"], layout["world"] = dist.group.WORLD, list(range(world_size))
    seen = []
    for name in ["world", "even", "odd", "head", "tail", "backwards"]:
        group = made[name]
        if rank not in layout[name]:  # get_rank(group) is -1 here
            seen.append(dict(group=name, group_rank=dist.get_rank(group)))
            continue
        total = torch.tensor([float(rank + 1)], device=device)
        dist.all_reduce(total, group=group)  # only the members take part
        first = dist.get_global_rank(group, 0)  # group rank 0, as a global rank
        leader = torch.tensor([float(rank)], device=device)
        dist.broadcast(leader, src=first, group=group)  # src is a *global* rank
        seen.append(dict(group=name, group_rank=dist.get_rank(group),
                         group_size=dist.get_world_size(group), first_global=first,
                         sum=total.item(), broadcast=leader.item()))
    return seen


def report_groups(rank: int, world_size: int, seen: list[dict], events: Events) -> None:
    layout = {"world": list(range(world_size)), **subgroup_layout(world_size)}
    for e in seen:
        events.emit(rank, "member", members=layout[e["group"]], **e)
        if e["group_rank"] >= 0:
            say(rank, f"{e['group']:>9} {layout[e['group']]}: group rank {e['group_rank']} "
                      f"of {e['group_size']}, sum {e['sum']:g}, broadcast from global rank "
                      f"{e['first_global']} gave {e['broadcast']:g}")


def missing_group(rank: int, world_size: int, device, group_timeout: timedelta,
                  local: bool) -> bool:
    """The last rank skips new_group for a group it is not in; then all make another.
    ``local``: both made with use_local_synchronization=True. True if it worked."""
    if rank != world_size - 1:
        pair = dist.new_group([0, 1], timeout=group_timeout,
                              use_local_synchronization=local)
        if rank in (0, 1):
            dist.all_reduce(torch.ones(1, device=device), group=pair)
            say(rank, f"made new_group([0, 1]), named {pair.group_name!r}, used it")
        else:
            say(rank, "made new_group([0, 1]), which it is not in")
    else:
        say(rank, "skipped new_group([0, 1]): 'I am not in it anyway'")
    begin, failing = time.time(), "new_group(all ranks)"
    try:
        everyone = dist.new_group(list(range(world_size)), timeout=group_timeout,
                                  use_local_synchronization=local)
        say(rank, f"new_group(all ranks) returned after {time.time() - begin:.1f} s")
        begin, failing = time.time(), "its all_reduce"
        dist.all_reduce(torch.ones(1, device=device), group=everyone)
        say(rank, "its all_reduce finished")
        return True
    except RuntimeError as error:  # DistStoreError is a RuntimeError
        say(rank, f"{failing} failed after {time.time() - begin:.1f} s: "
                  f"{type(error).__name__}: {first_line(error)}")
        return False


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


def split(rank: int, world_size: int, device, timeout: timedelta) -> dict:
    """split_group: the even ranks' group and the odd ranks', made in one call."""
    layout = [list(range(0, world_size, 2)), list(range(1, world_size, 2))]
    mine = dist.split_group(split_ranks=layout, timeout=timeout)  # every rank calls it
    total = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(total, group=mine)
    return dict(members=dist.get_process_group_ranks(mine), sum=total.item())


# --- backends -----------------------------------------------------------------------------

BACKEND_NAMES = ["gloo", "nccl", "mpi", "ucc", "xccl"]
DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "bool",
          "complex64", "float8_e4m3fn"]


def no_backend_given(rank: int, job: Job, events: Events) -> None:
    """What init_process_group() sets up when it is told no backend, and asking for two."""
    wait = timedelta(seconds=job.timeout)
    if ranks_on_this_machine(job.world_size) == job.world_size:  # as joined() does
        sockets_on_loopback()
    store = None  # under a launcher, it holds the store
    if not job.started_as_rank:
        store = loopback_store(rank, job.world_size, job.port, wait)
    dist.init_process_group(init_method=None if store else job.init_method, store=store,
                            rank=rank, world_size=job.world_size, timeout=wait)
    try:
        picked = dist.get_backend_config()  # device type -> backend, e.g. "cpu:gloo"
        try:
            both = dist.get_backend_config(dist.new_group(backend="cpu:gloo,cuda:nccl",
                                                          timeout=wait))
            both_ok = True
        except (RuntimeError, ValueError) as error:
            both, both_ok = f"{type(error).__name__}: {first_line(error)}", False
        gloo_group = dist.new_group(backend="gloo", timeout=wait)
        gloo = dist.get_backend_config(gloo_group)
        # new_group returns when this rank is connected, not every rank: a rank that tore
        # the groups down at once closed connections a slower rank was still making. The
        # barrier runs in the gloo group: on a machine with GPUs the default group's would
        # be nccl's, every rank on the same GPU (none was chosen), which nccl refuses.
        dist.barrier(group=gloo_group)
    finally:
        dist.destroy_process_group()
    if rank == 0:
        say(rank, f"init_process_group() with no backend set up {picked!r}")
        say(rank, f"backend='cpu:gloo,cuda:nccl' gave {both!r}")
        say(rank, f"backend='gloo' gave {gloo!r}")
        events.emit(rank, "no backend", picked=picked, both=both, both_ok=both_ok,
                    gloo=gloo)


def no_backend_where_it_can(rank: int, job: Job, events: Events) -> None:
    """``no_backend_given``, unless this machine has an accelerator but fewer devices than
    ranks here. Told no backend, ``init_process_group`` sets up the accelerator's backend
    alone (``BackendConfig``), and nccl binds each rank to GPU ``LOCAL_RANK % GPUs``, or
    ``rank % GPUs`` without LOCAL_RANK, at once (``_nccl2_device``, both in
    ``torch/distributed/distributed_c10d.py``): two ranks on one GPU, which NCCL refuses,
    and the rank's error would end the job."""
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    devices = torch.accelerator.device_count() if accelerator is not None else 0
    here = (int(os.environ.get("LOCAL_WORLD_SIZE", job.world_size))
            if "LOCAL_RANK" in os.environ else job.world_size)
    if accelerator is None or devices >= here:
        no_backend_given(rank, job, events)
        return
    backend = dist.Backend.default_device_backend_map.get(accelerator.type, "none")
    if rank == 0:
        say(rank, f"init_process_group() with no backend not tried: it would set up "
                  f"{accelerator.type}:{backend} alone, for {here} ranks on {devices} "
                  f"{accelerator.type} device(s)")
        events.emit(rank, "no backend", skipped=True, accelerator=accelerator.type,
                    backend=backend, devices=devices, ranks=here)


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


def backends(rank: int, world_size: int, device, events: Events,
             timeout: timedelta) -> None:
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
        group = dist.new_group(backend=backend, timeout=timeout)
        for device_type in devices:
            here = torch.device(device_type, rank if device_type == "cuda" else None)
            refused = []
            for name, call in operations(rank, world_size, here, group).items():
                error = try_it(call)
                events.emit(rank, "support", backend=backend, device=device_type, op=name,
                            error=error)
                refused += [name] if error else []
            for dtype in DTYPES:
                x = torch.ones(4, device=here).to(getattr(torch, dtype))
                error = try_it(lambda x=x, g=group: dist.all_reduce(x, group=g))
                events.emit(rank, "dtype", backend=backend, device=device_type, dtype=dtype,
                            error=error)
                refused += [f"all_reduce of {dtype}"] if error else []
            if rank == 0:  # the table the page draws from the events, in one line
                said = f"refused {', '.join(refused)}" if refused else "all tried worked"
                say(rank, f"{backend} on {device_type}: {said}")
        dist.barrier()
    built = ", ".join(name for name, ok in available.items() if ok)
    say(rank, f"tried {len(devices)} device type(s); backends built in: {built}")


# --- the backend's threads, and an asynchronous collective --------------------------------


def threads_here() -> int:
    """This process's threads as the operating system counts them: Python's ``threading``
    module knows only the threads Python started, not the backend's C++ threads."""
    return len(os.listdir("/proc/self/task"))


def thread_names() -> list[str]:
    """The names of this process's threads that Python did not start: from Python 3.14 on,
    a thread Python starts gives the operating system its name too (``Thread.start``)."""
    python = {thread.native_id for thread in threading.enumerate()}
    names = []
    for task in os.listdir("/proc/self/task"):
        if int(task) in python:
            continue
        try:
            with open(f"/proc/self/task/{task}/comm") as file:
                names.append(file.read().strip())
        except OSError:  # the thread ended meanwhile
            pass
    return sorted(names)


def async_all_reduce(x: torch.Tensor) -> tuple[float, float]:
    """Start an all_reduce, compute while it travels, wait for it: how long the call took
    to return, and how long until the result was there."""
    begin = time.perf_counter()
    work = dist.all_reduce(x, async_op=True)  # queued for the backend's thread
    returned = time.perf_counter() - begin
    torch.tanh(torch.randn(300, 300) @ torch.randn(300, 300))  # free to compute meanwhile
    work.wait()  # do not touch x before this
    return returned, time.perf_counter() - begin


def threads(rank: int, device, events: Events, before: int, numel: int,
            timeout: timedelta) -> None:
    """Threads before and after the groups, and an all_reduce with async_op=True."""
    after_init = threads_here()
    group = dist.new_group(timeout=timeout)  # all ranks; threads and connections of its own
    dist.all_reduce(torch.ones(1, device=device), group=group)
    after_group = threads_here()
    x = torch.ones(numel, device=device)
    returned, done = async_all_reduce(x)
    work = dist.all_reduce(torch.ones(1, device=device), async_op=True)
    work.wait()
    names = thread_names()
    say(rank, f"threads: {before} before init_process_group, {after_init} after it, "
              f"{after_group} after new_group; threading.enumerate() knows "
              f"{threading.active_count()}")
    say(rank, f"all_reduce(async_op=True) returned a {type(work).__name__} after "
              f"{returned * 1e3:.2f} ms; wait() returned after {done * 1e3:.2f} ms, "
              f"x[0] = {x[0].item():g}")
    events.emit(rank, "threads", before=before, after_init=after_init,
                after_group=after_group, python_threads=threading.active_count(),
                names=names, returned=returned, done=done, value=x[0].item(),
                work=type(work).__name__, numel=numel)


# --- one rank, from start to finish -------------------------------------------------------


def rank_main(rank: int, job: Job, args, spares: list[Job]) -> None:
    """One rank. ``spares``: the same job on another port, for the demo that starts two."""
    events = Events(args.events)
    events.emit(rank, "started", pid=os.getpid())
    if args.demo == "backends":
        no_backend_where_it_can(rank, spares[0], events)
    before = threads_here()
    wait = timedelta(seconds=job.timeout)  # for the groups a demo makes
    with joined(job, rank) as device:
        if args.demo == "groups":
            report_groups(rank, job.world_size, groups(rank, job.world_size, device, wait),
                          events)
        elif args.demo == "missing-group":
            worked = missing_group(rank, job.world_size, device,
                                   timedelta(seconds=args.group_timeout), args.local_sync)
            events.emit(rank, "missing group", worked=worked)
            dist.barrier()  # the default group still works: every rank reports, then exits
            if not worked:
                raise SystemExit(1)
        elif args.demo == "mesh":
            mesh(rank, job.world_size, device, events, wait)
        elif args.demo == "split":
            try:
                made = split(rank, job.world_size, device, wait)
                say(rank, f"split_group gave the group {made['members']}, sum "
                          f"{made['sum']:g}")
            except RuntimeError as error:  # before 2.15 gloo could not split
                made = dict(error=f"{type(error).__name__}: {first_line(error)}")
                say(rank, f"split_group refused: {made['error']}")
            events.emit(rank, "split", bound=str(dist.group.WORLD.bound_device_id),
                        release=torch.__version__.split("+")[0],
                        **{"members": None, "sum": None, "error": None, **made})
            # Where split_group refuses, no rank has used the default group yet, and a
            # rank that leaves at once can close a connection a slower rank is still
            # accepting in init_process_group: the barrier keeps every rank until all
            # have joined.
            dist.barrier()
        elif args.demo == "backends":
            backends(rank, job.world_size, device, events, wait)
        else:
            threads(rank, device, events, before, args.numel, wait)


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.process_groups",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    made = [
        demos.add_parser("groups", help="disjoint and overlapping subgroups, group ranks"),
        demos.add_parser("missing-group", help="a rank that skips new_group"),
        demos.add_parser("mesh", help="a 2-D device mesh and new_subgroups"),
        demos.add_parser("split", help="the groups of a layout from one split_group"),
        demos.add_parser("backends", help="what each backend supports here, tried"),
        demos.add_parser("threads", help="the backend's threads; an async all_reduce"),
    ]
    missing = made[1]
    missing.add_argument("--group-timeout", type=positive_float, default=1,
                         metavar="SECONDS", help="timeout= of its groups (default 1)")
    missing.add_argument("--local-sync", action="store_true",
                         help="make both groups with use_local_synchronization=True")
    made[5].add_argument("--numel", type=positive_int, default=1 << 20,
                         help="floats all-reduced with async_op=True (default 1M = 4 MiB)")
    for demo in made:
        four = demo.prog.endswith(("groups", "mesh", "split"))
        add_job_options(demo, world_size=4 if four else 2)
        add_common_options(demo, timeout=15 if demo is missing else 30)
    return parser


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    least = {"missing-group": 3, "mesh": 4}.get(args.demo, 2)
    job = job_from_args(parser, args, least)
    if args.demo == "mesh" and job.world_size % 2:
        parser.error("mesh lays the ranks out as N/2 x 2: the world size must be even")
    if job.started_as_rank and args.demo == "backends":
        parser.error(f"{args.demo} starts more than one job: run it without torchrun")
    open_events(args.events)
    spares = [job.on_fresh_port()]
    # slicing a mesh imports torch._dynamo: before the group (workers.ranks.import_modules)
    preload = ("torch._dynamo",) if args.demo == "mesh" else ()
    return run_ranks(job, rank_main, args, spares, preload=preload)


if __name__ == "__main__":
    exit_now(main())
