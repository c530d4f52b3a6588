"""Start methods: fork, spawn and forkserver.

    python -m workers.start_methods startup --processes 3
    python -m workers.start_methods inherit
    python -m workers.start_methods context
    python -m workers.start_methods fork-with-threads
    python -m workers.start_methods queue-threads
    python -m workers.start_methods fork-thread-pool
    python -m workers.start_methods ranks --processes 4
    python -m workers.start_methods cuda-fork        (needs a CUDA GPU)

fork copies the running parent; spawn starts a fresh interpreter that imports this
module and unpickles its target; forkserver starts one fresh server process once and
forks every child from it.
"""

from __future__ import annotations

import queue
import statistics
import sys
import threading
import time

import torch
import torch.multiprocessing as mp

from workers.ranks import (
    MOST_PROCESSES,
    Events,
    Parser,
    add_common_options,
    exit_now,
    fail,
    open_events,
    positive_float,
    positive_int,
    say,
    say_main,
)

# The default first: ['fork', 'spawn', 'forkserver'] on Linux up to Python 3.13,
# ['forkserver', 'fork', 'spawn'] from 3.14.
ALL_METHODS = mp.get_all_start_methods()


# --- startup: what one process costs to start -----------------------------------------


def report_started(rank: int, started_queue) -> None:
    """The cheapest possible child: say when its own code began to run."""
    started_queue.put((rank, time.time()))


def demo_startup(args, events: Events) -> int:
    for method in args.methods:
        ctx = mp.get_context(method)
        label = method
        if method == "forkserver" and args.forkserver_preload:
            # The server imports these once; every child forked from it has them.
            ctx.set_forkserver_preload(args.forkserver_preload)
            label = f"forkserver, preload {','.join(args.forkserver_preload)}"
        started_queue = ctx.SimpleQueue()
        costs = []
        for rank in range(args.processes):  # one at a time, so each start is measured alone
            child = ctx.Process(target=report_started, args=(rank, started_queue))
            asked = time.time()
            child.start()
            child.join(timeout=args.timeout)
            if child.is_alive() or child.exitcode != 0:
                child.kill()
                say_main(f"{label}: child {rank} did not report within {args.timeout:g} s")
                return 1
            _, began = started_queue.get()
            costs.append(began - asked)
            events.emit("main", "start-up", t=asked, t_end=began, method=label,
                        process=rank)
        in_ms = ", ".join(f"{cost * 1000:.0f}" for cost in costs)
        median = statistics.median(costs) * 1000
        say_main(f"{label:<10} start-up per process: {in_ms} ms (median {median:.0f} ms)")
    return 0


def greet() -> None:
    """A target that a spawned child can find: it lives in an importable module."""
    say(0, "hello from workers.start_methods.greet, found by name in an importable module")


# --- inherit: what a child sees of its parent's state ---------------------------------

SETTING = "the value written in the module's source"


def show_setting(method: str) -> None:
    global SETTING
    say(ALL_METHODS.index(method), f"{method:<10} child sees SETTING = {SETTING!r}")
    SETTING = f"a value the {method} child set"  # its own copy: the parent never sees it


def demo_inherit(args, events: Events) -> int:
    global SETTING
    SETTING = "a value the parent set at run time"
    say_main(f"parent changed SETTING to {SETTING!r} before start()")
    for method in args.methods:
        child = mp.get_context(method).Process(target=show_setting, args=(method,))
        child.start()
        child.join(timeout=args.timeout)
        if child.exitcode != 0:
            child.kill()
            return 1
    say_main(f"after the children changed theirs, the parent's SETTING = {SETTING!r}")
    events.emit("main", "after children", setting=SETTING)
    return 0


# --- context: the global start method against a context object ------------------------


def demo_context(args, events: Events) -> int:
    version = sys.version.split()[0]
    say_main(f"Python {version} on {sys.platform}: the default is {ALL_METHODS[0]!r}")
    current = mp.get_start_method(allow_none=True)
    say_main(f"get_start_method(allow_none=True) = {current!r}: nothing is fixed yet")
    mp.Queue()  # any use of the default context fixes the start method
    fixed = mp.get_start_method(allow_none=True)
    say_main(f"after mp.Queue(): get_start_method(allow_none=True) = {fixed!r}")
    for method in ["spawn", "forkserver"]:
        try:
            mp.set_start_method(method)
            say_main(f"set_start_method({method!r}) -> {mp.get_start_method()!r}")
        except RuntimeError as error:
            say_main(f"set_start_method({method!r}) -> RuntimeError: {error}")
            events.emit("main", "context", method=method, error=str(error))
        mp.set_start_method(method, force=True)
        say_main(f"set_start_method({method!r}, force=True) -> {mp.get_start_method()!r}")
    ctx = mp.get_context("fork")
    still = mp.get_start_method()
    say_main(f"get_context('fork') -> {type(ctx).__name__}; global still {still!r}")
    return 0


