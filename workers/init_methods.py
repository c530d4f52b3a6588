"""Finding each other: init methods and the store.

    python -m workers.init_methods join --method env --world-size 4
    python -m workers.init_methods join --method store --store file --world-size 3
    python -m workers.init_methods store --world-size 3
    python -m workers.init_methods missing-rank --world-size 2 --timeout 5
    python -m workers.init_methods port-in-use
    python -m workers.init_methods leftover-file
    python -m workers.init_methods pitfalls
    python -m workers.init_methods arrival --world-size 4 --late 0.1
    python -m workers.init_methods no-backend --world-size 2
    torchrun --standalone --nproc-per-node 4 -m workers.init_methods join

Before any tensor moves, the processes of a job must find each other: every route below
ends in the same place, a key-value store that all ranks can reach.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from workers.job import Job, joined, sockets_on_loopback, started_as_rank, world_size_from
from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    exit_now,
    fail,
    first_line,
    free_port,
    launch,
    open_events,
    positive_float,
    positive_int,
    say,
    say_main,
)
from workers.verdicts.cores import cores_of_this_process

METHODS = ["env", "tcp", "file", "store"]
ENV_VARIABLES = ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                 "TORCHELASTIC_USE_AGENT_STORE"]


@dataclass(frozen=True)
class Rendezvous:
    """Where and how the ranks of one job meet."""

    method: str  # env, tcp, file or store
    store: str  # for method "store": build a "tcp" or a "file" store
    address: str  # where rank 0's store listens
    port: int
    path: str  # the rendezvous file of file:// and of a FileStore
    timeout: float  # seconds


def init(rank: int, world_size: int, meet: Rendezvous) -> None:
    """Join the default process group by one of the four routes."""
    wait = timedelta(seconds=meet.timeout)
    if meet.method == "env":  # where to meet from the environment, who I am from arguments
        os.environ.update(MASTER_ADDR=meet.address, MASTER_PORT=str(meet.port))
        dist.init_process_group("gloo", init_method="env://", rank=rank,
                                world_size=world_size, timeout=wait)
    elif meet.method == "tcp":  # the same store, its address given as a URL
        dist.init_process_group("gloo", init_method=f"tcp://{meet.address}:{meet.port}",
                                rank=rank, world_size=world_size, timeout=wait)
    elif meet.method == "file":  # a file every rank can open, on a shared file system
        dist.init_process_group("gloo", init_method=f"file://{meet.path}",
                                rank=rank, world_size=world_size, timeout=wait)
    else:  # "store": build the store yourself and hand it over
        if meet.store == "tcp":
            store = tcp_store(rank, world_size, meet.address, meet.port, wait)
        else:
            store = dist.FileStore(meet.path, world_size)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                timeout=wait)


def tcp_store(rank, world_size, address, port, wait: timedelta) -> dist.TCPStore:
    """Rank 0 runs the store's server, on a socket bound to ``address`` alone (the
    security section says why); the other ranks connect to it."""
    if rank == 0:
        listener = socket.create_server((address, port))
        return dist.TCPStore(address, port, world_size, True, timeout=wait,
                             master_listen_fd=listener.detach())
    return dist.TCPStore(address, port, world_size, False, timeout=wait)


def join_group(rank: int, world_size: int, meet: Rendezvous, events: Events) -> None:
    """One rank: join the group, prove it works with an all_reduce, leave cleanly."""
    sockets_on_loopback()  # the env:// and tcp:// stores still listen everywhere (shown)
    try:
        init(rank, world_size, meet)
    except (RuntimeError, OSError) as error:  # DistStoreError, DistNetworkError, ...
        say(rank, f"{type(error).__name__}: {first_line(error)}")
        sys.exit(1)
    try:
        total = torch.tensor([rank])
        dist.all_reduce(total)  # 0 + 1 + ... + (world_size - 1) on every rank
        say(rank, f"joined via {meet.method}; sum of ranks = {int(total)}")
        listening = listening_on(meet.port) if rank == 0 else []
        if listening:
            say(rank, f"the store's server listens on {', '.join(listening)}")
        seen = {name: os.environ.get(name) for name in ENV_VARIABLES}
        events.emit(rank, "joined", method=meet.method, world_size=world_size,
                    sum=int(total), env=seen, listening=listening)
    finally:
        dist.destroy_process_group()


def listening_on(port: int) -> list[str]:
    """The addresses on which this process accepts connections on ``port``."""
    import psutil

    return sorted(
        f"[{conn.laddr.ip}]:{port}" if ":" in conn.laddr.ip else f"{conn.laddr.ip}:{port}"
        for conn in psutil.Process().net_connections(kind="tcp")
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port
    )


def join_under_torchrun(rank: int, job: Job, events: Events) -> None:
    """Started by torchrun as one rank: the set-up every later chapter uses (job.py).

    Rank 0 also looks at who listens on MASTER_PORT: under torchrun, not rank 0 itself,
    since the agent of node 0 hosts the store (TORCHELASTIC_USE_AGENT_STORE)."""
    with joined(job, rank):
        total = torch.tensor([rank])
        dist.all_reduce(total)
        say(rank, f"joined via {job.init_method}; sum of ranks = {int(total)}")
        listening = listening_on(int(os.environ["MASTER_PORT"])) if rank == 0 else []
        if rank == 0:
            say(rank, "this process listens on MASTER_PORT: "
                      f"{', '.join(listening) if listening else 'no'}")
        seen = {name: os.environ.get(name) for name in ENV_VARIABLES}
        events.emit(rank, "joined", method="torchrun", world_size=job.world_size,
                    sum=int(total), env=seen, listening=listening)


# --- store: the key-value exchange under every rendezvous -------------------------------


def exchange(rank: int, world_size: int, store) -> tuple[int, str]:
    """Each rank uses the store directly: set, get, add, wait, compare_set, check."""
    store.set(f"hello/{rank}", f"pid {os.getpid()}")  # publish a value
    arrived = store.add("arrived", 1)  # an atomic counter: returns the new value
    say(rank, f"set hello/{rank}; add('arrived', 1) -> {arrived}")
    store.wait([f"hello/{r}" for r in range(world_size)])  # blocks until all are set
    other = (rank + 1) % world_size
    say(rank, f"get hello/{other} -> {store.get(f'hello/{other}').decode()}")

    # compare_set(key, expected, desired) writes only if the value is `expected`:
    # the first rank to get here becomes the leader; every rank reads the same answer.
    leader = store.compare_set("leader", "", f"rank {rank}").decode()
    say(rank, f"compare_set('leader', '', 'rank {rank}') -> {leader!r}")
    found = store.check(["leader"]), store.check(["nobody"])
    say(rank, f"check(['leader']), check(['nobody']) -> {found}")

    # Two jobs can share one store: a PrefixStore adds "job-a/" to every key it uses.
    job_a, job_b = dist.PrefixStore("job-a", store), dist.PrefixStore("job-b", store)
    if rank == 0:
        job_a.set("status", "training")
        job_b.set("status", "evaluating")
    job_a.wait(["status"])
    job_b.wait(["status"])
    a, b = job_a.get("status").decode(), job_b.get("status").decode()
    stored = store.check(["job-a/status"])
    say(rank, f"job-a status {a!r}, job-b status {b!r}; 'job-a/status' stored: {stored}")

    store.add("done", 1)  # the last use of the store by this rank
    if rank == 0:  # the server lives in rank 0: it must leave last
        while int(store.add("done", 0)) < world_size:
            time.sleep(0.01)
    return arrived, leader


def use_the_store(rank: int, world_size: int, meet: Rendezvous, events: Events) -> None:
    store = tcp_store(rank, world_size, meet.address, meet.port,
                      timedelta(seconds=meet.timeout))
    arrived, leader = exchange(rank, world_size, store)
    events.emit(rank, "store", arrived=arrived, leader=leader)


# --- three start-up mistakes --------------------------------------------------------------

NO_INTERFACE = "a network interface that does not exist"
OWN_PORT = "each rank chose its own port"
EARLY_RETURN = "a rank returned before the barrier"
PITFALLS = [NO_INTERFACE, OWN_PORT, EARLY_RETURN]


def pitfall(rank: int, world_size: int, meet: Rendezvous, name: str) -> None:
    """One rank of a small job that goes wrong at start-up in one of three common ways."""
    port = meet.port
    if name == NO_INTERFACE:
        os.environ["GLOO_SOCKET_IFNAME"] = "nosuch0"  # copied from another cluster's script
    elif name == OWN_PORT:
        port = meet.port + rank  # "29500 + rank": rank 1 looks for the store elsewhere
    dist.init_process_group("gloo", init_method=f"tcp://{meet.address}:{port}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=meet.timeout))
    try:
        if name == EARLY_RETURN and rank == 1:
            say(rank, "returns early, before the barrier")
            return
        dist.barrier()
    finally:
        dist.destroy_process_group()


def pitfall_rank(rank: int, world_size: int, meet: Rendezvous, name: str,
                 events: Events) -> None:
    """Run one rank of a pitfall; report its error in one line, and record it."""
    sockets_on_loopback()  # unless the pitfall names another interface
    begin = time.time()
    try:
        pitfall(rank, world_size, meet, name)
        say(rank, "returned without an error")
    except (RuntimeError, OSError, ValueError) as error:  # DistStoreError, DistNetworkError
        took = time.time() - begin
        say(rank, f"{type(error).__name__} after {took:.1f} s: {first_line(error)[:200]}")
        events.emit(rank, "pitfall", pitfall=name, error=first_line(error), seconds=took)


# --- no backend named: one per device ----------------------------------------------------

CHOICES = ["init_process_group()", "init_process_group(device_id=...)",
           'init_process_group("cpu:gloo,cuda:nccl")']


def init_by_device(rank: int, world_size: int, url: str, choice: str,
                   device: torch.device) -> None:
    """Join without naming one backend: none at all, only this rank's device, or one
    backend per device type."""
    if choice == "init_process_group()":
        dist.init_process_group(init_method=url, rank=rank, world_size=world_size)
    elif choice == "init_process_group(device_id=...)":
        dist.init_process_group(init_method=url, rank=rank, world_size=world_size,
                                device_id=device)
    else:
        dist.init_process_group("cpu:gloo,cuda:nccl", init_method=url, rank=rank,
                                world_size=world_size)


def all_reduce_on(device: torch.device) -> str:
    """All-reduce a tensor on ``device``: the ranks' sum, or the error's first line."""
    try:
        total = torch.tensor([dist.get_rank()], device=device)
        dist.all_reduce(total)
        return str(int(total))
    except (RuntimeError, ValueError) as error:
        return f"{type(error).__name__}: {first_line(error)[:120]}"


def by_device_rank(rank: int, world_size: int, meets: list[Rendezvous], gpus: bool,
                   events: Events) -> None:
    """Each way of naming no single backend, in a group of its own, one after the other."""
    sockets_on_loopback()
    device = torch.device("cuda", rank) if gpus else torch.device("cpu", 0)
    if gpus:
        torch.cuda.set_device(device)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for choice, meet in zip(CHOICES, meets):
        seen = {"choice": choice, "device": str(device)}
        if 0 < count < world_size and "device_id" not in choice:
            # nccl would bind two ranks to one GPU at once (_nccl2_device), which NCCL
            # refuses, and a rank's error there can end the job: not tried (as the process
            # groups chapter's no-backend demo does)
            seen["skipped"] = (f"not tried: it would set up nccl for {world_size} ranks on "
                               f"{count} GPU(s), which NCCL refuses")
            say(rank, f"{choice}: {seen['skipped']}")
            events.emit(rank, "by device", **seen)
            continue
        try:
            init_by_device(rank, world_size, f"tcp://{meet.address}:{meet.port}", choice,
                           device)
        except (RuntimeError, ValueError) as error:
            seen["error"] = f"{type(error).__name__}: {first_line(error)[:160]}"
            say(rank, f"{choice}: {seen['error']}")
            events.emit(rank, "by device", **seen)
            continue
        seen.update(backend=str(dist.get_backend()), config=str(dist.get_backend_config()),
                    cpu=all_reduce_on(torch.device("cpu")))
        if gpus:
            seen["cuda"] = all_reduce_on(device)
        say(rank, f"{choice}: get_backend() {seen['backend']!r}, get_backend_config() "
                  f"{seen['config']!r}; all_reduce of a CPU tensor: {seen['cpu']}"
            + (f"; of a CUDA tensor: {seen['cuda']}" if gpus else ""))
        events.emit(rank, "by device", **seen)
        dist.destroy_process_group()


def demo_no_backend(args, events: Events) -> int:
    gpus = torch.cuda.is_available() and torch.cuda.device_count() >= args.world_size
    say_main(f"{args.world_size} ranks, " + (f"GPUs 0 to {args.world_size - 1}" if gpus
                                               else "no GPU each: device_id is cpu:0"))
    meets = [rendezvous_of(args, "tcp", fresh=True) for _ in CHOICES]
    return launch(by_device_rank, (args.world_size, meets, gpus, events), args.world_size,
                  timeout=len(CHOICES) * args.timeout + 5)


# --- the jobs -----------------------------------------------------------------------------


def run_job(world_size: int, meet: Rendezvous, events: Events, started=None,
            target=join_group, slack: float = 5) -> int:
    """Start ``started`` ranks (default: all) of a job; 0 when every one of them succeeded.

    The ranks are stopped ``slack`` seconds after the rendezvous timeout, so their own
    timeout errors come first.
    """
    started = world_size if started is None else started
    return launch(target, (world_size, meet, events), started, timeout=meet.timeout + slack)


@functools.cache
def rendezvous_folder() -> str:
    """This process's folder for rendezvous files, removed when the process exits."""
    folder = tempfile.mkdtemp(prefix="rendezvous-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def fresh_file() -> str:
    """A path no job has used yet, for a ``file://`` rendezvous."""
    return os.path.join(tempfile.mkdtemp(dir=rendezvous_folder()), "store")


def rendezvous_of(args, method: str, fresh: bool = False) -> Rendezvous:
    """The rendezvous the command line describes; ``fresh``: a new port and file, as a
    second job in the same run needs (a closed store's port can linger in TIME_WAIT)."""
    port, path = args.port, args.file
    if fresh:
        port = free_port(args.address)
        path = fresh_file()
    return Rendezvous(method, getattr(args, "store", "tcp"), args.address, port, path,
                      args.timeout)


def demo_join(args, events: Events) -> int:
    for index, method in enumerate(args.method):  # one job per route, in turn
        meet = rendezvous_of(args, method, fresh=index > 0)
        code = run_job(args.world_size, meet, events)
        if code:
            return code
    return 0


def demo_store(args, events: Events) -> int:
    meet = rendezvous_of(args, "tcp")
    return run_job(args.world_size, meet, events, target=use_the_store)


def demo_pitfalls(args, events: Events) -> int:
    """Each start-up mistake in a job of two ranks of its own, one after the other."""
    for name in PITFALLS:
        say_main(f"--- {name}")
        meet = rendezvous_of(args, "tcp", fresh=True)
        # each rank ends by itself; the bound only stops a stray one, and leaves a client's
        # connect retries, whose backoff can reach seconds under load, time to fail
        launch(pitfall_rank, (2, meet, name, events), 2, timeout=meet.timeout + 15)
    return 0


def demo_missing_rank(args, events: Events) -> int:
    """Start every rank but the last: the others wait for it until their timeout."""
    for index, method in enumerate(args.method):
        say_main(f"{method}: starting {args.world_size - 1} of {args.world_size} ranks")
        begin = time.time()
        meet = rendezvous_of(args, method, fresh=index > 0)
        code = run_job(args.world_size, meet, events, started=args.world_size - 1)
        took = time.time() - begin
        say_main(f"{method}: the job ended after {took:.1f} s, exit code {code}")
    return 1  # a job with a missing rank never succeeds


def demo_port_in_use(args, events: Events) -> int:
    """Another program already listens on the port the job was told to use."""
    with socket.socket() as squatter:
        squatter.bind((args.address, args.port))
        squatter.listen()
        say_main(f"another program is listening on {args.address}:{args.port}")
        return run_job(1, rendezvous_of(args, "env"), events)


def demo_leftover_file(args, events: Events) -> int:
    """A job that dies leaves its rendezvous file; the next one on the path may fail. A job
    that ends with destroy_process_group usually removes it; one without it leaves it."""
    meet = rendezvous_of(args, "file")
    say_main(f"job 1 uses {meet.path}; its ranks are killed before they can clean up")
    launch(crash_after_joining, (meet.path, meet.timeout), 2, timeout=meet.timeout + 5)
    say_main(f"after job 1: the file exists: {os.path.exists(meet.path)}")
    say_main("job 2 reuses the same path; its rank 1 starts a second after rank 0")
    second = run_job(2, meet, events, target=join_late, slack=2)
    say_main(f"job 2 exited with {second}")
    if os.path.exists(meet.path):
        os.remove(meet.path)
    say_main("deleted the file; job 3 uses the same path and ends cleanly")
    third = run_job(2, meet, events)
    say_main(f"after job 3 (destroy_process_group): the file exists: "
             f"{os.path.exists(meet.path)}")
    if os.path.exists(meet.path):  # job 3's stores did not remove it: job 4 starts without
        os.remove(meet.path)
        say_main("deleted the file job 3 left")
    say_main("job 4 uses the same path and ends without destroy_process_group")
    fourth = run_job(2, meet, events, target=join_without_leaving)
    say_main(f"after job 4: the file exists: {os.path.exists(meet.path)}")
    if os.path.exists(meet.path):
        os.remove(meet.path)
    return third or fourth


def join_without_leaving(rank: int, world_size: int, meet: Rendezvous,
                         events: Events) -> None:
    """Join and all-reduce, then exit without destroy_process_group."""
    sockets_on_loopback()
    init(rank, world_size, meet)
    total = torch.tensor([rank])
    dist.all_reduce(total)
    say(rank, f"sum of ranks = {int(total)}; exits without destroy_process_group")


def join_late(rank: int, world_size: int, meet: Rendezvous, events: Events) -> None:
    """join_group, with rank 1 arriving a second late, as ranks often do."""
    if rank == 1:
        time.sleep(1.0)
    join_group(rank, world_size, meet, events)


def crash_after_joining(rank: int, path: str, timeout: float) -> None:
    """Join, then die without clean-up, as a job killed by its scheduler or by OOM does."""
    sockets_on_loopback()
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=timeout))
    dist.barrier()  # both ranks have joined and written their keys
    say(rank, "joined; now killed with SIGKILL")
    os.kill(os.getpid(), signal.SIGKILL)  # no destroy_process_group, no FileStore clean-up


