"""More than one machine: one job on two "machines" of this one.

    python -m workers.multi_node spawn-nodes programs/ddp_mnist.py --nproc-per-node 2
    python -m workers.multi_node two-nodes --nproc-per-node 2

``spawn-nodes`` runs a program twice, as the two machines of an mp.spawn job
(``--nodes 2 --node-rank 0`` and ``1``): every machine spawns its own ranks, and the program
turns the node rank into global ranks. ``two-nodes`` starts two torchrun agents that meet
through a c10d rendezvous, each playing one node. Both use this machine's loopback address.
Started as a rank (``RANK`` set by torchrun), ``two-nodes`` is that rank. The Slurm run of
the same chapter is ``scripts/local_slurm.sh``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

from workers.ranks import (
    REPOSITORY,
    Events,
    Parser,
    add_common_options,
    exit_now,
    fail,
    free_port,
    open_events,
    positive_int,
    say,
    say_main,
    stop_with_its_launcher,
)


def node_rank(args, events: Events) -> None:
    """One rank of the two-node job: join it through torchrun's environment, all-reduce."""
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    stop_with_its_launcher(rank)
    events.emit(rank, "environment", variables=dict(os.environ))
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))  # env://
    ones = torch.ones(1)
    dist.all_reduce(ones)  # every rank of both nodes adds 1
    say(rank, f"node {os.environ['GROUP_RANK']}, local rank {os.environ['LOCAL_RANK']}: "
              f"rank {rank} of {dist.get_world_size()}; all_reduce of ones {ones.item():g}")
    dist.destroy_process_group()


def two_nodes(args) -> int:
    """Two torchrun agents on this machine, each playing one node of a 2 x N job.

    On real machines each agent runs on its own node with the same --rdzv-endpoint (an
    address every node can reach) and --rdzv-id; here both use the loopback address.
    """
    endpoint = f"127.0.0.1:{free_port()}"
    agent = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", "2",
        "--nproc-per-node", str(args.nproc_per_node),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", endpoint,
        "--rdzv-id", "two-node-demo",
        "--rdzv-conf", f"join_timeout={int(args.timeout)}",
        "--local-addr", "127.0.0.1",
        "-m", "workers.multi_node", "two-nodes",
    ]
    shown = agent[3:]  # from torchrun's options to the demo, without the book's own options
    agent += ["--timeout", str(args.timeout)]
    agent += ["--events", args.events] if args.events else []
    return run_nodes([agent, agent], args.timeout, shown=shown)


def spawn_nodes(args) -> int:
    """A program on two "machines": mp.spawn on each, one address."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": os.environ.get("MASTER_PORT", str(free_port()))}
    # as a reader's shell runs it: unbuffered, a print writes its text and its newline
    # apart, and four ranks sharing one pipe can interleave them mid-line
    env.pop("PYTHONUNBUFFERED", None)
    # the two "machines" share this one's cores: one thread per rank, as torchrun would set
    # (unless you set OMP_NUM_THREADS yourself), not torch's default of one per core each
    env.setdefault("OMP_NUM_THREADS", "1")
    program = [sys.executable, args.program, "--nodes", "2",
               "--nproc-per-node", str(args.nproc_per_node)]
    machines = [[*program, "--node-rank", str(node)] for node in range(2)]
    return run_nodes(machines, args.timeout, env=env)


def run_nodes(commands: list[list[str]], timeout: float, env=None, shown=None) -> int:
    """Start one process per "node", wait for all; one failing or the timeout stops all."""
    nodes = []
    for node, command in enumerate(commands):
        words = shown if shown is not None else command[1:]
        program = "torchrun" if shown is not None else "python"
        say_main(f"node {node}: " + " ".join([program, *words]))
        nodes.append(subprocess.Popen(command, cwd=REPOSITORY, env=env,
                                      start_new_session=True))
    deadline = time.time() + timeout
    try:
        while any(node.poll() is None for node in nodes):
            if time.time() > deadline:
                say_main(f"the job still ran after {timeout:g} s: stopping both nodes")
                return 1
            if any(node.poll() not in (None, 0) for node in nodes):
                break  # one node failed: the other would wait for it
            time.sleep(0.2)
    finally:
        for node in nodes:  # nothing outlives the demo: each node with its ranks
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGTERM)
        for node in nodes:
            try:
                node.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait()
    codes = [node.returncode for node in nodes]
    say_main(f"both nodes finished with exit codes {codes}")
    return 0 if codes == [0, 0] else 1


# --- command line -------------------------------------------------------------------


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.multi_node",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    spawned = demos.add_parser(
        "spawn-nodes", help="a program that starts its ranks with mp.spawn, on two nodes")
    spawned.add_argument("program", nargs="?", default="programs/ddp_mnist.py",
                         help="the program, from the clone's root, with the node options "
                              "of the default, programs/ddp_mnist.py")
    nodes = demos.add_parser("two-nodes", help="two torchrun agents as two nodes")
    for demo in (spawned, nodes):
        demo.add_argument("--nproc-per-node", type=positive_int, default=2,
                          help="ranks per node (default 2)")
        add_common_options(demo, timeout=120)  # a "machine": a whole torch job starting
    return parser


def main(argv=None) -> int:
    args = command_line().parse_args(argv)
    events = open_events(args.events)
    if args.demo == "two-nodes":
        if "RANK" in os.environ:
            node_rank(args, events)
            return 0
        return two_nodes(args)
    if not (REPOSITORY / args.program).is_file():
        fail(f"no program {args.program} in {REPOSITORY}")
    return spawn_nodes(args)


if __name__ == "__main__":
    exit_now(main())
