"""When things go wrong: crashed ranks, timeouts, mismatched collectives, uneven inputs,
elastic restarts and leftover processes, each bounded by a timeout.

    python -m workers.failures crash --launcher process|spawn
    torchrun --standalone --nproc-per-node 2 -m workers.failures crash
    python -m workers.failures timeout [--monitored]
    TORCH_DISTRIBUTED_DEBUG=DETAIL python -m workers.failures mismatch
    python -m workers.failures uneven [--join]
    torchrun --standalone --nproc-per-node 2 --max-restarts 1 -m workers.failures elastic --checkpoint-dir DIR
    python -m workers.failures orphans

Every scenario runs two ranks on gloo; --timeout bounds each collective and the whole job.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn import functional as F

from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    first_line,
    from_torchrun,
    launch,
    open_events,
    positive_float,
    positive_int,
    say,
    say_main,
    wait_for,
)
from workers.runner import free_port

WORLD_SIZE = 2

# --- a crashed rank --------------------------------------------------------------------------


def crash(rank: int, group, events: Events, crash_at: int) -> None:
    """All-reduce in a loop; rank 1 raises at step ``crash_at``."""
    for step in range(100):
        if rank == 1 and step == crash_at:
            events.emit(rank, "crash", step=step)
            raise RuntimeError(f"rank 1 failed on purpose at step {step}")
        try:
            dist.all_reduce(torch.ones(1), group=group)
        except RuntimeError as error:  # the peer is gone: gloo sees the closed socket
            say(rank, f"step {step}: all_reduce failed: {first_line(error)}")
            events.emit(rank, "peer error", step=step, error=first_line(error))
            raise SystemExit(1) from None
        time.sleep(0.05)


def crash_with_bare_processes(args, events: Events, port: int) -> int:
    """multiprocessing.Process and join(): nobody stops the survivors for you."""
    import torch.multiprocessing as mp

    context = mp.get_context("forkserver")
    ranks = [context.Process(target=rank_main, args=(rank, args, "127.0.0.1", port))
             for rank in range(WORLD_SIZE)]  # fmt: skip
    for process in ranks:
        process.start()
    deadline = time.time() + args.timeout
    for process in ranks:  # join each with what is left of the deadline
        process.join(max(0.0, deadline - time.time()))
    codes = [process.exitcode for process in ranks]
    for process in ranks:
        if process.is_alive():  # a survivor still blocked: only our deadline ends it
            process.kill()
            process.join()
    say_main(f"exit codes {codes} (None: still running at the deadline, then killed)")
    return 0 if codes == [0, 0] else 1


def crash_with_spawn(args, events: Events, port: int) -> int:
    """mp.spawn: the first failure terminates the others and raises ProcessRaisedException."""
    import torch.multiprocessing as mp

    ranks = mp.spawn(
        rank_main, args=(args, "127.0.0.1", port), nprocs=WORLD_SIZE, join=False
    )
    return wait_for(ranks, args.timeout)


# --- timeouts and mismatched collectives ---------------------------------------------------


def never_arrives(
    rank: int, group, events: Events, monitored: bool, timeout: float
) -> None:
    """Rank 1 never calls the collective; rank 0 waits until its timeout."""
    if rank == 1:
        time.sleep(timeout + 2)  # busy elsewhere, or stuck, for longer than the timeout
        return
    begin = time.time()
    try:
        if monitored:  # gloo only: says *which* rank did not arrive
            dist.monitored_barrier(group=group, timeout=timedelta(seconds=timeout))
        else:
            dist.all_reduce(torch.ones(1), group=group)
    except RuntimeError as error:
        say(rank, f"gave up after {time.time() - begin:.1f} s: {first_line(error)}")
        events.emit(
            rank, "timed out", seconds=time.time() - begin, error=first_line(error)
        )
        raise SystemExit(1) from None


def mismatch(rank: int, group, events: Events) -> None:
    """Rank 0 calls all_reduce, rank 1 broadcast: the collectives do not match."""
    begin = time.time()
    try:
        if rank == 0:
            dist.all_reduce(torch.ones(4), group=group)
        else:
            dist.broadcast(torch.ones(4), src=0, group=group)
    except RuntimeError as error:
        say(rank, f"after {time.time() - begin:.1f} s: {first_line(error)[:400]}")
        events.emit(
            rank, "mismatch", seconds=time.time() - begin, error=first_line(error)
        )
        raise SystemExit(1) from None
    say(rank, "no error: the mismatch went unnoticed")


# --- uneven inputs -------------------------------------------------------------------------


def uneven(rank: int, group, events: Events, use_join: bool) -> None:
    """Rank 1 has one batch more than rank 0. DDP's backward all-reduces on every rank."""
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1), process_group=group)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [torch.randn(4, 8) for _ in range(5 + rank)]  # 5 on rank 0, 6 on rank 1
    begin = time.time()
    steps = 0
    try:
        with Join(
            [model], enable=use_join
        ):  # ranks that run out shadow the others' all-reduces
            for batch in batches:
                optimizer.zero_grad()
                model(batch).pow(2).mean().backward()
                optimizer.step()
                steps += 1
        dist.barrier(
            group=group
        )  # after training, e.g. before rank 0 saves a checkpoint
    except RuntimeError as error:
        say(
            rank,
            f"after {steps} steps, stuck for {time.time() - begin:.1f} s: {first_line(error)}",
        )
        events.emit(rank, "uneven", steps=steps, error=first_line(error))
        raise SystemExit(1) from None
    say(rank, f"finished all {steps} of its batches")
    events.emit(rank, "uneven", steps=steps, error=None)