ORDERS = ["rank 0 first", "rank 0 last"]


def demo_arrival(args, events: Events) -> int:
    """One job of ``--world-size`` ranks that joins and leaves a ``tcp://`` group
    ``--repeats`` times in each order: rank 0, whose ``init_process_group`` starts the
    store's server, arriving ``--late`` seconds before the other ranks, or after them.
    Every join has a fresh port; the ranks are running already, so what is timed is the
    rendezvous, not the start of processes."""
    warm_up = rendezvous_of(args, "tcp", fresh=True)
    meets = [(order, rendezvous_of(args, "tcp", fresh=True))
             for _ in range(args.repeats) for order in ORDERS]
    ready = mp.get_context("forkserver").Barrier(args.world_size)
    deadline = (len(meets) + 1) * (args.timeout + args.late) + 5
    job = (args.world_size, warm_up, meets, args.late, ready, events)
    code = launch(time_arrivals, job, args.world_size, timeout=deadline)
    if code == 0:
        say_main(f"{args.world_size} ranks, {args.repeats} joins in each order, the late "
                 f"side {args.late:g} s late, on {cores_of_this_process()}")
    return code


def time_arrivals(rank: int, world_size: int, warm_up: Rendezvous,
                  meets: list[tuple[str, Rendezvous]], late: float, ready,
                  events: Events) -> None:
    """Join and leave a group once per rendezvous in ``meets``, the late side sleeping
    ``late`` seconds first. The ranks start each join together (``ready``, a barrier of
    their own, since the group they just left is gone); the untimed ``warm_up`` join also
    waits for the last rank to start."""
    sockets_on_loopback()
    init(rank, world_size, warm_up)
    leave()
    for order, meet in meets:
        ready.wait()
        if (rank == 0) != (order == "rank 0 first"):
            time.sleep(late)  # the other side is at the store already
        with events.span(rank, "init_process_group", order=order, world_size=world_size,
                         job=meet.port):
            init(rank, world_size, meet)
        leave()
    if rank == 0:
        say(rank, f"joined and left {len(meets)} groups of {world_size}")


