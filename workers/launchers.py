"""Launching the data-parallel worker (workers.ddp_mnist) with mp.spawn, and as two "nodes".

    python -m workers.launchers spawn --world-size 2 --epochs 1 --train-images 800
    python -m workers.launchers two-nodes --nproc-per-node 2 --epochs 1 --train-images 800

Options this launcher does not know are the training worker's (those of
``python -m workers.ddp_mnist ddp``), and are handed to it. The chapter's other launchers
need no module of their own:

    torchrun --standalone --nproc-per-node 2 -m workers.ddp_mnist ddp --epochs 1
    scripts/launch_local.sh 2 workers.ddp_mnist ddp --epochs 1
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from workers import ddp_mnist
from workers.job import Job, job_from_args
from workers.mnist import prepare_mnist
from workers.ranks import (
    Parser,
    add_common_options,
    free_port,
    positive_int,
    say_main,
    wait_for,
)


def spawn(job: Job, training, timeout: float) -> int:
    """torch.multiprocessing.spawn: N fresh interpreters, each runs rank_main(rank, ...)."""
    import torch.multiprocessing as mp

    processes = mp.spawn(
        ddp_mnist.rank_main,  # called as rank_main(rank, *args) in every process
        args=(job, training, "ddp"),
        nprocs=job.world_size,
        join=False,  # join=True would wait without a time limit
    )
    return wait_for(processes, timeout)  # a rank fails: ProcessRaisedException, all stopped


def two_nodes(nproc_per_node: int, training_argv: list[str], timeout: float) -> int:
    """Two torchrun agents on this machine, each playing one node of a 2 x N job.

    On real machines each agent runs on its own node with the same --rdzv-endpoint (an
    address every node can reach) and --rdzv-id; here both use the loopback address.
    """
    endpoint = f"127.0.0.1:{free_port()}"
    agents = []
    for node in range(2):
        command = [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", "2",
            "--nproc-per-node", str(nproc_per_node),
            "--rdzv-backend", "c10d",
            "--rdzv-endpoint", endpoint,
            "--rdzv-id", "two-node-demo",
            "--rdzv-conf", f"join_timeout={int(timeout)}",
            "--local-addr", "127.0.0.1",
            "-m", "workers.ddp_mnist", "ddp", *training_argv,
        ]
        say_main(f"node {node}: " + " ".join(["torchrun", *command[3:]]))
        agents.append(subprocess.Popen(command, start_new_session=True))
    deadline = time.time() + timeout
    try:
        while any(agent.poll() is None for agent in agents):
            if time.time() > deadline:
                say_main(f"the job still ran after {timeout:g} s: stopping both nodes")
                return 1
            if any(agent.poll() not in (None, 0) for agent in agents):
                break  # one node failed: torchrun's other agent would wait for it
            time.sleep(0.2)
    finally:
        for agent in agents:  # nothing outlives the demo: each agent with its ranks
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGTERM)
        for agent in agents:
            try:
                agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
    codes = [agent.returncode for agent in agents]
    say_main(f"both nodes finished with exit codes {codes}")
    return 0 if codes == [0, 0] else 1


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.launchers",
                    description=__doc__.split("\n\n")[0],
                    epilog="Any other option is the training worker's: see "
                           "python -m workers.ddp_mnist ddp --help")
    launchers = parser.add_subparsers(dest="launcher", required=True, metavar="LAUNCHER")
    spawn_demo = launchers.add_parser("spawn", help="mp.spawn, one process per rank")
    nodes = launchers.add_parser("two-nodes", help="two torchrun agents as two nodes")
    spawn_demo.add_argument("--world-size", type=positive_int, default=2,
                            help="ranks (default 2)")
    nodes.add_argument("--nproc-per-node", type=positive_int, default=2,
                       help="ranks per node (default 2)")
    for demo in (spawn_demo, nodes):
        add_common_options(demo, timeout=120)
    return parser


def main(argv=None) -> int:
    args, training_argv = command_line().parse_known_args(argv)
    if args.events:  # the ranks record the events
        training_argv += ["--events", args.events]
    world_size = args.world_size if args.launcher == "spawn" else 2 * args.nproc_per_node
    training_argv = ["--world-size", str(world_size), "--timeout", str(args.timeout),
                     *training_argv]
    # The training worker checks its own options first: one clear line if one is wrong.
    ddp_parser = ddp_mnist.command_line()
    training = ddp_parser.parse_args(["ddp", *training_argv])
    job = job_from_args(ddp_parser, training)
    if training.batch_size % world_size:
        ddp_parser.error(f"--batch-size {training.batch_size} does not split evenly over "
                         f"{world_size} ranks")
    say_main(f"data: {prepare_mnist(training.data_root, training.download)}")
    if args.launcher == "spawn":
        say_main(f"mp.spawn: {world_size} processes")
        return spawn(job, training, timeout=args.timeout)
    return two_nodes(args.nproc_per_node, training_argv, timeout=args.timeout)


if __name__ == "__main__":
    sys.exit(main())
