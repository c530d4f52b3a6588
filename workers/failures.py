"""When things go wrong: crashed and hung ranks, timeouts, mismatched collectives and uneven
inputs, each bounded by a timeout. (Start-up mistakes are the init-methods chapter's,
leftover processes start_join's, restarts the checkpoints chapter's.)

    python -m workers.failures crash
    python -m workers.failures crash --hang
    torchrun --standalone --nproc-per-node 2 -m workers.failures crash
    python -m workers.failures timeout
    python -m workers.failures mismatch
    python -m workers.failures uneven

Every scenario runs two ranks on gloo; its collectives run in a group whose timeout is
--collective-timeout, and the whole job has --timeout.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from workers.job import Job, job_from_args, joined, run_ranks
from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    exit_now,
    first_line,
    open_events,
    positive_float,
    say,
    say_main,
    stop_all,
)

WORLD_SIZE = 2

# --- a crashed rank -----------------------------------------------------------------------


def crash(rank: int, group, events: Events, args) -> None:
    """All-reduce in a loop; rank 1 fails at step --crash-at-step."""
    for step in range(100):
        maybe_crash(rank, step, args, events)
        try:
            dist.all_reduce(torch.ones(1), group=group)
        except RuntimeError as error:  # peer died (closed socket) or is silent (timeout)
            say(rank, f"step {step}: all_reduce failed: {first_line(error)}")
            raise SystemExit(1) from None
        time.sleep(0.05)


def maybe_crash(rank: int, step: int, args, events: Events) -> None:
    """Rank 1, at --crash-at-step: raises, or with --hang stays away for an hour."""
    if rank == 1 and step == args.crash_at_step:
        events.emit(rank, "hang" if args.hang else "crash", step=step)
        if args.hang:
            time.sleep(3600)
        raise RuntimeError(f"rank 1 failed on purpose at step {step}")


@contextmanager
def timed_all_reduces(rank: int, events: Events):
    """Record each ``dist.all_reduce`` of the block as a span, for the page's timeline:
    beside the lesson, which calls torch.distributed itself."""
    plain = dist.all_reduce

    def timed(tensor, *args, **kwargs):
        began, error = time.time(), None
        try:
            return plain(tensor, *args, **kwargs)
        except RuntimeError as failure:
            error = first_line(failure)
            raise
        finally:
            fields = {"bytes": tensor.numel() * tensor.element_size()}
            if error:
                fields["error"] = error
            events.emit(rank, "all_reduce", t=began, t_end=time.time(), **fields)

    dist.all_reduce = timed
    try:
        yield
    finally:
        dist.all_reduce = plain


def crash_with_bare_processes(job: Job, args) -> int:
    """multiprocessing.Process and join(): nobody stops the survivors for you."""
    import torch.multiprocessing as mp

    context = mp.get_context("forkserver")
    ranks = [context.Process(target=rank_main, args=(rank, job, args))
             for rank in range(WORLD_SIZE)]
    for process in ranks:
        process.start()
    deadline = time.time() + job.timeout
    for process in ranks:  # join each with what is left of the deadline
        process.join(max(0.0, deadline - time.time()))
    codes = [process.exitcode for process in ranks]
    for process in ranks:
        if process.is_alive():  # a survivor still blocked: only our deadline ends it
            process.kill()
            process.join()
    say_main(f"exit codes {codes} (None: still running at the deadline, then killed)")
    return 0 if codes == [0, 0] else 1


def crash_with_spawn(job: Job, args) -> int:
    """mp.spawn's own join: at the first failure it terminates the other ranks, then raises
    (ProcessRaisedException for an exception, ProcessExitedException for an exit code).
    join(timeout) in a loop is mp.spawn's join=True, with a deadline of the job's."""
    import torch.multiprocessing as mp

    ranks = mp.spawn(rank_main, args=(job, args), nprocs=WORLD_SIZE, join=False)
    deadline = time.time() + job.timeout
    try:
        while not ranks.join(timeout=0.2):  # True once every rank has exited with 0
            if time.time() > deadline:
                stop_all(ranks)
                say_main(f"ranks still running after {job.timeout:g} s: stopping them all")
                return 1
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as error:
        said = [line for line in str(error).splitlines() if line.strip()]
        if isinstance(error, mp.ProcessRaisedException):  # a traceback, then the error
            said = [f"process {error.error_index} raised {said[-1]}"]
        say_main(f"mp.spawn raised {type(error).__name__}: {said[0]}")
        return 1
    except KeyboardInterrupt:  # Ctrl-C: as the book's other launchers do
        stop_all(ranks)
        say_main("interrupted: every rank was stopped")
        raise SystemExit(130) from None
    return 0


def crash_under_launchers(job: Job, args, events: Events) -> int:
    launchers = [("bare Process", crash_with_bare_processes),
                 ("mp.spawn", crash_with_spawn)]
    if args.hang:  # bare Process would wait for the hung rank until its deadline, --timeout
        launchers = launchers[1:]
    for launcher, start in launchers:
        say_main(f"--- {launcher}")
        began = time.time()
        code = start(job.on_fresh_port(), args)
        events.emit("main", "launcher done", launcher=launcher, t=began, t_end=time.time(),
                    exit_code=code)
    return 0


# --- timeouts and mismatched collectives --------------------------------------------------


def never_arrives(rank: int, group, events: Events, monitored: bool, timeout: float):
    """Rank 1 never calls the collective; rank 0 waits until its timeout."""
    if rank == 1:
        time.sleep(timeout + 0.5)  # busy elsewhere, or stuck, for longer than the timeout
        return
    begin = time.time()
    try:
        if monitored:  # gloo only: names the first rank that did not arrive
            dist.monitored_barrier(group=group, timeout=timedelta(seconds=timeout))
        else:
            dist.all_reduce(torch.ones(1), group=group)
    except RuntimeError as error:
        say(rank, f"gave up after {time.time() - begin:.1f} s: {first_line(error)}")
        events.emit(rank, "timed out", monitored=monitored, seconds=time.time() - begin,
                    error=first_line(error))


def mismatch(rank: int, group, events: Events) -> None:
    """Rank 0 calls all_reduce, rank 1 broadcast: the collectives do not match."""
    begin = time.time()
    try:
        if rank == 0:
            dist.all_reduce(torch.ones(4), group=group)
        else:
            dist.broadcast(torch.ones(4), src=0, group=group)
        say(rank, "no error: the mismatch went unnoticed")
    except RuntimeError as error:
        say(rank, f"after {time.time() - begin:.1f} s: {first_line(error)[:400]}")
        events.emit(rank, "mismatch", detail=detailed(), seconds=time.time() - begin,
                    error=first_line(error))
    events.emit(rank, "flight recorder", detail=detailed(), entries=flight_recorder())


def detailed() -> bool:
    """Whether this process checks collectives as TORCH_DISTRIBUTED_DEBUG=DETAIL does."""
    return dist.get_debug_level() == dist.DebugLevel.DETAIL


def flight_recorder() -> list[dict]:
    """The last collectives this process started, as PyTorch's flight recorder kept them."""
    from torch._C._distributed_c10d import _dump_fr_trace_json

    entries = json.loads(_dump_fr_trace_json(includeCollectives=True)).get("entries", [])
    keep = ("collective_seq_id", "profiling_name", "input_sizes", "state")
    return [{key: entry.get(key) for key in keep} for entry in entries]


