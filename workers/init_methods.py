"""Finding each other: init methods and the store.

    python -m workers.init_methods join --method env --world-size 4
    python -m workers.init_methods join --method store --store file --world-size 3
    python -m workers.init_methods store --world-size 3
    python -m workers.init_methods missing-rank --world-size 2 --timeout 5
    python -m workers.init_methods port-in-use
    python -m workers.init_methods leftover-file
    python -m workers.init_methods benchmark --world-sizes 1 2 4 8
    torchrun --standalone --nproc-per-node 4 -m workers.init_methods join

Before any tensor moves, the processes of a job must find each other: every route below
ends in the same place, a key-value store that all ranks can reach.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import tempfile
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
    positive_int,
    say,
    say_main,
)
from workers.runner import free_port

METHODS = ["env", "tcp", "file", "store"]
ENV_VARIABLES = ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"]


def init(rank, world_size, method, store_kind, address, port, path, timeout) -> None:
    """Join the default process group by one of the four routes."""
    wait = timedelta(seconds=timeout)
    if (
        method == "env"
    ):  # what torchrun does: everything comes from environment variables
        os.environ.update(MASTER_ADDR=address, MASTER_PORT=str(port))
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size))
        dist.init_process_group("gloo", init_method="env://", timeout=wait)
    elif method == "tcp":  # the same store, its address given as a URL
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{address}:{port}",
            rank=rank,
            world_size=world_size,
            timeout=wait,
        )
    elif method == "file":  # a file every rank can open, on a shared file system
        dist.init_process_group(
            "gloo",
            init_method=f"file://{path}",
            rank=rank,
            world_size=world_size,
            timeout=wait,
        )
    else:  # method == "store": build the store yourself and hand it over
        if store_kind == "tcp":
            store = tcp_store(rank, world_size, address, port, wait)
        else:
            store = dist.FileStore(path, world_size)
        dist.init_process_group(
            "gloo", store=store, rank=rank, world_size=world_size, timeout=wait
        )


def tcp_store(rank, world_size, address, port, wait: timedelta) -> dist.TCPStore:
    """Rank 0 runs the store's server, the other ranks connect to it.

    The server gets a socket bound to ``address`` alone: given only a port, TCPStore
    listens on every network interface of the machine, whatever address it is told.
    """
    if rank == 0:
        listener = socket.create_server((address, port))
        return dist.TCPStore(
            address,
            port,
            world_size,
            True,
            timeout=wait,
            master_listen_fd=listener.detach(),
        )
    return dist.TCPStore(address, port, world_size, False, timeout=wait)


def join_group(
    rank, world_size, method, store_kind, address, port, path, timeout, events
):
    """One rank: join the group, prove it works with an all_reduce, leave cleanly."""
    begin = time.time()
    try:
        init(rank, world_size, method, store_kind, address, port, path, timeout)
    except (RuntimeError, OSError) as error:  # DistStoreError, DistNetworkError, ...
        say(rank, f"{type(error).__name__}: {first_line(error)}")
        sys.exit(1)
    joined = time.time()
    try:
        total = torch.tensor([rank])
        dist.all_reduce(total)  # 0 + 1 + ... + (world_size - 1) on every rank
        took = joined - begin
        say(rank, f"joined via {method} in {took:.3f} s; sum of ranks = {int(total)}")
        seen = {name: os.environ.get(name) for name in ENV_VARIABLES}
        listening = listening_on(port) if rank == 0 else []
        if listening:
            say(rank, f"the store's server listens on {', '.join(listening)}")
        events.emit(
            rank, "init_process_group", t=begin, t_end=joined, method=method,
            world_size=world_size, sum=int(total), env=seen, listening=listening,
        )  # fmt: skip
    finally:
        dist.destroy_process_group()


def listening_on(port: int) -> list[str]:
    """The addresses on which this process accepts connections on ``port``."""
    import psutil

    return sorted(
        f"[{conn.laddr.ip}]:{port}"
        if ":" in conn.laddr.ip
        else f"{conn.laddr.ip}:{port}"
        for conn in psutil.Process().net_connections(kind="tcp")
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port
    )


# --- store: the key-value exchange under every rendezvous -------------------------------


def exchange(rank, world_size, address, port, timeout, events) -> None:
    """Each rank uses the store directly: set, get, add, wait, compare_set, check."""
    store = tcp_store(rank, world_size, address, port, timedelta(seconds=timeout))
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
    say(rank, f"job-a status {a!r}, job-b status {b!r}, "
              f"key 'job-a/status' exists: {store.check(['job-a/status'])}")  # fmt: skip
    events.emit(rank, "store", arrived=arrived, leader=leader)

    store.add("done", 1)  # the last use of the store by this rank
    if rank == 0:  # the server lives in rank 0: it must leave last
        while int(store.add("done", 0)) < world_size:
            time.sleep(0.01)


# --- the jobs ------------------------------------------------------------------------------


def run_job(
    args, events, method=None, world_size=None, port=None, path=None, ranks=None
):
    """Start ``ranks`` (default: all) of a job; returns 0 when every started rank succeeded."""
    method = method or args.method[0]
    world_size = world_size or args.world_size
    job_args = (
        world_size, method, args.store, args.address, port or args.port,
        path or args.file, args.timeout, events,
    )  # fmt: skip
    started = world_size if ranks is None else ranks
    return launch(join_group, job_args, started, timeout=args.timeout + 10)


def demo_join(args, events: Events) -> int:
    torchrun = from_torchrun()
    if torchrun:  # torchrun started this process as one rank: just be that rank
        rank, world_size = torchrun
        address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        join_group(
            rank, world_size, "env", "tcp", address, port, "", args.timeout, events
        )
        return 0
    for index, method in enumerate(args.method):  # one job per route, in turn
        code = run_job(args, events, method=method, port=job_port(args, index))
        if code:
            return code
    return 0


def job_port(args, index: int) -> int:
    """The first job uses --port; each later one a fresh port (a closed store's port can
    linger in TIME_WAIT for a while)."""
    return args.port if index == 0 else free_port(args.address)


def demo_store(args, events: Events) -> int:
    job_args = (args.world_size, args.address, args.port, args.timeout, events)
    return launch(exchange, job_args, args.world_size, timeout=args.timeout + 10)


def demo_missing_rank(args, events: Events) -> int:
    """Start every rank but the last: the others wait for it until their timeout."""
    for index, method in enumerate(args.method):
        say_main(f"{method}: starting {args.world_size - 1} of {args.world_size} ranks")
        begin = time.time()
        code = run_job(args, events, method=method, port=job_port(args, index),
                       ranks=args.world_size - 1)  # fmt: skip
        say_main(
            f"{method}: the job ended after {time.time() - begin:.1f} s, exit code {code}"
        )
    return 1  # a job with a missing rank never succeeds


def demo_port_in_use(args, events: Events) -> int:
    """Another program already listens on the port the job was told to use."""
    with socket.socket() as squatter:
        squatter.bind((args.address, args.port))
        squatter.listen()
        say_main(f"another program is listening on {args.address}:{args.port}")
        return run_job(args, events, world_size=1)


def demo_leftover_file(args, events: Events) -> int:
    """A job that dies leaves its rendezvous file; the next job to reuse the path may fail."""
    path = args.file
    say_main(f"job 1 uses {path}; its ranks are killed before they can clean up")
    launch(crash_after_joining, (path, args.timeout), 2, timeout=args.timeout + 10)
    say_main(f"after job 1: the file exists: {os.path.exists(path)}")
    say_main("job 2 reuses the same path; its rank 1 starts a second after rank 0")
    job = (2, "file", args.store, args.address, args.port, path, args.timeout, events)
    second = launch(join_late, (1.0, *job), 2, timeout=args.timeout + 10)
    say_main(f"job 2 exited with {second}")
    os.remove(path)
    say_main("deleted the file; job 3 uses the same path again")
    return run_job(args, events, method="file", world_size=2, path=path)


def join_late(rank, delay, *job) -> None:
    """join_group, with rank 1 arriving ``delay`` seconds late, as ranks often do."""
    if rank == 1:
        time.sleep(delay)
    join_group(rank, *job)


def crash_after_joining(rank, path, timeout) -> None:
    """Join, then die without clean-up, as a job killed by its scheduler or by OOM does."""
    wait = timedelta(seconds=timeout)
    dist.init_process_group(
        "gloo", init_method=f"file://{path}", rank=rank, world_size=2, timeout=wait
    )
    dist.barrier()  # both ranks have joined and written their keys
    say(rank, "joined; now killed with SIGKILL")
    os.kill(
        os.getpid(), signal.SIGKILL
    )  # no destroy_process_group, no FileStore clean-up


def demo_benchmark(args, events: Events) -> int:
    """Time to rendezvous for each route and world size, each job on a fresh port/file."""
    for method in args.methods:
        for world_size in args.world_sizes:
            folder = tempfile.mkdtemp(prefix="rendezvous-")
            code = run_job(
                args, events, method=method, world_size=world_size,
                port=free_port(args.address), path=os.path.join(folder, "store"),
            )  # fmt: skip
            if code:
                return code
    return 0


DEMOS = {
    "join": demo_join,
    "store": demo_store,
    "missing-rank": demo_missing_rank,
    "port-in-use": demo_port_in_use,
    "leftover-file": demo_leftover_file,
    "benchmark": demo_benchmark,
}


def port_number(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError
    return int(text)


def parse_args(argv=None):
    parser = Parser(
        prog="python -m workers.init_methods", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("demo", choices=DEMOS, nargs="?", default="join")
    parser.add_argument("--method", nargs="+", choices=METHODS, default=["env"],
                        help="rendezvous route(s), run one after the other (default env)")  # fmt: skip
    parser.add_argument("--store", choices=["tcp", "file"], default="tcp",
                        help="which store --method store builds (default tcp)")  # fmt: skip
    parser.add_argument(
        "--world-size", type=positive_int, default=2, help="ranks (default 2)"
    )
    parser.add_argument("--address", default="127.0.0.1",
                        help="where rank 0's store listens (default 127.0.0.1, loopback only)")  # fmt: skip
    parser.add_argument("--port", default=os.environ.get("MASTER_PORT"),
                        help="store port (default $MASTER_PORT, else a free one)")  # fmt: skip
    parser.add_argument("--file", metavar="PATH",
                        help="rendezvous file for file routes (default: a fresh temporary path)")  # fmt: skip
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=METHODS,
                        help="benchmark: routes to time (default all)")  # fmt: skip
    parser.add_argument("--world-sizes", nargs="+", type=positive_int, default=[1, 2, 4, 8],
                        help="benchmark: world sizes to time (default 1 2 4 8)")  # fmt: skip
    add_common_options(parser, timeout=30)
    args = parser.parse_args(argv)

    if args.world_size > 64 or max(args.world_sizes) > 64:
        parser.error("at most 64 ranks on one machine")
    if args.demo == "missing-rank" and args.world_size < 2:
        parser.error("missing-rank needs --world-size of at least 2")
    try:
        args.port = port_number(args.port) if args.port else None
    except ValueError:
        parser.error(
            f"argument --port: expected a number from 1 to 65535, got {args.port!r}"
        )
    if (
        not from_torchrun()
    ):  # every rank runs here, so the address must be this machine's
        try:
            args.port = args.port or free_port(args.address)
        except OSError as error:
            parser.error(
                f"argument --address: cannot bind to {args.address!r}: {error.strerror}"
            )
    if args.file is None:
        args.file = os.path.join(tempfile.mkdtemp(prefix="rendezvous-"), "store")
    folder = os.path.dirname(os.path.abspath(args.file))
    if not os.access(folder, os.W_OK):
        parser.error(f"argument --file: cannot create a file in {folder}")
    if os.path.exists(args.file):
        parser.error(f"argument --file: {args.file} already exists (a leftover of an "
                     "earlier job?); delete it or choose a fresh path")  # fmt: skip
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    events = open_events(args.events)
    return DEMOS[args.demo](args, events)


if __name__ == "__main__":
    sys.exit(main())