# --- fork-with-threads: a lock held by another thread at the moment of fork -----------

LOCK = threading.Lock()


def hold_lock(holding: threading.Event, seconds: float) -> None:
    with LOCK:
        holding.set()
        time.sleep(seconds)


def take_lock(rank: int, method: str, trying, took) -> None:
    say(rank, f"{method:<10} child: taking LOCK ...")
    trying.set()
    with LOCK:
        took.set()
        say(rank, f"{method:<10} child: took LOCK")


def demo_fork_with_threads(args, events: Events) -> int:
    holding = threading.Event()
    # A background thread holds the lock the whole time, as an I/O thread might.
    threading.Thread(target=hold_lock, args=(holding, 1000), daemon=True).start()
    holding.wait()
    say_main("a background thread now holds LOCK; starting one child per method")
    for rank, method in enumerate(args.methods):
        ctx = mp.get_context(method)
        trying, took = ctx.Event(), ctx.Event()
        child = ctx.Process(target=take_lock, args=(rank, method, trying, took))
        child.start()
        trying.wait(timeout=args.timeout)  # start-up (slow under spawn) is not a deadlock
        with events.span("main", "lock", method=method) as outcome:
            if took.wait(timeout=args.deadlock_after):
                child.join(timeout=args.timeout)
                code = child.exitcode
                say_main(f"{method:<10} child took the lock and exited with code {code}")
                outcome["verdict"] = "finished"
            else:
                child.kill()
                child.join()
                waited = args.deadlock_after
                say_main(f"{method:<10} child still waiting after {waited:g} s: deadlocked")
                outcome["verdict"] = "deadlocked"
    return 0


# --- queue-threads: which queues start a background thread ----------------------------


def demo_queue_threads(args, events: Events) -> int:
    ctx = mp.get_context("spawn")
    say_main(f"threads at first:           {[t.name for t in threading.enumerate()]}")
    simple = ctx.SimpleQueue()
    simple.put("hello")
    say_main(f"after SimpleQueue().put():  {[t.name for t in threading.enumerate()]}")
    fed = ctx.Queue()
    fed.put("hello")
    say_main(f"after Queue().put():        {[t.name for t in threading.enumerate()]}")
    simple.get()
    fed.get(timeout=args.timeout)  # both emptied before the parent exits
    return 0


# --- fork-thread-pool: PyTorch's intra-op threads at the moment of fork ----------------

BIG = 1_000_000  # elements: far above the size PyTorch splits over its intra-op threads


def double_and_sum(rank: int, label: str, threads: int | None, done) -> None:
    """A forked child runs one operation large enough for the intra-op thread pool."""
    if threads:
        torch.set_num_threads(threads)  # what each DataLoader worker does first
    say(rank, f"{label}: doubling and summing {BIG:,} numbers ...")
    torch.ones(BIG).mul(2).sum()
    done.set()
    say(rank, f"{label}: done")


def demo_fork_thread_pool(args, events: Events) -> int:
    threads = torch.get_num_threads()
    torch.ones(BIG).mul(2).sum()  # the parent's intra-op threads run, then wait for more
    say_main(f"the parent ran one operation on {threads} intra-op thread(s), then forks")
    ctx = mp.get_context("fork")
    for rank, (label, each) in enumerate([("forked child", None),
                                          ("forked child, set_num_threads(1)", 1),
                                          ("forked child, set_num_threads(2)", 2)]):
        done = ctx.Event()
        child = ctx.Process(target=double_and_sum, args=(rank, label, each, done))
        child.start()
        with events.span("main", "thread pool", child=label, threads=threads) as outcome:
            if done.wait(timeout=args.deadlock_after):
                child.join(timeout=args.timeout)
                say_main(f"{label}: finished, exit code {child.exitcode}")
                outcome["verdict"] = "finished"
            else:
                child.kill()
                child.join()
                say_main(f"{label}: still inside the operation after "
                         f"{args.deadlock_after:g} s: hung")
                outcome["verdict"] = "hung"
    return 0


# --- ranks: how the distributed chapters start their ranks ------------------------------


def rank_ready(rank: int, ready) -> None:
    """A rank's first line: say when it began to run."""
    ready.put((rank, time.time()))


def start_ranks(method: str, world_size: int, ready) -> mp.ProcessContext:
    """``world_size`` ranks as ``mp.spawn`` starts them (``"spawn"``), or as the book's
    workers start theirs (``"forkserver"``): forked from a server that imported torch."""
    if method == "forkserver":
        mp.get_context("forkserver").set_forkserver_preload(["torch", "torch.distributed"])
    return mp.start_processes(rank_ready, args=(ready,), nprocs=world_size, join=False,
                              start_method=method)