# --- uneven inputs ------------------------------------------------------------------------


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
        # Ranks that run out of data shadow the others' all-reduces until everyone is done.
        with Join([model], enable=use_join):
            for batch in batches:
                optimizer.zero_grad()
                model(batch).pow(2).mean().backward()
                optimizer.step()
                steps += 1
                begin = time.time()  # "stuck for" counts from the last step that ended
        dist.barrier(group=group)  # after training, e.g. before rank 0 saves a checkpoint
    except RuntimeError as error:
        say(rank, f"after {steps} steps, stuck for {time.time() - begin:.1f} s: "
                  f"{first_line(error)}")
        events.emit(rank, "uneven", join=use_join, steps=steps, error=first_line(error))
        return
    say(rank, f"finished all {steps} of its batches")
    events.emit(rank, "uneven", join=use_join, steps=steps, error=None)


# --- one rank, from start to finish -------------------------------------------------------


def rank_main(rank: int, job: Job, args) -> None:
    events = Events(args.events)
    if getattr(args, "detail", False):  # what TORCH_DISTRIBUTED_DEBUG=DETAIL sets, here
        dist.set_debug_level(dist.DebugLevel.DETAIL)
    with joined(job, rank):  # start-up keeps the job's timeout: ranks start unevenly
        events.emit(rank, "started", pid=os.getpid())
        # The scenarios' collectives run in a group of the same ranks with a short timeout.
        group = dist.new_group(timeout=timedelta(seconds=args.collective_timeout))
        if args.demo == "crash":
            with timed_all_reduces(rank, events):
                crash(rank, group, events, args)
        elif args.demo == "timeout":
            never_arrives(rank, group, events, args.monitored, args.collective_timeout)
        elif args.demo == "mismatch":
            mismatch(rank, group, events)
        else:
            uneven(rank, group, events, args.join)


