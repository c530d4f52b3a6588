"""Processes: start and join.

    python -m workers.start_join join --processes 3
    python -m workers.start_join no-join
    python -m workers.start_join daemon
    python -m workers.start_join exit-codes

Each child "works" by sleeping; the first child started works longest, so the order in
which children finish need not be the order in which they started.
"""

from __future__ import annotations

import os
import sys
import time

import torch.multiprocessing as mp

from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    open_events,
    positive_float,
    positive_int,
    say,
    say_main,
)


def work(rank: int, seconds: float, events: Events, started=None) -> None:
    """What every child runs: say hello, work for ``seconds``, say goodbye."""
    begin = time.time()
    say(rank, f"started (pid {os.getpid()}), working for {seconds:.1f} s")
    if started is not None:
        started.wait()  # tells the parent this child is running (the daemon demo)
    time.sleep(seconds)
    say(rank, "finished")
    events.emit(rank, "child working", t=begin, t_end=time.time())


def start_children(
    ctx, processes: int, step: float, events: Events, daemon: bool = False, started=None
):
    children = []
    for rank in range(processes):
        seconds = step * (processes - rank)  # the first one started works longest
        child = ctx.Process(
            target=work, args=(rank, seconds, events, started), daemon=daemon
        )
        events.emit("main", "start()", child=rank)
        child.start()
        children.append(child)
    return children


def demo_join(ctx, args, events: Events) -> int:
    children = start_children(ctx, args.processes, args.step, events)
    alive = [child.is_alive() for child in children]
    say_main(f"started {len(children)} children; is_alive() = {alive}")
    for rank, child in enumerate(children):
        begin = time.time()
        # join() returns when the child has exited, or at the timeout
        child.join(timeout=args.timeout)
        events.emit("main", "join()", t=begin, t_end=time.time(), child=rank)
        if child.is_alive():
            say_main(
                f"child {rank} still running after {args.timeout:g} s: terminating all"
            )
            for other in children:
                other.terminate()
            return 1
        waited = time.time() - begin
        say_main(
            f"join() on child {rank} returned after {waited:.2f} s: "
            f"exitcode {child.exitcode}"
        )
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
    # (multiprocessing joins them in an exit hook): the run lasts as long as the
    # slowest child.
    return 0


def demo_daemon(ctx, args, events: Events) -> int:
    started = ctx.Barrier(args.processes + 1)
    start_children(ctx, args.processes, args.step, events, daemon=True, started=started)
    started.wait(timeout=args.timeout)  # every child has printed its first line
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
    children = [
        ctx.Process(target=target, args=target_args)
        for _, target, target_args in endings
    ]
    for child in children:
        child.start()
    for (how, _, _), child in zip(endings, children):
        if how.startswith("terminate"):
            time.sleep(args.step)  # let it start before it is stopped
            child.terminate()  # sends SIGTERM
        child.join(timeout=args.timeout)
        if child.is_alive():
            child.kill()
            say_main(
                f"a child ending by {how} was still running after {args.timeout:g} s"
            )
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


DEMOS = {
    "join": demo_join,
    "no-join": demo_no_join,
    "daemon": demo_daemon,
    "exit-codes": demo_exit_codes,
    "fail": demo_fail,
}


def parse_args(argv=None):
    parser = Parser(
        prog="python -m workers.start_join", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("demo", choices=DEMOS, help="which behaviour to show")
    parser.add_argument(
        "--processes",
        type=positive_int,
        default=3,
        help="children to start (default 3)",
    )
    parser.add_argument(
        "--step",
        type=positive_float,
        default=0.5,
        metavar="SECONDS",
        help="child i works (processes - i) * step seconds (default 0.5)",
    )
    parser.add_argument(
        "--start-method",
        choices=mp.get_all_start_methods(),
        default="spawn",
        help="how children are started (default spawn: the same on every OS)",
    )
    add_common_options(parser, timeout=30)
    args = parser.parse_args(argv)
    if args.processes > 64:
        parser.error(f"argument --processes: at most 64 children, got {args.processes}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    events = open_events(args.events)
    ctx = mp.get_context(args.start_method)
    return DEMOS[args.demo](ctx, args, events)


if __name__ == "__main__":
    sys.exit(main())
