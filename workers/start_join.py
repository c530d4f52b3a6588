"""Processes: start and join.

    python -m workers.start_join join --processes 3
    python -m workers.start_join no-join
    python -m workers.start_join daemon
    python -m workers.start_join exit-codes
    python -m workers.start_join fail
    python -m workers.start_join first-failure
    python -m workers.start_join threads-or-processes
    python -m workers.start_join orphans --daemon --kill-parent TERM

Each child "works" by sleeping; the first child started works longest, so the order in
which children finish need not be the order in which they started.

Nothing here touches a tensor, so this module uses Python's own ``multiprocessing``;
``torch.multiprocessing`` is a drop-in replacement that behaves the same for all of it (what
it adds, tensors in shared memory, is the Hogwild chapter's subject). Without PyTorch to
import, a spawned child starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import multiprocessing.connection
import os
import platform
import queue
import signal
import subprocess
import sys
import sysconfig
import threading
import time

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


def work(rank: int, seconds: float, events: Events) -> None:
    """What every child runs: say hello, work for ``seconds``, say goodbye."""
    say(rank, f"started (pid {os.getpid()}), working for {seconds:.1f} s")
    with events.span(rank, "child working"):
        time.sleep(seconds)
    say(rank, "finished")


def start_children(ctx, processes: int, step: float, events: Events):
    children = []
    for rank in range(processes):
        seconds = step * (processes - rank)  # the first one started works longest
        child = ctx.Process(target=work, args=(rank, seconds, events))
        events.emit("main", "start()", child=rank)
        child.start()
        children.append(child)
    return children


def demo_join(ctx, args, events: Events) -> int:
    children = start_children(ctx, args.processes, args.step, events)
    alive = [child.is_alive() for child in children]
    say_main(f"started {len(children)} children; is_alive() = {alive}")
    for rank, child in enumerate(children):
        with events.span("main", "join()", child=rank):
            child.join(timeout=args.timeout)  # returns once the child exits, or at timeout
        if child.is_alive():
            say_main(f"child {rank} still running after {args.timeout:g} s: stopping all")
            for other in children:
                other.terminate()
            return 1
        say_main(f"join() on child {rank} returned: exitcode {child.exitcode}")
    failed = [rank for rank, child in enumerate(children) if child.exitcode != 0]
    if failed:
        say_main(f"children {failed} failed")
        return 1
    say_main("every child has exited: this line always comes last")
    return 0


def count_up(millions: float) -> int:
    """CPU-bound Python: add up the first ``millions`` million whole numbers."""
    total = 0
    for number in range(int(millions * 1_000_000)):
        total += number
    return total


def count_when_ready(millions: float, ready, cpu_seconds) -> None:
    """``count_up`` once every worker is up, reporting the CPU time it took."""
    ready.wait()
    began = time.thread_time()  # this thread's CPU time (a process's only thread)
    count_up(millions)
    cpu_seconds.put(time.thread_time() - began)


def gil_enabled() -> bool:
    """Whether this interpreter runs with its global lock: always before Python 3.13, and in
    CPython's standard build; in the free-threaded build (3.13t and later) only when
    ``PYTHON_GIL=1`` or a module that needs it turned it back on."""
    return getattr(sys, "_is_gil_enabled", lambda: True)()


def demo_threads_or_processes(ctx, args, events: Events) -> int:
    """The same CPU-bound work in ``--workers`` threads, then in as many processes."""
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    say_main(f"Python {platform.python_version()}, "
             f"{'free-threaded' if free_threaded else 'standard'} build: "
             f"the GIL is {'on' if gil_enabled() else 'off'}")
    for repeat in range(args.repeats):
        for kind in ("threads", "processes"):
            if kind == "threads":
                make, ready, cpu = threading.Thread, threading.Barrier, queue.SimpleQueue()
            else:
                make, ready, cpu = ctx.Process, ctx.Barrier, ctx.SimpleQueue()
            ready = ready(args.workers + 1)
            workers = [make(target=count_when_ready, args=(args.millions, ready, cpu))
                       for _ in range(args.workers)]
            for worker in workers:
                worker.start()
            ready.wait(timeout=args.timeout)  # every worker is up: the clock starts
            began = time.time()
            for worker in workers:
                worker.join(timeout=args.timeout)
            seconds = time.time() - began
            cores = sum(cpu.get() for _ in workers) / seconds
            say_main(f"{args.workers} {kind:<9} (repeat {repeat}): {seconds:.2f} s, "
                     f"CPU time / wall time {cores:.2f}")
            events.emit("main", "counted", t=began, t_end=began + seconds, kind=kind,
                        repeat=repeat, workers=args.workers, cores=cores, gil=gil_enabled(),
                        free_threaded=free_threaded, python=platform.python_version())
    return 0


def demo_no_join(ctx, args, events: Events) -> int:
    start_children(ctx, args.processes, args.step, events)
    say_main("not joining: the parent's code ends here, so this line comes first")
    events.emit("main", "parent's code done")
    return 0  # and Python's exit hook joins the children before the process ends


def parent_exit_watched(argv: list[str], args, events: Events) -> int:
    """Run the demo's parent in a process of its own and record when that process exits:
    what the parent's exit hook does is visible only from outside the parent."""
    command = [sys.executable, "-m", "workers.start_join", *argv, "--as-parent"]
    parent = subprocess.Popen(command)
    try:
        code = parent.wait(timeout=args.timeout)
    finally:
        if parent.poll() is None:
            parent.kill()
    say_main(f"the parent's process (pid {parent.pid}) has exited, with code {code}")
    events.emit("main", "parent exited", code=code)
    return code


