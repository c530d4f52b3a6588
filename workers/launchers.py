"""Launchers: what each one tells its processes.

    python -m workers.launchers environments --nproc 2

``environments`` starts the same small rank under mp.spawn, torchrun and the shell loop
(scripts/launch_local.sh), and every rank records the environment it was given. Started as
a rank (``RANK`` set, by torchrun or a script), it is that rank. Jobs on more than one
machine are ``workers.multi_node``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from workers.ranks import (
    REPOSITORY,
    Events,
    Parser,
    add_common_options,
    exit_now,
    open_events,
    positive_int,
    say,
    say_main,
    wait_for,
)

CONTRACT = ["RANK", "LOCAL_RANK", "WORLD_SIZE"]

# --- what a launcher tells its processes ---------------------------------------------


def report(local_rank: int, events_path: str | None, spawned: bool = True) -> None:
    """One rank: say what the launcher told it, and record its whole environment."""
    rank = int(os.environ.get("RANK", local_rank))  # mp.spawn: only its argument
    told = ", ".join(f"{name}={os.environ.get(name, '(unset)')}" for name in CONTRACT)
    say(rank, told + (f"; mp.spawn's argument {local_rank}" if spawned else ""))
    Events(events_path).emit(rank, "environment", variables=dict(os.environ))


def environments(args, events: Events) -> int:
    """The same rank under mp.spawn, torchrun and the shell loop, one after the other."""
    import torch.multiprocessing as mp

    os.environ["PYTHON"] = sys.executable  # the interpreter the shell loop is to use
    base = dict(os.environ)  # what every launcher is started with
    events.emit("main", "base", variables=base)
    rank_command = ["-m", "workers.launchers", "environments"]
    launchers = {
        "mp.spawn": None,
        "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone",
                     "--nproc-per-node", str(args.nproc), *rank_command],
        "shell loop": ["bash", str(REPOSITORY / "scripts/launch_local.sh"), str(args.nproc),
                       *rank_command[1:]],
    }
    for name, command in launchers.items():
        say_main(f"--- {name}")
        handle, recorded = tempfile.mkstemp(prefix="environments-", suffix=".jsonl")
        os.close(handle)
        try:
            if command is None:
                ranks = mp.spawn(report, args=(recorded,), nprocs=args.nproc, join=False)
                code = wait_for(ranks, args.timeout)
            else:
                code = subprocess.run([*command, "--events", recorded], env=base,
                                      timeout=args.timeout).returncode
            for line in Path(recorded).read_text().splitlines():  # tagged with the launcher
                record = json.loads(line)
                events.emit(record.pop("rank"), record.pop("event"), t=record.pop("t"),
                            launcher=name, **record)
        finally:
            os.unlink(recorded)
        if code:
            say_main(f"{name} ended with exit code {code}")
            return 1
    return 0


# --- command line -------------------------------------------------------------------


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.launchers",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    seen = demos.add_parser("environments",
                            help="the variables mp.spawn, torchrun and the shell loop set")
    seen.add_argument("--nproc", type=positive_int, default=2,
                      help="processes each launcher starts (default 2)")
    add_common_options(seen, timeout=60)
    return parser


def main(argv=None) -> int:
    args = command_line().parse_args(argv)
    events = open_events(args.events)
    if "RANK" in os.environ:  # started as a rank, by torchrun or the shell loop
        report(int(os.environ["LOCAL_RANK"]), args.events, spawned=False)
        return 0
    return environments(args, events)


if __name__ == "__main__":
    exit_now(main())