def leave() -> None:
    dist.barrier()  # every rank has joined before any leaves
    dist.destroy_process_group()


DEMOS = {
    "join": demo_join,
    "store": demo_store,
    "missing-rank": demo_missing_rank,
    "port-in-use": demo_port_in_use,
    "leftover-file": demo_leftover_file,
    "pitfalls": demo_pitfalls,
    "arrival": demo_arrival,
    "no-backend": demo_no_backend,
}


def port_number(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError
    return int(text)


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.init_methods",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    join = demos.add_parser("join", help="join a group by each route, one job per route")
    store = demos.add_parser("store", help="use the store itself: set, get, add, wait...")
    missing = demos.add_parser("missing-rank", help="a job with one rank that never starts")
    busy = demos.add_parser("port-in-use", help="the store's port is taken")
    leftover = demos.add_parser("leftover-file", help="reuse a dead job's rendezvous file")
    pitfalls = demos.add_parser("pitfalls", help="three start-up mistakes, one job each")
    arrival = demos.add_parser("arrival", help="rank 0 at the store first, then last")
    by_device = demos.add_parser("no-backend", help="no backend named: one per device")
    for demo in (join, missing):
        demo.add_argument("--method", nargs="+", choices=METHODS, default=["env"],
                          help="rendezvous route(s), one job after the other (default env)")
    join.add_argument("--store", choices=["tcp", "file"], default="tcp",
                      help="which store --method store builds (default tcp)")
    for demo in (join, store, missing):
        demo.add_argument("--world-size", type=positive_int, default=2,
                          help="ranks (default 2; under torchrun: its WORLD_SIZE)")
    for demo in (join, store, missing, busy):
        demo.add_argument("--address", default="127.0.0.1",
                          help="where rank 0's store listens (default 127.0.0.1)")
        demo.add_argument("--port", default=os.environ.get("MASTER_PORT"),
                          help="the store's port (default $MASTER_PORT, else a free one)")
    for demo in (join, missing, leftover):
        demo.add_argument("--file", metavar="PATH",
                          help="rendezvous file of the file routes (default: a fresh path)")
    arrival.add_argument("--world-size", type=positive_int, default=4,
                         help="ranks (default 4)")
    by_device.add_argument("--world-size", type=positive_int, default=2,
                           help="ranks (default 2; with GPUs, one each where there are "
                           "enough)")
    arrival.add_argument("--late", type=positive_float, default=0.1, metavar="SECONDS",
                         help="how late the late side arrives (default 0.1)")
    arrival.add_argument("--repeats", type=positive_int, default=3,
                         help="joins in each order (default 3)")
    for demo in (join, store, missing, busy, leftover, arrival, by_device):
        add_common_options(demo, timeout=30)
    add_common_options(pitfalls, timeout=2)  # small jobs: a short rendezvous does
    return parser


def check(parser, args) -> None:
    """What argparse cannot see: sizes, a usable port, address and rendezvous file."""
    if args.demo in ("join", "store", "missing-rank", "arrival", "no-backend"):
        least = 2 if args.demo in ("missing-rank", "arrival") else 1
        args.world_size = world_size_from(parser, args, least)
    args.address = getattr(args, "address", "127.0.0.1")
    try:
        args.port = port_number(args.port) if getattr(args, "port", None) else None
    except ValueError:
        parser.error(f"argument --port: expected a number from 1 to 65535, "
                     f"got {args.port!r}")
    if not started_as_rank():  # every rank runs here, so the address must be this machine's
        try:
            args.port = args.port or free_port(args.address)
        except OSError as error:
            parser.error(f"argument --address: cannot bind to {args.address!r}: "
                         f"{error.strerror}")
    if getattr(args, "file", None) is None:
        args.file = fresh_file()
    args.file = os.path.abspath(args.file)  # file://runs/x would name the host "runs"
    folder = os.path.dirname(os.path.abspath(args.file))
    if not os.access(folder, os.W_OK):
        parser.error(f"argument --file: cannot create a file in {folder}")
    if os.path.exists(args.file):
        parser.error(f"argument --file: {args.file} already exists (a leftover of an "
                     "earlier job?); delete it or choose a fresh path")


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    check(parser, args)
    events = open_events(args.events)
    if started_as_rank():  # torchrun started this process as one rank: just be that rank
        if args.demo != "join":
            fail(f"under torchrun only the join demo runs, not {args.demo}")
        # gloo, whatever the machine: rendezvous is the lesson here, not the backend
        job = Job(args.world_size, "gloo", "env://", args.timeout, started_as_rank=True)
        join_under_torchrun(int(os.environ["RANK"]), job, events)
        return 0
    return DEMOS[args.demo](args, events)


if __name__ == "__main__":
    exit_now(main())