def work_as_daemon(rank: int, seconds: float, events: Events, running) -> None:
    """``work``, telling the parent once it has started: the daemon demo waits for that."""
    say(rank, f"started (pid {os.getpid()}), working for {seconds:.1f} s")
    running.release()
    time.sleep(seconds)
    say(rank, "finished")  # a daemon child never gets here: its parent leaves first


def demo_daemon(ctx, args, events: Events) -> int:
    running = ctx.Semaphore(0)
    for rank in range(args.processes):
        child_args = (rank, args.seconds, events, running)
        ctx.Process(target=work_as_daemon, args=child_args, daemon=True).start()
    for _ in range(args.processes):
        running.acquire(timeout=args.timeout)  # wait until every child is at work
    say_main("daemon children are running; the parent exits now without join()")
    events.emit("main", "parent's code done")
    # At exit multiprocessing terminates daemon children: none prints "finished".
    return 0


def end_normally() -> None:
    say(0, "returning normally")


def end_with_sys_exit() -> None:
    say(1, "calling sys.exit(3)")
    sys.exit(3)


def end_with_exception() -> None:
    say(2, "raising ValueError")
    raise ValueError("rank 2 failed on purpose")


def end_with_message() -> None:
    say(4, 'calling sys.exit("a message")')
    sys.exit("a message")  # printed on stderr; the exit code is 1, as for an exception


def wait_to_be_terminated(seconds: float) -> None:
    say(3, "sleeping until the parent terminates me")
    time.sleep(seconds)


def demo_exit_codes(ctx, args, events: Events) -> int:
    endings = [
        ("return", end_normally, ()),
        ("sys.exit(3)", end_with_sys_exit, ()),
        ("uncaught exception", end_with_exception, ()),
        ("terminate() by the parent", wait_to_be_terminated, (args.timeout,)),
        ('sys.exit("a message")', end_with_message, ()),
    ]
    children = [ctx.Process(target=target, args=extra) for _, target, extra in endings]
    for child in children:
        child.start()
    for (how, _, _), child in zip(endings, children):
        if how.startswith("terminate"):
            time.sleep(0.5)  # let it start before it is stopped
            child.terminate()  # sends SIGTERM
        child.join(timeout=args.timeout)
        if child.is_alive():
            child.kill()
            say_main(f"a child ending by {how} was still running after {args.timeout:g} s")
            return 1
        say_main(f"{how:<26} -> exitcode {child.exitcode}")
        events.emit("main", "exitcode", how=how, exitcode=child.exitcode)
    return 0


