"""Launching the data-parallel worker (workers.ddp_mnist) with mp.spawn, and as two "nodes".

    python -m workers.launchers spawn --world-size 2 --epochs 1 --steps-per-epoch 20
    python -m workers.launchers two-nodes --nproc-per-node 2 --epochs 1 --steps-per-epoch 20

Options this launcher does not know are the training worker's, and are handed to it. The
other launchers of the chapter need no module of their own:

    torchrun --standalone --nproc-per-node 2 -m workers.ddp_mnist --epochs 1
    scripts/launch_local.sh 2 workers.ddp_mnist --epochs 1
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from workers import ddp_mnist
from workers.mnist import prepare_mnist
from workers.ranks import (
    Parser,
    add_common_options,
    positive_int,
    say_main,
    wait_for,
)
from workers.runner import free_port


def spawn(world_size: int, training, timeout: float) -> int:
    """torch.multiprocessing.spawn: N fresh interpreters, each calling rank_main(rank, ...)."""
    import torch.multiprocessing as mp

    port = free_port()
    processes = mp.spawn(
        ddp_mnist.rank_main,  # called as rank_main(rank, *args) in every process
        args=(world_size, training, "127.0.0.1", port),
        nprocs=world_size,
        join=False,  # join=True would wait without a time limit
    )
    return wait_for(
        processes, timeout
    )  # a failed rank: ProcessRaisedException, others stopped


def two_nodes(nproc_per_node: int, training_argv: list[str], timeout: float) -> int:
    """Two torchrun agents on this machine, each playing one node of a 2 x N job.

    On real machines each agent runs on its own node with the same --rdzv-endpoint (an address
    every node can reach) and --rdzv-id; here both use the loopback address.
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
            "-m", "workers.ddp_mnist", *training_argv,
        ]  # fmt: skip
        say_main(f"node {node}: " + " ".join(["torchrun", *command[3:]]))
        agents.append(subprocess.Popen(command, start_new_session=True))
    deadline = time.time() + timeout
    try:
        while any(agent.poll() is None for agent in agents):
            if time.time() > deadline:
                say_main(
                    f"the job was still running after {timeout:g} s: stopping both nodes"
                )
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


def main(argv=None) -> int:
    parser = Parser(
        prog="python -m workers.launchers", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("launcher", choices=["spawn", "two-nodes"])
    parser.add_argument("--world-size", type=positive_int, default=2,
                        help="spawn: ranks (default 2)")  # fmt: skip
    parser.add_argument("--nproc-per-node", type=positive_int, default=2,
                        help="two-nodes: ranks per node (default 2)")  # fmt: skip
    add_common_options(parser, timeout=120)
    args, training_argv = parser.parse_known_args(argv)
    if args.events:  # the ranks record the events
        training_argv += ["--events", args.events]
    if args.launcher == "spawn":
        training = ddp_mnist.parse_args(
            [
                "--world-size",
                str(args.world_size),
                "--timeout",
                str(args.timeout),
                *training_argv,
            ]
        )  # the worker checks its own options: one clear line if one is wrong
        say_main(f"data: {prepare_mnist(training.data_root, training.download)}")
        say_main(f"mp.spawn: {args.world_size} processes")
        return spawn(args.world_size, training, timeout=args.timeout)
    world_size = 2 * args.nproc_per_node
    ddp_mnist.parse_args(
        ["--world-size", str(world_size), *training_argv]
    )  # check first
    say_main(f"data: {prepare_mnist(ddp_mnist.DEFAULT_DATA_ROOT)}")
    return two_nodes(args.nproc_per_node, training_argv, timeout=args.timeout)


if __name__ == "__main__":
    sys.exit(main())
