"""Processes: start and join.

    python -m workers.start_join join --processes 3
    python -m workers.start_join no-join
    python -m workers.start_join daemon
    python -m workers.start_join exit-codes
    python -m workers.start_join fail
    python -m workers.start_join orphans

Each child "works" by sleeping; the first child started works longest, so the order in
which children finish need not be the order in which they started.

Nothing here touches a tensor, so this module uses Python's own ``multiprocessing``;
``torch.multiprocessing`` is a drop-in replacement that behaves the same for all of it (what
it adds, tensors in shared memory, is the Hogwild chapter's subject). Without PyTorch to
import, a spawned child starts in a fraction of a second.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time

from workers.ranks import (
    MOST_PROCESSES,
    Events,
    Parser,
    add_common_options,
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


def demo_no_join(ctx, args, events: Events) -> int:
    start_children(ctx, args.processes, args.step, events)
    say_main("not joining: the parent goes on at once, so this line comes first")
    events.emit("main", "parent's code done")
    # Python still waits for non-daemon children when the parent's interpreter exits
    # (multiprocessing joins them in an exit hook): the run lasts as long as the slowest.
    return 0


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


def wait_to_be_terminated(seconds: float) -> None:
    say(3, "sleeping until the parent terminates me")
    time.sleep(seconds)


def demo_exit_codes(ctx, args, events: Events) -> int:
    endings = [
        ("return", end_normally, ()),
        ("sys.exit(3)", end_with_sys_exit, ()),
        ("uncaught exception", end_with_exception, ()),
        ("terminate() by the parent", wait_to_be_terminated, (args.timeout,)),
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


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.start_join",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    join = demos.add_parser("join", help="start children, then join each of them")
    no_join = demos.add_parser("no-join", help="start children and never join them")
    daemon = demos.add_parser("daemon", help="daemon children, stopped as the parent exits")
    exit_codes = demos.add_parser("exit-codes", help="four ways a child ends, four codes")
    fail = demos.add_parser("fail", help="a child raises; the parent notices and fails")
    orphans = demos.add_parser("orphans", help="two children that sleep for --timeout")
    for demo in (join, no_join, daemon):
        demo.add_argument("--processes", type=positive_int, default=3,
                          help="children to start (default 3)")
    for demo in (join, no_join):
        demo.add_argument(
            "--step", type=positive_float, default=0.5, metavar="SECONDS",
            help="child i works (processes - i) * step seconds (default 0.5)",
        )
    daemon.add_argument("--seconds", type=positive_float, default=5,
                        help="how long each child works (default 5)")
    for demo in (join, no_join, daemon, exit_codes, fail, orphans):
        demo.add_argument(
            "--start-method", choices=mp.get_all_start_methods(), default="spawn",
            help="how children are started (default spawn: the same on every OS)",
        )
        add_common_options(demo, timeout=30)
    return parser


def sleeper(seconds: float) -> None:
    time.sleep(seconds)


def demo_orphans(ctx, args, events: Events) -> int:
    """Start two children, report their pids, then wait; the failures chapter kills only
    this parent, and the children live on."""
    children = [ctx.Process(target=sleeper, args=(args.timeout,)) for _ in range(2)]
    for child in children:
        child.start()
    pids = [child.pid for child in children]
    say_main(f"parent {os.getpid()} started children {pids}")
    events.emit("main", "children", parent=os.getpid(), children=pids)
    for child in children:
        child.join()
    return 0


DEMOS = {
    "join": demo_join,
    "no-join": demo_no_join,
    "daemon": demo_daemon,
    "exit-codes": demo_exit_codes,
    "fail": demo_fail,
    "orphans": demo_orphans,
}


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    if getattr(args, "processes", 1) > MOST_PROCESSES:
        parser.error(f"at most {MOST_PROCESSES} children, got {args.processes}")
    events = open_events(args.events)
    ctx = mp.get_context(args.start_method)
    return DEMOS[args.demo](ctx, args, events)


if __name__ == "__main__":
    sys.exit(main())