def demo_fail(ctx, args, events: Events) -> int:
    """One child raises; the parent reports it and exits with code 1, as it should."""
    child = ctx.Process(target=end_with_exception)
    child.start()
    child.join(timeout=args.timeout)
    say_main(f"the child exited with code {child.exitcode}")
    return 1 if child.exitcode != 0 else 0


def fail_at_once(rank: int) -> None:
    say(rank, "raising ValueError at once")
    raise ValueError(f"rank {rank} failed on purpose")


def demo_first_failure(ctx, args, events: Events) -> int:
    """Wait on every child at once: the first one that fails, whichever it is, stops the
    others (as ``mp.spawn`` does); joining them in turn would wait for child 0 first."""
    children = start_children(ctx, args.processes - 1, args.step, events)
    children.append(ctx.Process(target=fail_at_once, args=(len(children),)))
    children[-1].start()
    began = time.time()
    running = list(children)
    while running:
        left = began + args.timeout - time.time()
        ended = multiprocessing.connection.wait([c.sentinel for c in running], max(left, 0))
        if not ended:
            say_main(f"children still running after {args.timeout:g} s: stopping them")
            for child in running:
                child.kill()
            return 1
        for child in [c for c in running if c.sentinel in ended]:
            child.join()
            running.remove(child)
            if child.exitcode != 0:
                others = [children.index(c) for c in running]
                say_main(f"child {children.index(child)} exited with code "
                         f"{child.exitcode} {time.time() - began:.2f} s after the last "
                         f"start(); still running: {others}, stopped now")
                for other in running:
                    other.terminate()
                    other.join(timeout=args.timeout)
                return 1
    say_main("every child exited with code 0")
    return 0


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.start_join",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    join = demos.add_parser("join", help="start children, then join each of them")
    no_join = demos.add_parser("no-join", help="start children and never join them")
    daemon = demos.add_parser("daemon", help="daemon children, stopped as the parent exits")
    exit_codes = demos.add_parser("exit-codes",
                                  help="the ways a child ends, and their codes")
    fail = demos.add_parser("fail", help="a child raises; the parent notices and fails")
    first = demos.add_parser(
        "first-failure", help="wait on every child at once; the first failure stops all")
    cpu = demos.add_parser("threads-or-processes",
                           help="CPU-bound Python in threads, then in processes")
    orphans = demos.add_parser("orphans", help="two children that sleep for --timeout")
    for demo in (join, no_join, daemon, first):
        demo.add_argument("--processes", type=positive_int, default=3,
                          help="children to start (default 3)")
    for demo in (join, no_join, first):
        demo.add_argument(
            "--step", type=positive_float, default=0.5, metavar="SECONDS",
            help="child i works (processes - i) * step seconds (default 0.5)",
        )
    no_join.add_argument("--as-parent", action="store_true", help=argparse.SUPPRESS)
    daemon.add_argument("--seconds", type=positive_float, default=5,
                        help="how long each child works (default 5)")
    cpu.add_argument("--workers", type=positive_int, default=2,
                     help="threads, then processes, each counting (default 2)")
    cpu.add_argument("--millions", type=positive_float, default=5,
                     help="each worker adds up this many million numbers (default 5)")
    cpu.add_argument("--repeats", type=positive_int, default=3,
                     help="times each kind is measured (default 3)")
    orphans.add_argument("--daemon", action="store_true",
                         help="start the children with daemon=True")
    orphans.add_argument(
        "--kill-parent", choices=["TERM", "KILL"],
        help="run the parent as a process of its own, send it SIGTERM or SIGKILL, and "
             "look for its children",
    )
    for demo in (join, no_join, daemon, exit_codes, fail, first, cpu, orphans):
        demo.add_argument(
            "--start-method", choices=mp.get_all_start_methods(), default="spawn",
            help="how children are started (default spawn: the same on every OS)",
        )
        add_common_options(demo, timeout=30)
    return parser