def demo_ranks(args, events: Events) -> int:
    for method in ["spawn", "forkserver"]:
        ready = mp.get_context(method).Queue()
        asked = time.time()
        ranks = start_ranks(method, args.processes, ready)
        began = {}
        try:
            for _ in range(args.processes):
                rank, when = ready.get(timeout=args.timeout)
                began[rank] = when
        except queue.Empty:
            for process in ranks.processes:
                process.kill()
            say_main(f"{method}: {args.processes - len(began)} rank(s) did not start "
                     f"within {args.timeout:g} s")
            return 1
        while not ranks.join(timeout=args.timeout):
            pass
        for rank, when in sorted(began.items()):
            events.emit(rank, "start to running", t=asked, t_end=when, method=method)
        last = max(began.values()) - asked
        say_main(f"{method:<10} {args.processes} ranks: every one running {last:.2f} s "
                 "after start_processes()")
    return 0


# --- cuda-fork: CUDA initialised in the parent, then fork -----------------------------


def use_cuda(rank: int, method: str) -> None:
    try:
        value = torch.ones(1, device="cuda") * 2
        name = torch.cuda.get_device_name()
        say(rank, f"{method:<10} child: CUDA works, got {value.item():g} from {name}")
    except RuntimeError as error:
        say(rank, f"{method:<10} child: RuntimeError: {error}")
        sys.exit(1)


def demo_cuda_fork(args, events: Events) -> int:
    if not torch.cuda.is_available():
        fail("cuda-fork needs a CUDA GPU, and torch.cuda.is_available() is False here")
    torch.ones(1, device="cuda")  # the parent initialises CUDA
    say_main(f"parent initialised CUDA on {torch.cuda.get_device_name()}")
    for rank, method in enumerate(["fork", "spawn"]):
        child = mp.get_context(method).Process(target=use_cuda, args=(rank, method))
        child.start()
        child.join(timeout=args.timeout)
        if child.is_alive():
            child.kill()
        say_main(f"{method:<10} child exited with code {child.exitcode}")
    return 0


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.start_methods",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    startup = demos.add_parser("startup", help="what a process costs to start, per method")
    inherit = demos.add_parser("inherit", help="what a child sees of its parent's state")
    context = demos.add_parser("context", help="set_start_method against get_context")
    threads = demos.add_parser("fork-with-threads", help="fork while a thread holds a lock")
    queues = demos.add_parser("queue-threads", help="which queues start a thread")
    pool = demos.add_parser("fork-thread-pool",
                            help="fork after PyTorch's intra-op threads ran")
    ranks = demos.add_parser("ranks", help="ranks started as mp.spawn and as the book does")
    cuda = demos.add_parser("cuda-fork", help="CUDA in the parent, then fork (needs a GPU)")
    for demo in (startup, inherit, threads):
        demo.add_argument(
            "--methods", nargs="+", choices=ALL_METHODS, default=ALL_METHODS,
            metavar="METHOD",
            help=f"start methods to compare, from {ALL_METHODS} (default: all)",
        )
    startup.add_argument(
        "--processes", type=positive_int, default=3,
        help="processes started, one at a time, per method (default 3)",
    )
    startup.add_argument(
        "--forkserver-preload", nargs="+", default=[], metavar="MODULE",
        help="modules the forkserver imports once, e.g. torch",
    )
    threads.add_argument(
        "--deadlock-after", type=positive_float, default=2.0, metavar="SECONDS",
        help="a child still waiting for the lock this long is deadlocked (default 2)",
    )
    pool.add_argument(
        "--deadlock-after", type=positive_float, default=2.0, metavar="SECONDS",
        help="a child still in its operation this long is hung (default 2)",
    )
    ranks.add_argument(
        "--processes", type=positive_int, default=4,
        help="ranks started by each method (default 4)",
    )
    for demo in (startup, inherit, context, threads, queues, pool, ranks, cuda):
        add_common_options(demo, timeout=30)
    return parser


DEMOS = {
    "startup": demo_startup,
    "inherit": demo_inherit,
    "context": demo_context,
    "fork-with-threads": demo_fork_with_threads,
    "queue-threads": demo_queue_threads,
    "fork-thread-pool": demo_fork_thread_pool,
    "ranks": demo_ranks,
    "cuda-fork": demo_cuda_fork,
}


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    if getattr(args, "processes", 1) > MOST_PROCESSES:
        parser.error(f"at most {MOST_PROCESSES} processes, got {args.processes}")
    events = open_events(args.events)
    return DEMOS[args.demo](args, events)


if __name__ == "__main__":
    exit_now(main())