# --- elastic restart -------------------------------------------------------------------------


def elastic(rank: int, events: Events, args) -> None:
    """DDP training that checkpoints every K steps and resumes from the last checkpoint.

    Under ``torchrun --max-restarts 1``, rank 1 crashes once at --crash-at-step; the agent then
    stops the other rank and starts both again (TORCHELASTIC_RESTART_COUNT becomes 1), and the
    new workers carry on from the checkpoint. Each step's batch is a function of the step
    number only, so a resumed run computes exactly what an uninterrupted one does.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    from workers.mnist import MnistNet, mnist_tensors

    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    (images, labels), _ = mnist_tensors(args.data_root)
    torch.manual_seed(0)
    model = DDP(MnistNet())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.03, momentum=0.9)
    checkpoint = Path(args.checkpoint_dir) / "last.pt"
    step = 0
    if checkpoint.exists():  # every rank reads it; rank 0 alone writes it
        state = torch.load(checkpoint, weights_only=True)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
        say(rank, f"attempt {attempt}: resumed from the checkpoint of step {step}")
        events.emit(rank, "resumed", attempt=attempt, step=step)
    while step < args.steps:
        if rank == 1 and attempt == 0 and step == args.crash_at_step:
            events.emit(rank, "crash", step=step, attempt=attempt)
            raise RuntimeError(f"rank 1 crashed on purpose at step {step}")
        generator = torch.Generator().manual_seed(1000 * step + rank)
        batch = torch.randint(len(labels), (20,), generator=generator)
        loss = F.cross_entropy(model(images[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        events.emit(rank, "step", step=step, loss=loss.item(), attempt=attempt)
        if step % args.checkpoint_every == 0:
            if rank == 0:
                state = {"model": model.module.state_dict(),
                         "optimizer": optimizer.state_dict(), "step": step}  # fmt: skip
                torch.save(state, checkpoint.with_suffix(".partial"))
                os.replace(
                    checkpoint.with_suffix(".partial"), checkpoint
                )  # never half-written
            dist.barrier()
    if rank == 0:
        torch.save(model.module.state_dict(), Path(args.checkpoint_dir) / "final.pt")
        say(rank, f"attempt {attempt}: finished at step {step}")
    events.emit(rank, "finished", step=step, attempt=attempt)


# --- leftover processes ----------------------------------------------------------------------


def sleeper(seconds: float) -> None:
    time.sleep(seconds)


def orphans(args, events: Events) -> int:
    """Start two children, report their pids, then wait; the chapter kills only this parent."""
    import multiprocessing

    children = [
        multiprocessing.Process(target=sleeper, args=(args.timeout,)) for _ in range(2)
    ]
    for child in children:
        child.start()
    say_main(
        f"parent {os.getpid()} started children {[child.pid for child in children]}"
    )
    events.emit(
        "main", "children", parent=os.getpid(), children=[c.pid for c in children]
    )
    for child in children:
        child.join()
    return 0


# --- one rank, from start to finish --------------------------------------------------------


@record  # under torchrun: the exception and its traceback go to the agent's error file
def rank_main(rank: int, args, address: str | None, port: int | None) -> None:
    # Start-up gets the job's whole timeout: ranks may start seconds apart on a busy machine.
    startup = timedelta(seconds=args.timeout)
    if from_torchrun() and args.scenario == "elastic":
        # Keys of each attempt under their own prefix in the agent's store: without it, a
        # restarted rank could read its peer's address from the failed attempt (we saw it).
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        agent_store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                    is_master=False, timeout=startup)  # fmt: skip
        dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt-{attempt}", agent_store),
                                rank=rank, world_size=WORLD_SIZE, timeout=startup)  # fmt: skip
    elif from_torchrun():
        dist.init_process_group("gloo", timeout=startup)
    else:
        dist.init_process_group("gloo", init_method=f"tcp://{address}:{port}", rank=rank,
                                world_size=WORLD_SIZE, timeout=startup)  # fmt: skip
    events = Events(args.events)
    events.emit(rank, "started", pid=os.getpid())
    try:
        if args.scenario == "elastic":
            return elastic(rank, events, args)
        # The scenarios' collectives run in a group of the same ranks with a short timeout.
        group = dist.new_group(timeout=timedelta(seconds=args.collective_timeout))
        if args.scenario == "crash":
            crash(rank, group, events, args.crash_at_step)
        elif args.scenario == "timeout":
            never_arrives(rank, group, events, args.monitored, args.collective_timeout)
        elif args.scenario == "mismatch":
            mismatch(rank, group, events)
        else:
            uneven(rank, group, events, args.join)
    finally:
        dist.destroy_process_group()


def parse_args(argv=None):
    parser = Parser(
        prog="python -m workers.failures", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("scenario", choices=["crash", "timeout", "mismatch", "uneven", "elastic", "orphans"])  # fmt: skip
    parser.add_argument("--launcher", choices=["process", "spawn"], default="spawn",
                        help="crash: start the ranks with bare Process or mp.spawn")  # fmt: skip
    parser.add_argument("--collective-timeout", type=positive_float, default=2, metavar="SECONDS",
                        help="timeout of the process group's collectives (default 2)")  # fmt: skip
    parser.add_argument("--crash-at-step", type=int, default=10, metavar="K",
                        help="crash and elastic: the step at which rank 1 fails (default 10)")  # fmt: skip
    parser.add_argument("--monitored", action="store_true",
                        help="timeout: use monitored_barrier, which names the missing rank")  # fmt: skip
    parser.add_argument("--join", action="store_true",
                        help="uneven: wrap the loop in the Join context manager (the fix)")  # fmt: skip
    parser.add_argument("--steps", type=positive_int, default=30, help="elastic: steps (default 30)")  # fmt: skip
    parser.add_argument("--checkpoint-every", type=positive_int, default=10, metavar="K",
                        help="elastic: checkpoint every K steps (default 10)")  # fmt: skip
    parser.add_argument(
        "--checkpoint-dir", metavar="DIR", help="elastic: where checkpoints go"
    )
    parser.add_argument("--data-root", default=None, metavar="DIR",
                        help="elastic: MNIST root (default: data/ in the clone)")  # fmt: skip
    add_common_options(parser, timeout=30)
    args = parser.parse_args(argv)
    torchrun = from_torchrun()
    if torchrun and torchrun[1] != WORLD_SIZE:
        parser.error(f"every scenario has exactly {WORLD_SIZE} ranks: use --nproc-per-node {WORLD_SIZE}")  # fmt: skip
    if args.scenario == "elastic" and not torchrun:
        parser.error("elastic is about torchrun's restarts: start it with torchrun --max-restarts 1")  # fmt: skip
    if args.scenario == "elastic":
        if not args.checkpoint_dir or not os.path.isdir(args.checkpoint_dir):
            parser.error("elastic needs --checkpoint-dir, an existing folder")
        if args.data_root is None:
            from workers.mnist import DEFAULT_DATA_ROOT

            args.data_root = DEFAULT_DATA_ROOT
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    events = open_events(args.events)
    torchrun = from_torchrun()
    if torchrun:
        rank_main(torchrun[0], args, None, None)
        return 0
    if args.scenario == "orphans":
        return orphans(args, events)
    port = int(os.environ.get("MASTER_PORT") or free_port())
    if args.scenario == "crash" and args.launcher == "process":
        return crash_with_bare_processes(args, events, port)
    if args.scenario == "crash":
        return crash_with_spawn(args, events, port)
    return launch(
        rank_main, (args, "127.0.0.1", port), WORLD_SIZE, timeout=args.timeout
    )


if __name__ == "__main__":
    sys.exit(main())