def sleeper(seconds: float) -> None:
    time.sleep(seconds)


def demo_orphans(ctx, args, events: Events) -> int:
    """Start two children, report their pids, then wait for them (``--kill-parent`` kills
    this parent from outside, and the children live on)."""
    children = [ctx.Process(target=sleeper, args=(args.timeout,), daemon=args.daemon)
                for _ in range(2)]
    for child in children:
        child.start()
    pids = [child.pid for child in children]
    kind = "daemon children" if args.daemon else "children"
    say_main(f"parent {os.getpid()} started {kind} {pids}")
    events.emit("main", "children", parent=os.getpid(), children=pids)
    for child in children:
        child.join()  # no timeout, on purpose: the parent is meant to be killed here
    return 0


def still_running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie nobody has reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rpartition(")")[2].split()[1])


def kill_the_parent(args, events: Events) -> int:
    """What a scheduler or the out-of-memory killer does to a job's parent, from outside:
    start the orphans demo's parent, signal it, and look for its children."""
    command = [sys.executable, "-m", "workers.start_join", "orphans",
               "--start-method", args.start_method, "--timeout", "60",
               *(["--daemon"] if args.daemon else [])]
    parent = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    first = parent.stdout.readline()  # "[main] parent P started children [A, B]"
    if not first:
        fail(f"the parent exited with {parent.wait()} before starting its children", 1)
    sys.stdout.write(first)
    sys.stdout.flush()
    children = [int(pid) for pid in first.rpartition("[")[2].strip("]\n").split(",")]
    number = signal.Signals[f"SIG{args.kill_parent}"]
    parent.send_signal(number)
    code = parent.wait(timeout=args.timeout)
    time.sleep(0.5)  # time for a child that was told to go, to be gone
    alive = [pid for pid in children if still_running(pid)]
    say_main(f"sent {number.name} to the parent: it exited with {code}; its children "
             f"still running: {alive}, now children of {[parent_of(p) for p in alive]}")
    events.emit("main", "orphans", signal=number.name, daemon=args.daemon, code=code,
                children=children, alive=alive)
    for pid in alive:  # find them by pid, and stop them: TERM first, KILL if they ignore it
        os.kill(pid, signal.SIGTERM)
    deadline = time.time() + 5
    while any(still_running(pid) for pid in alive) and time.time() < deadline:
        time.sleep(0.05)
    for pid in filter(still_running, alive):
        os.kill(pid, signal.SIGKILL)
    left = [pid for pid in alive if still_running(pid)]
    say_main(f"stopped them by pid; still running: {left}")
    return 0


DEMOS = {
    "join": demo_join,
    "no-join": demo_no_join,
    "daemon": demo_daemon,
    "exit-codes": demo_exit_codes,
    "fail": demo_fail,
    "first-failure": demo_first_failure,
    "threads-or-processes": demo_threads_or_processes,
    "orphans": demo_orphans,
}


def main(argv=None) -> int:
    parser = command_line()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    most = max(getattr(args, "processes", 1), getattr(args, "workers", 1))
    if most > MOST_PROCESSES:
        parser.error(f"at most {MOST_PROCESSES} children, got {most}")
    events = open_events(args.events)
    if args.demo == "no-join" and not args.as_parent:
        return parent_exit_watched(argv, args, events)
    if args.demo == "orphans" and args.kill_parent:
        return kill_the_parent(args, events)
    ctx = mp.get_context(args.start_method)
    return DEMOS[args.demo](ctx, args, events)


if __name__ == "__main__":
    exit_now(main())