# uneven builds an optimizer, and the first optimizer imports torch._dynamo: each rank
# imports it before it joins the group (workers.ranks.import_modules says why)
OPTIMIZER_IMPORTS = ("torch._dynamo",)


def in_turn(job: Job, args, option: str, events: Events) -> int:
    """The same scenario twice, without and with ``option`` (a fix or a better tool)."""
    for value in (False, True):
        setattr(args, option, value)
        say_main(f"--- {option}={value}")
        run_ranks(job.on_fresh_port(), rank_main, args, preload=OPTIMIZER_IMPORTS)
    return 0


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.failures", description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    helps = {
        "crash": "rank 1 crashes (or hangs): under bare Process and mp.spawn, or torchrun",
        "timeout": "a collective rank 1 never calls, plain and with monitored_barrier",
        "mismatch": "all_reduce against broadcast, without and with the DETAIL debug level",
        "uneven": "one rank has a batch more, without and with Join",
    }
    made = {name: demos.add_parser(name, help=text) for name, text in helps.items()}
    made["crash"].add_argument("--no-record", dest="record", action="store_false",
                               help="under torchrun: without @record, to see what is lost")
    made["crash"].add_argument("--hang", action="store_true",
                               help="rank 1 hangs at the step instead of raising")
    made["crash"].add_argument("--crash-at-step", type=int, default=10, metavar="K",
                               help="the step at which rank 1 fails (default 10)")
    for name in ("crash", "timeout", "mismatch", "uneven"):
        made[name].add_argument(
            "--collective-timeout", type=positive_float, default=1, metavar="SECONDS",
            help="timeout of the scenario's collectives (default 1)")
    for name, demo in made.items():  # crash: the job's deadline must not end a hang first,
        add_common_options(demo, timeout=90 if name == "crash" else 30)  # even under load
    return parser


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    events = open_events(args.events)
    args.backend, args.world_size = "gloo", WORLD_SIZE
    job = job_from_args(parser, args)
    if job.world_size != WORLD_SIZE:
        parser.error(f"every scenario has exactly {WORLD_SIZE} ranks: "
                     f"use --nproc-per-node {WORLD_SIZE}")
    args.monitored = args.join = args.detail = False  # the plain variant of each scenario
    if job.started_as_rank:  # torchrun started this process as one rank
        entry = record(rank_main) if getattr(args, "record", True) else rank_main
        imports = OPTIMIZER_IMPORTS if args.demo == "uneven" else ()
        return run_ranks(job, entry, args, preload=imports)
    if args.demo == "crash":
        return crash_under_launchers(job, args, events)
    if args.demo == "timeout":
        return in_turn(job, args, "monitored", events)
    if args.demo == "uneven":
        return in_turn(job, args, "join", events)
    if args.demo == "mismatch":
        return in_turn(job, args, "detail", events)
    return run_ranks(job, rank_main, args)


if __name__ == "__main__":
    exit_now(main())
