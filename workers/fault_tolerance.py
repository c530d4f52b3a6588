"""A rank dies, training goes on: torchft keeps the other replica groups training when one
dies and heals it from a peer when it comes back, against torchrun's restart of the whole
job from its last checkpoint.

    python -m workers.fault_tolerance torchft --groups 3 --kill-at-step 20
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc-per-node 2 \\
        --max-restarts 1 -m workers.fault_tolerance elastic --checkpoint-dir DIR
    python -m workers.fault_tolerance compare
    python -m workers.fault_tolerance by-hand

``torchft`` starts a lighthouse and N replica groups of one rank each; group 1 is killed
(SIGKILL) in the middle of step --kill-at-step, and a spare started beside it takes its
place once the others have gone on --rejoin-after steps without it. ``elastic`` is
the checkpoints chapter's loop on this chapter's model: DDP, a checkpoint every K steps,
rank 1 killed in the middle of the same step. ``compare`` runs both on two ranks, and
each without a failure, at the same data. ``by-hand`` does what a reader does in three
terminals: the lighthouse and two copies of programs/torchft_train.py, one of them killed
and started again. Every server listens on 127.0.0.1, except torchrun's own agent (its
rendezvous store takes no address to bind to).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

from workers.job import Job, joined, loopback_store, run_ranks
from workers.ranks import (
    REPOSITORY,
    Events,
    Parser,
    add_common_options,
    exit_now,
    fail,
    first_line,
    free_port,
    open_events,
    positive_float,
    positive_int,
    say,
    say_main,
    stop_with_launcher,
)

FEATURES, CLASSES, BATCH = 64, 10, 32
LOOPBACK = "127.0.0.1"
# gloo listens on the address the machine's hostname resolves to, unless told an interface
LOOPBACK_INTERFACE = "lo0" if sys.platform == "darwin" else "lo"
PLAIN_PROGRAM = "programs/torchft_train.py"

# The jobs import torch (import_torch); what only starts programs, or reads a run's events,
# does not, and starts in a fraction of a second instead of three
torch = dist = nn = F = None


def import_torch() -> None:
    global torch, dist, nn, F
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn import functional as F


def torchft_missing(imported: bool = True) -> str | None:
    """Why torchft cannot be used by this Python, or None when it can. ``imported=False``
    only looks for the package, without importing it (and torch with it)."""
    import importlib.util

    try:
        if imported:
            import torchft  # noqa: F401
        elif importlib.util.find_spec("torchft") is None:
            raise ImportError("No module named 'torchft'")
    except ImportError as error:
        import platform

        version = ".".join(map(str, sys.version_info[:2]))
        return (f"torchft is not installed for this Python ({version}, "
                f"{platform.machine()}): torchft 0.2.0 ships wheels for CPython 3.11 to "
                f"3.13 on x86_64 Linux only ({error.msg})")
    return None


# --- the model and the data, the same for every job ---------------------------------------


def make_model(width: int) -> nn.Module:
    torch.manual_seed(0)  # every replica starts from the same weights
    return nn.Sequential(nn.Linear(FEATURES, width), nn.ReLU(), nn.Linear(width, CLASSES))


def batch(step: int, replica: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch a replica trains on at a step: a function of the two alone, so that every
    run, restarted, healed or never failed, sees the same data at the same step."""
    generator = torch.Generator().manual_seed(1000 * step + replica)
    inputs = torch.randn(BATCH, FEATURES, generator=generator)
    return inputs, inputs[:, :CLASSES].argmax(1)  # which of the first ten is the largest


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


# --- torchft: a replica group ------------------------------------------------------------


def serve_on_loopback() -> None:
    """torchft 0.2.0's Manager builds its server with the address "[::]:port", every
    interface, and takes no address of its own: wrap the class it builds, so that the
    server listens on 127.0.0.1."""
    import torchft.manager

    server = torchft.manager.ManagerServer
    if getattr(server, "on_loopback", False):
        return

    def on_loopback(**options):
        return server(**{**options, "bind": options["bind"].replace("[::]", LOOPBACK)})

    on_loopback.on_loopback = True
    torchft.manager.ManagerServer = on_loopback


def state_functions(model: nn.Module, optimizer: torch.optim.Optimizer):
    """What a healing group copies from a peer: the weights and the optimizer's state."""

    def state_dict() -> dict:
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}

    def load_state_dict(state: dict) -> None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])

    return state_dict, load_state_dict


def model_only_state_functions(model: nn.Module, optimizer: torch.optim.Optimizer):
    """The mistake: a healing group gets the weights, and not the optimizer's state."""

    def state_dict() -> dict:
        return {"model": model.state_dict()}

    def load_state_dict(state: dict) -> None:
        model.load_state_dict(state["model"])

    return state_dict, load_state_dict


def replica_group(group: int, lighthouse: str, store: dist.TCPStore, state_dict,
                  load_state_dict, timeout: timedelta):
    """This replica group's Manager. At every step it asks the lighthouse for the quorum,
    rebuilds its gloo group over the quorum when that changed, and sends the live state to
    a group that must heal, or receives it, over that same gloo group."""
    import torchft
    from torchft.checkpointing.pg_transport import PGTransport

    gloo = torchft.ProcessGroupGloo(timeout=timeout)
    return torchft.Manager(
        pg=gloo, min_replica_size=1, state_dict=state_dict, load_state_dict=load_state_dict,
        init_sync=False,  # every group starts from the same weights: no copy at step 0
        lighthouse_addr=lighthouse, replica_id=f"group{group}", hostname=LOOPBACK,
        store_addr=LOOPBACK, store_port=store.port, rank=0, world_size=1,
        timeout=timeout, quorum_timeout=timeout, connect_timeout=timeout,
        checkpoint_transport=PGTransport(gloo, timeout=timeout, device=torch.device("cpu")),
    )


def train(manager, model, optimizer, group: int, groups: int, steps: int,
          after_step) -> None:
    """Train until every group holds ``steps`` committed steps. A step that a group of the
    quorum did not finish is not committed, and every group does it again with the same
    data. Each group votes on its own, so one can commit a step that a peer did not: the
    job ends in a quorum that finds every group at the same step, ``steps`` or past it."""
    while True:
        step = manager.current_step()
        inputs, labels = batch(step, group)
        optimizer.zero_grad()  # asks the lighthouse for this step's quorum, meanwhile
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        # the same answer in every group of the quorum: the groups at its step, and the step
        if manager.num_participants() == groups and manager.current_step() >= steps:
            return
        for work in [manager.allreduce(p.grad) for p in model.parameters()]:
            work.wait()  # the mean over the quorum; a peer's failure is noted, not raised
        optimizer.step()  # steps only if no rank of this group saw an error
        after_step(step, loss.item())


# --- torchrun: the checkpoints chapter's loop, on this model -----------------------------


def elastic(rank: int, model, optimizer, steps: int, checkpoint: Path | None,
            checkpoint_every: int, after_step) -> None:
    """DDP that checkpoints every K steps and, started again, resumes from the last one."""
    step = 0
    if checkpoint is not None and checkpoint.exists():  # a restart: carry on from there
        state = torch.load(checkpoint, weights_only=True)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    while step < steps:
        inputs, labels = batch(step, rank)
        loss = F.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces the gradients
        optimizer.step()
        after_step(step, loss.item())
        step += 1
        if checkpoint is not None and step % checkpoint_every == 0:
            if rank == 0:  # written whole, then renamed: no crash leaves it half-written
                state = {"model": model.module.state_dict(),
                         "optimizer": optimizer.state_dict(), "step": step}
                torch.save(state, checkpoint.with_suffix(".partial"))
                os.replace(checkpoint.with_suffix(".partial"), checkpoint)
            dist.barrier()  # nobody goes on before the checkpoint is complete


# --- what the worker measures around the lessons ------------------------------------------


def digest(state: dict) -> str:
    """A short fingerprint of every tensor's bytes in a (nested) state dict: equal
    fingerprints mean equal weights and optimizer state, bit for bit."""
    sha = hashlib.sha256()
    for tensor in tensors_of(state):
        sha.update(tensor.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return sha.hexdigest()[:16]


def tensors_of(value) -> list[torch.Tensor]:
    """Every tensor of a nested dict or list, in the order of the sorted keys."""
    if torch.is_tensor(value):
        return [value]
    if isinstance(value, dict):
        return [t for key in sorted(value, key=str) for t in tensors_of(value[key])]
    if isinstance(value, list | tuple):
        return [t for item in value for t in tensors_of(item)]
    return []


def storage_bytes(state: dict) -> int:
    """The bytes torchft's PGTransport sends for a state dict: each tensor's storage."""
    return sum(t.untyped_storage().nbytes() for t in tensors_of(state))


def kill_in_step(model: nn.Module, current_step, at: int, rank: int, events: Events,
                 job: str, before=None) -> None:
    """Kill this process (SIGKILL: no handler runs, as when a process crashes) right
    after the forward pass of step ``at``, before its all-reduce: the peers are waiting in
    the all-reduce of the same step. ``before``: what to wait for first (torchft's quorum,
    so that the step's quorum counts this group in)."""

    def hook(module, inputs, output):
        if current_step() == at:
            if before is not None:
                before()
            events.emit(rank, "killed", job=job, step=at)
            say(rank, f"{job}: killed (SIGKILL) in the middle of step {at}")
            os.kill(os.getpid(), signal.SIGKILL)

    model.register_forward_hook(hook)


def short(error: BaseException) -> str:
    """gloo's error in a few words: without the source file it names, and its advice."""
    text = re.sub(r"^\[[^\]]*\] ", "", first_line(error))
    return text.split(". This is typically")[0]


class StepRecorder:
    """``after_step`` for the loops: one span per step, from the end of the one before."""

    def __init__(self, rank: int, events: Events, job: str, describe):
        self.rank, self.events, self.job, self.describe = rank, events, job, describe
        self.began = time.time()

    def __call__(self, step: int, loss: float) -> None:
        now = time.time()
        name, fields = self.describe(step)
        self.events.emit(self.rank, name, t=self.began, t_end=now, job=self.job, step=step,
                         loss=loss, **fields)
        self.began = now


def group_process(group: int, args, lighthouse: str, start, joined, progress, finals,
                  events_path: str | None, rejoining: bool, launcher: int) -> None:
    """One replica group of the torchft job, in a process of its own. ``start``: a barrier
    that the first groups pass together, or for the spare that stands in for the killed
    group, the event that says when to join (once the others have gone on without it).
    ``joined``: set by the spare once its Manager is up; the others wait for it at that
    step, so that it joins with steps left to train, however slow this machine is."""
    import logging
    import warnings

    os.environ.setdefault("RUST_LOG", "warn")  # before torchft's Rust logs every quorum
    # the groups train on the CPU; a Manager that sees a GPU starts CUDA on it and
    # synchronizes it at every vote (torchft/manager.py)
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import_torch()
    import torchft

    # torchft's PGTransport wraps a bytes object in a tensor, and torch says it would not be
    # writable; it is only read
    warnings.filterwarnings("ignore", message="The given buffer is not writable")
    # torchft logs each failed all-reduce with its traceback; the step's line says it once
    logging.getLogger("torchft.manager").setLevel(logging.CRITICAL)
    stop_with_launcher(group, launcher, "the job's main process", speak=group == 0,
                       forkserver=True)
    os.environ["GLOO_SOCKET_IFNAME"] = LOOPBACK_INTERFACE  # read when gloo connects
    torch.set_num_threads(1)  # as torchrun's ranks: the same arithmetic, bit for bit
    events = Events(events_path)
    job = args.job_name
    serve_on_loopback()
    timeout = timedelta(seconds=args.collective_timeout)
    if rejoining and not start.wait(args.timeout):  # ready: wait for the others to go on
        say(group, f"{job}: not let back in within {args.timeout:g} s")
        sys.exit(1)
    store = loopback_store(0, None, 0, timeout)
    model = make_model(args.width)
    inner = make_optimizer(model)
    state_dict, load_state_dict = recorded_state_functions(
        model_only_state_functions if args.heal_model_only else state_functions,
        group, model, inner, events, job)
    manager = replica_group(group, lighthouse, store, state_dict, load_state_dict, timeout)
    state_dict.manager = load_state_dict.manager = manager
    optimizer = torchft.Optimizer(manager, inner)
    if rejoining:
        joined.set()
    if args.kill_at_step is not None and group == args.kill_group and not rejoining:
        # once this step's quorum includes it, so the others wait for it in the all-reduce
        kill_in_step(model, manager.current_step, args.kill_at_step, group, events, job,
                     before=manager.wait_quorum)
    if not rejoining:  # the first groups start together: one first quorum of them all
        start.wait(args.timeout)
    events.emit(group, "started", job=job, rejoining=rejoining)
    if rejoining:
        say(group, f"{job}: started again; it joins the next quorum")

    def describe(step: int) -> tuple[str, dict]:
        after = manager.current_step()
        participants = manager.num_participants()
        fields = {"committed": after > step, "participants": participants,
                  "step_after": after}
        progress[group] = after
        if load_state_dict.healed_at is not None:
            load_state_dict.healed_at = None
            return "healing", fields
        if after <= step:
            error = manager.errored()
            why = short(error.original_exception) if error else "a peer did not commit"
            say(group, f"{job}: step {step} not committed, to be done again: {why}")
            return "step not committed", fields
        return f"step, quorum of {participants}", fields

    recorder = StepRecorder(group, events, job, describe)
    hold = (None if args.kill_at_step is None or group == args.kill_group
            else args.kill_at_step + args.rejoin_after)

    def after_step(step: int, loss: float) -> None:
        recorder(step, loss)
        if hold is not None and manager.current_step() >= hold and not joined.is_set():
            began = time.time()  # not the training's time: left out of the steps' spans
            joined.wait(args.timeout)
            events.emit(group, "held", t=began, t_end=time.time(), job=job,
                        step=manager.current_step())
            recorder.began = time.time()

    train(manager, model, optimizer, group, args.groups, args.steps, after_step)
    final = digest(state_dict.whole())
    events.emit(group, "finished", job=job, step=manager.current_step(), digest=final,
                batches=manager.batches_committed())
    say(group, f"{job}: finished at step {manager.current_step()}, weights {final}")
    finals.put((group, final))
    manager.shutdown(wait=False)


def recorded_state_functions(functions, group, model, optimizer, events: Events, job: str):
    """The state functions, each call recorded: what a group sends to one that heals, and
    what the healing group receives, with the fingerprint of each."""
    plain_state, plain_load = functions(model, optimizer)
    whole_state, _ = state_functions(model, optimizer)

    def state_dict() -> dict:
        state = plain_state()
        if state_dict.manager is not None:  # torchft asks for it only to send it
            events.emit(group, "sent", job=job, step=state_dict.manager.current_step(),
                        digest=digest(state), bytes=storage_bytes(state),
                        tensors=len(tensors_of(state)))
        return state

    def load_state_dict(state: dict) -> None:
        plain_load(state)
        loaded = whole_state()
        load_state_dict.healed_at = time.time()
        events.emit(group, "healed", job=job, step=load_state_dict.manager.current_step(),
                    digest=digest(state), loaded_digest=digest(loaded),
                    bytes=storage_bytes(state), tensors=len(tensors_of(state)),
                    model_tensors=len(state["model"]), momentum_buffers=len(
                        state.get("optimizer", {}).get("state", {})))
        say(group, f"{job}: healed at step {load_state_dict.manager.current_step()}: "
                   f"received {storage_bytes(state):,} bytes, weights {digest(loaded)}")

    state_dict.manager = load_state_dict.manager = None
    state_dict.whole = whole_state
    load_state_dict.healed_at = None
    return state_dict, load_state_dict


def run_torchft(args, events: Events, job_name: str, kill_at: int | None) -> int:
    """A lighthouse on 127.0.0.1 and ``--groups`` replica groups; the group that
    ``kill_at`` kills has a spare, started with the others, that takes its place once the
    others have committed --rejoin-after steps without it. 0 when every group finished
    with the same weights."""
    import multiprocessing
    import multiprocessing.connection

    from torchft._torchft import LighthouseServer

    heartbeat_ms = int(1000 * args.heartbeat_timeout)
    lighthouse = LighthouseServer(bind=f"{LOOPBACK}:0", min_replicas=1,
                                  join_timeout_ms=heartbeat_ms,
                                  heartbeat_timeout_ms=heartbeat_ms)
    address = f"http://{LOOPBACK}:{lighthouse.address().rsplit(':', 1)[1]}"
    args.job_name, args.kill_at_step = job_name, kill_at
    context = multiprocessing.get_context("forkserver")
    start = context.Barrier(args.groups)
    back = context.Event()  # when the spare of the killed group may join
    joined = context.Event()  # the spare's Manager is up: the others go on
    progress = context.Array("i", args.groups)  # each group's committed steps
    finals = context.SimpleQueue()  # each group's fingerprint of its final state
    deadline = time.time() + args.timeout

    def launch(group: int, rejoining: bool):
        process = context.Process(
            target=group_process, name=f"group{group}",
            args=(group, args, address, back if rejoining else start, joined, progress,
                  finals, events.path, rejoining, os.getpid()))
        process.start()
        return process

    dies = f"; group {args.kill_group} dies in step {kill_at}" if kill_at else ""
    say_main(f"{job_name}: lighthouse on {address}, {args.groups} replica groups of one "
             f"rank{dies}")
    groups = {group: launch(group, False) for group in range(args.groups)}
    victim, dead = args.kill_group, False
    # started now, it has imported torch by the time it is let in: it stands in for a
    # replacement that is ready, and joins at the step it is let in on any machine
    spare = launch(victim, True) if kill_at else None
    others = [group for group in groups if group != victim]
    try:
        while any(process.exitcode is None for process in [*groups.values(), spare]
                  if process is not None):
            if time.time() > deadline:
                say_main(f"{job_name}: groups still running after {args.timeout:g} s: "
                         "stopping them all")
                return 1
            running = [p for p in [*groups.values(), spare] if p is not None]
            multiprocessing.connection.wait([p.sentinel for p in running
                                             if p.exitcode is None], timeout=0.05)
            if spare is not None and spare.exitcode not in (None, 0):
                say_main(f"{job_name}: group {victim}'s spare exited with code "
                         f"{spare.exitcode}: stopping the others")
                return 1
            for group, process in groups.items():
                code = process.exitcode
                if code == -signal.SIGKILL and group == victim and kill_at and not dead:
                    dead = True  # as planned: its spare takes its place, and joins once
                    groups[victim], spare = spare, None  # the others have gone on
                    events.emit("main", "restarted", job=job_name, group=victim)
                elif code not in (None, 0):
                    say_main(f"{job_name}: group {group} exited with code {code}: stopping "
                             "the others")
                    return 1
            if dead and not back.is_set() and \
                    min(progress[g] for g in others) >= kill_at + args.rejoin_after:
                back.set()
        weights = {}
        while not finals.empty():
            group, final = finals.get()
            weights[group] = final
        if sorted(weights) != sorted(groups):
            say_main(f"{job_name}: only groups {sorted(weights)} finished their training")
            return 1
        if len(set(weights.values())) > 1:
            say_main(f"{job_name}: the groups' final weights differ: " + ", ".join(
                f"group {group} {digest}" for group, digest in sorted(weights.items())))
            return 1
        return 0
    finally:
        for process in [*groups.values(), spare]:
            if process is None:
                continue
            if process.exitcode is None:
                process.kill()
            process.join(timeout=5)
        lighthouse.shutdown()


# --- the jobs of DDP: under torchrun, and under the book's launcher -----------------------


def ddp_rank(rank: int, job: Job, args) -> None:
    """A rank of the DDP job: under torchrun, killed once and resumed from the checkpoint;
    under the book's launcher, the same training with no failure."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    import_torch()
    os.environ["GLOO_SOCKET_IFNAME"] = LOOPBACK_INTERFACE
    torch.set_num_threads(1)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    name = args.job_name
    events = Events(args.events)
    timeout = timedelta(seconds=job.timeout)
    port = int(os.environ.get("MASTER_PORT", args.store_port or 0))
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        store = None  # torchrun's agent serves the store already: env:// finds it
    elif rank == 0:
        store = loopback_store(0, None, port, timeout)
    else:
        store = dist.TCPStore(LOOPBACK, port, is_master=False, timeout=timeout)
    checkpoint = Path(args.checkpoint_dir) / "last.pt" if args.checkpoint_dir else None
    with joined(job, rank, store=store):
        model = DDP(make_model(args.width))
        optimizer = make_optimizer(model)
        resumed = 0
        if checkpoint is not None and checkpoint.exists():
            resumed = torch.load(checkpoint, weights_only=True)["step"]
            events.emit(rank, "resumed", job=name, attempt=attempt, step=resumed)
            say(rank, f"{name} attempt {attempt}: resumed from the checkpoint of step "
                      f"{resumed}")
        progress = {"step": resumed}  # the step the loop is in, for the kill
        if args.kill_at_step is not None and rank == 1 and attempt == 0:
            kill_in_step(model.module, lambda: progress["step"], args.kill_at_step, rank,
                         events, name)
        recorder = StepRecorder(rank, events, name,
                                lambda step: ("step", {"attempt": attempt}))

        def after_step(step: int, loss: float) -> None:
            recorder(step, loss)
            progress["step"] = step + 1

        elastic(rank, model, optimizer, args.steps, checkpoint, args.checkpoint_every,
                after_step)
        final = digest({"model": model.module.state_dict(),
                        "optimizer": optimizer.state_dict()})
        events.emit(rank, "finished", job=name, step=args.steps, digest=final,
                    attempt=attempt)
        if rank == 0:
            say(rank, f"{name} attempt {attempt}: finished at step {args.steps}, weights "
                      f"{final}")
        del model  # freed before the group is destroyed (workers.job.joined says why)


def run_ddp(args, events: Events) -> int:
    """The DDP job with no failure, two ranks from the book's launcher: the reference."""
    args.job_name, args.kill_at_step, args.checkpoint_dir = "ddp", None, None
    args.store_port = free_port()
    job = Job(world_size=2, backend="gloo", init_method="", timeout=args.collective_timeout,
              started_as_rank=False)
    return run_ranks(job, ddp_rank, args)


def run_torchrun(args, events: Events) -> int:
    """torchrun --max-restarts 1 on the elastic demo: rank 1 killed at --kill-at-step."""
    folder = tempfile.mkdtemp(prefix="elastic-")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", "--max-restarts", "1",
               "-m", "workers.fault_tolerance", "elastic", "--checkpoint-dir", folder,
               "--steps", str(args.steps), "--checkpoint-every", str(args.checkpoint_every),
               "--kill-at-step", str(args.kill_at_step), "--width", str(args.width),
               "--timeout", str(args.collective_timeout)]
    if events.path:
        command += ["--events", events.path]
    # the checkpoints chapter says why each rendezvous round needs a store of its own
    environment = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    say_main("torchrun: " + " ".join(["torchrun", *command[3:]]).replace(folder, "DIR"))
    events.emit("main", "torchrun started", job="torchrun")
    with subprocess.Popen(command, env=environment, cwd=REPOSITORY,
                          stdin=subprocess.DEVNULL) as process:
        try:
            code = process.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            say_main(f"torchrun still running after {args.timeout:g} s: stopping it")
            process.kill()
            process.wait()
            code = 1
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return code


def compare(args, events: Events, with_torchft: bool = True) -> int:
    """The same failure twice, and each job without it, at the same data; then what each
    failure cost, in a few lines."""
    own = events.path is None  # the summary reads the events back: keep them somewhere
    if own:
        handle, path = tempfile.mkstemp(prefix="events-", suffix=".jsonl")
        os.close(handle)
        events = Events(path)
        args.events = path
    try:
        kill_at = args.kill_at_step
        jobs = [lambda: run_ddp(args, events)]
        if with_torchft:
            jobs += [lambda: run_torchft(args, events, "torchft-reference", None),
                     lambda: run_torchft(args, events, "torchft", kill_at)]
        for job in [*jobs, lambda: run_torchrun(args, events)]:
            code = job()
            args.kill_at_step = kill_at  # the references run without it
            if code != 0:
                return code
        return report(read_events(events.path), with_torchft)
    finally:
        if own:
            os.unlink(events.path)


def read_events(path: str) -> list[dict]:
    import json

    with open(path) as file:
        return sorted((json.loads(line) for line in file if line.strip()),
                      key=lambda event: event["t"])


def report(events: list[dict], with_torchft: bool = True) -> int:
    """What each failure cost, and the invariants: 0 when they hold."""
    reference = {e["digest"] for e in of_job(events, "ddp") if e["event"] == "finished"}
    for name in ("torchrun", "torchft") if with_torchft else ("torchrun",):
        job = recovery(events, name)
        same = set(job["digests"].values()) == reference
        say_main(f"{name}: killed in step {job['kill_step']}; went on from step "
                 f"{job['went_on_from']}, {job['steps_lost']} steps lost, "
                 f"{job['seconds_to_go_on']:.2f} s after the kill; final weights "
                 + ("equal to" if same else "not equal to") + " the run without failure")
    broken = []
    if {e["digest"] for e in of_job(events, "torchrun") if e["event"] == "finished"} \
            != reference:
        broken.append("torchrun's restarted job ended with other weights than DDP")
    if not with_torchft:
        return check(broken)
    healed = heals(events)
    for heal in healed:
        say_main(f"torchft: group {heal['rank']} healed at step {heal['step']} from group "
                 f"{heal['sender']}: {heal['bytes']:,} bytes, the same bits: "
                 f"{heal['digest'] == heal['sent_digest'] == heal['loaded_digest']}; "
                 f"then {heal['steps_after']} steps of its own")
    torchft_final = {e["digest"] for e in of_job(events, "torchft") if e["event"] ==
                     "finished"}
    if len(torchft_final) != 1:
        broken.append("the torchft groups ended with different weights")
    if not came_back(healed, events)[0]:
        broken.append("the torchft group that came back never healed")
    if any(heal["digest"] != heal["sent_digest"] for heal in healed):
        broken.append("a healed group received other weights than its peer sent")
    if {e["digest"] for e in of_job(events, "torchft-reference")
            if e["event"] == "finished"} != reference:
        broken.append("torchft without a failure ended with other weights than DDP")
    return check(broken)


def check(broken: list[str]) -> int:
    for problem in broken:
        say_main(f"not as expected: {problem}")
    return 1 if broken else 0


# --- by hand: the plain program, as a reader runs it --------------------------------------


def lighthouse_binary() -> str:
    """The torchft_lighthouse that the wheel installed beside this Python."""
    beside = Path(sys.executable).with_name("torchft_lighthouse")
    found = str(beside) if beside.exists() else shutil.which("torchft_lighthouse")
    if not found:
        fail("torchft_lighthouse not found: pip install torchft (see requirements.txt)")
    return found


def by_hand(args, events: Events) -> int:
    """The lighthouse and two copies of the plain program, as three shells would run them;
    group 1 is killed (SIGKILL) once it has printed step --kill-at-step, and started again
    unless --no-start-again. Lines from main: "$ " the commands, "# " what changed."""
    port = free_port()
    heartbeat = str(int(1000 * args.heartbeat_timeout))
    lighthouse = [lighthouse_binary(), "--min_replicas", "1",
                  "--bind", f"{LOOPBACK}:{port}", "--join_timeout_ms", heartbeat,
                  "--heartbeat_timeout_ms", heartbeat]
    # one thread per process, as torchrun gives its workers: two groups on two cores with a
    # thread per core each would take turns, several times slower
    shared = {"TORCHFT_LIGHTHOUSE": f"http://{LOOPBACK}:{port}", "STEPS": str(args.steps),
              "OMP_NUM_THREADS": "1"}
    quiet = {**os.environ, "RUST_LOG": "warn", "CUDA_VISIBLE_DEVICES": "", **shared}
    say_main("$ " + " ".join([Path(lighthouse[0]).name, *lighthouse[1:]]))
    say_main("$ export " + " ".join(f"{name}={value}" for name, value in shared.items()))
    deadline = time.time() + args.timeout
    server = subprocess.Popen(lighthouse, env=quiet, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    groups: list[tuple[int, subprocess.Popen]] = []
    readers: list[threading.Thread] = []
    killed = threading.Event()
    printed = re.compile(r"group (\d+): step (\d+), (\d+) group")

    def start(group: int) -> None:
        incarnation = sum(1 for g, _ in groups if g == group)
        say_main(f"$ REPLICA_GROUP={group} python {PLAIN_PROGRAM}"
                 + ("   # the same command again" if incarnation else ""))
        process = subprocess.Popen([sys.executable, PLAIN_PROGRAM], cwd=REPOSITORY,
                                   env={**quiet, "REPLICA_GROUP": str(group)},
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        groups.append((group, process))
        reader = threading.Thread(target=relay, args=(group, incarnation, process),
                                  daemon=True)
        reader.start()
        readers.append(reader)

    def relay(group: int, incarnation: int, process: subprocess.Popen) -> None:
        quorum = None
        for line in process.stdout:
            say(group, line.rstrip())
            found = printed.match(line)
            if not found:
                continue
            step, size = int(found[2]), int(found[3])
            events.emit(group, "printed", job="by-hand", step=step, participants=size,
                        incarnation=incarnation)
            if quorum is not None and size != quorum:
                say_main(f"# group {group}: a quorum of {size} at step {step}, not "
                         f"{quorum}")
            quorum = size
            if group == 1 and step >= args.kill_at_step and not killed.is_set():
                killed.set()
                process.kill()
                events.emit(group, "killed", job="by-hand", step=step)
                say_main(f"$ kill -9 {process.pid}   # group 1, after its step {step}")

    try:
        start(0)  # while the lighthouse starts: a Manager retries until connect_timeout
        start(1)
        while not killed.is_set() and groups[1][1].poll() is None:
            if time.time() > deadline:
                raise subprocess.TimeoutExpired(PLAIN_PROGRAM, args.timeout)
            time.sleep(0.05)
        if killed.is_set() and args.start_again:
            groups[1][1].wait(timeout=5)
            start(1)
        for _, process in groups:
            process.wait(timeout=max(0.1, deadline - time.time()))
        codes = [(group, process.returncode) for group, process in groups]
        if not killed.is_set() or any(code for _, code in codes[:1] + codes[2:]):
            say_main("# not as planned: " + ", ".join(
                f"group {group} exited with {code}" for group, code in codes))
            return 1
        return 0
    except subprocess.TimeoutExpired:
        say_main(f"# still running after {args.timeout:g} s: every process is stopped")
        return 1
    finally:
        for process in [*(process for _, process in groups), server]:
            if process.poll() is None:
                process.kill()
            process.wait()
        for reader in readers:
            reader.join(timeout=2)


# --- what the runs showed, from their events ----------------------------------------------

JOBS = ("ddp", "torchft-reference", "torchft", "torchrun")
STEP_EVENTS = ("step", "step, quorum of", "healing", "step not committed")


def of_job(events: list[dict], job: str) -> list[dict]:
    return [event for event in events if event.get("job") == job]


def completed_steps(events: list[dict], rank: int) -> list[dict]:
    """The steps a rank completed (for torchft: committed), in order of time."""
    return [e for e in events if e["rank"] == rank and e["event"].startswith(STEP_EVENTS)
            and e.get("committed", True)]


def progress_at(steps: list[dict], moment: float) -> int:
    """How many steps the job had behind it at ``moment``: one more than the last step
    completed by then (a restarted job goes back to its checkpoint)."""
    done = [e for e in steps if e["t_end"] <= moment]
    if not done:
        return 0
    last = max(done, key=lambda e: e["t_end"])
    return last.get("step_after", last["step"] + 1)


def recovery(events: list[dict], job: str) -> dict:
    """What a failure cost one job: steps lost, the seconds from the kill until it went on
    and until it was back past the step it died in, and its final weights. The survivor,
    rank or group 0, speaks for the job. A step counts as after the kill only if it began
    after it: one already under way when the kill came may still end after it."""
    mine = of_job(events, job)
    [killed] = [e for e in mine if e["event"] == "killed"]
    k, t_kill = killed["step"], killed["t"]
    steps = completed_steps(mine, 0)
    before = [e for e in steps if e["t"] < t_kill]
    after = [e for e in steps if e["t"] >= t_kill]
    resumed = [e["step"] for e in mine if e["event"] == "resumed" and e["rank"] == 0]
    went_on_from = resumed[0] if resumed else after[0]["step"]
    finished = {e["rank"]: e["digest"] for e in mine if e["event"] == "finished"}
    past_kill = [e for e in after if e["step"] >= k]
    return {
        "job": job, "kill_step": k, "killed_at": t_kill,
        "went_on_from": went_on_from,
        "steps_lost": len({e["step"] for e in before if e["step"] >= went_on_from}),
        "not_committed": sum(1 for e in mine if e["rank"] == 0 and
                             e["event"] == "step not committed"),
        "seconds_to_go_on": after[0]["t_end"] - t_kill,
        "seconds_past_kill_step": past_kill[0]["t_end"] - t_kill,
        "first_step": steps[0]["t"], "last_step": steps[-1]["t_end"],
        "steps": steps, "digests": finished,
    }


def steps_after_kill(job: dict, seconds: float) -> int:
    """Steps the job had gained ``seconds`` after the kill, beyond those it would have had
    by then without any step begun after the kill (so a step already under way when the
    kill came gains nothing); negative while a restarted job is still catching up."""
    moment = job["killed_at"] + seconds
    begun_before = [e for e in job["steps"] if e["t"] < job["killed_at"]]
    return progress_at(job["steps"], moment) - progress_at(begun_before, moment)


def step_seconds(events: list[dict], job: str, skip: int = 5) -> list[float]:
    """The durations of rank or group 0's healthy steps, the first ``skip`` left out (the
    first steps also pay for warming up)."""
    steps = completed_steps(of_job(events, job), 0)
    return [e["t_end"] - e["t"] for e in steps[skip:]]


def blocks(samples: list[float], count: int = 5) -> list[float]:
    """The medians of ``count`` consecutive blocks of the samples: repeats of the median,
    whose spread says how far one run's steps scatter."""
    import statistics

    size = max(1, len(samples) // count)
    return [statistics.median(samples[i:i + size])
            for i in range(0, size * count, size) if samples[i:i + size]]


def heals(events: list[dict], job: str = "torchft") -> list[dict]:
    """Each time a group healed, in order: what it received, against what its peer sent at
    that step, and how many steps the healed group then committed before it ended or healed
    again. A group heals more than once when it misses a commit that its peers made (each
    group votes on its own) and is behind at the next quorum."""
    mine = of_job(events, job)
    healed = [e for e in mine if e["event"] == "healed"]
    found = []
    for number, heal in enumerate(healed):
        sent = [e for e in mine if e["event"] == "sent" and e["step"] == heal["step"]]
        until = next((e["t"] for e in healed[number + 1:] if e["rank"] == heal["rank"]),
                     float("inf"))
        took_part = [e for e in completed_steps(mine, heal["rank"])
                     if heal["t"] < e["t_end"] <= until and e["event"] != "healing"]
        before = [e for e in completed_steps(mine, heal["rank"])
                  if e["t_end"] <= heal["t"] and e["event"] != "healing"]
        found.append({**heal, "sender": sent[0]["rank"] if sent else None,
                      "sent_digest": sent[0]["digest"] if sent else None,
                      "sent_bytes": sent[0]["bytes"] if sent else None,
                      "steps_after": len(took_part), "steps_before": len(before)})
    return found


def came_back(healed: list[dict], events: list[dict], job: str = "torchft") -> tuple:
    """The heals of ``heals()`` split in two: the killed group's after its kill (it came
    back behind its peers), and every other (a group that asked for its first quorum after
    its peers had committed a step, or missed a commit they made, began a step behind)."""
    [killed] = [e for e in of_job(events, job) if e["event"] == "killed"]
    back = [h for h in healed if h["rank"] == killed["rank"] and h["step"] > killed["step"]]
    return back, [h for h in healed if h not in back]


def quorum_sizes(events: list[dict], job: str = "torchft") -> dict[int, int]:
    """How many steps group 0 committed with each quorum size."""
    sizes: dict[int, int] = {}
    for e in completed_steps(of_job(events, job), 0):
        if e["event"].startswith("step, quorum of"):
            sizes[e["participants"]] = sizes.get(e["participants"], 0) + 1
    return sizes


def timeline_events(events: list[dict], job: str) -> list[dict]:
    """A job's events for its timeline: each rank's run of steps of one kind (a torchrun
    step computed again after the restart, a torchft step by the size of its quorum) made
    one span, with its first and last step; the kill, the restart and the heal as marks."""
    mine = of_job(events, job)
    killed = [e["step"] for e in mine if e["event"] == "killed"]
    shown, runs = [], {}
    for e in mine:
        name = e["event"]
        if name in ("sent", "finished", "torchrun started", "started"):
            continue
        if "t_end" not in e:
            shown.append({key: value for key, value in e.items() if key != "loss"})
            continue
        if name == "step" and e.get("attempt") and killed and e["step"] < killed[0]:
            name = "step, done again"
        step = e["step_after"] - 1 if name == "healing" else e["step"]  # healed into
        run = runs.get(e["rank"])
        if run is not None and run["event"] == name and run["last step"] == step - 1:
            run.update(t_end=e["t_end"], steps=run["steps"] + 1)
            run["last step"] = step
            continue
        run = {"rank": e["rank"], "event": name, "t": e["t"], "t_end": e["t_end"],
               "job": job, "first step": step, "last step": step, "steps": 1}
        runs[e["rank"]] = run
        shown.append(run)
    return shown


# --- who listens where --------------------------------------------------------------------

ROLES = (  # what a process is, from its command line
    ("torch.distributed.run", "torchrun's agent"),
    ("fault_tolerance elastic", "a torchrun worker"),
    ("torchft_train.py", "the plain program"),
    ("torchft_lighthouse", "torchft_lighthouse"),
    ("multiprocessing.forkserver", "a replica group or a DDP rank"),
    ("workers.fault_tolerance", "the worker's main process (the lighthouse)"),
)


class ListeningSockets:
    """``with ListeningSockets() as seen:`` (or ``start()`` and ``stop()``): every TCP
    socket that a process started from this one listens on meanwhile, looked up every
    ``interval`` seconds; then
    ``seen.found`` holds ``(role, address, port)`` for each, and ``seen.error`` says why
    nothing could be looked up (psutil may not read other processes' sockets)."""

    def __init__(self, interval: float = 0.5):
        self.interval, self.found, self.error = interval, set(), None
        self._stop = threading.Event()
        self._roles: dict[int, str] = {}

    def start(self) -> ListeningSockets:
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def __enter__(self) -> ListeningSockets:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _watch(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            try:
                mine = {child.pid for child in me.children(recursive=True)}
                for socket_ in psutil.net_connections(kind="tcp"):
                    role = self._role(socket_.pid) if (
                        socket_.status == psutil.CONN_LISTEN and socket_.pid in mine) \
                        else None
                    if role:  # one that ends while it is looked at is named next time
                        self.found.add((role, socket_.laddr.ip, socket_.laddr.port))
            except psutil.AccessDenied as error:
                self.error = f"psutil may not list sockets here ({error})"
                return
            except psutil.Error:  # a process ended while it was looked at
                pass
            self._stop.wait(self.interval)

    def _role(self, pid: int) -> str | None:
        """What the process is, from its command line; None (and not kept) where it
        cannot be read, as for a process that is ending."""
        import psutil

        if pid not in self._roles:
            try:
                command = " ".join(psutil.Process(pid).cmdline())
            except psutil.Error:
                command = ""
            if not command:
                return None
            self._roles[pid] = next((role for part, role in ROLES if part in command),
                                    command[:60])
        return self._roles[pid]

    def elsewhere(self) -> set[tuple[str, str, int]]:
        """The sockets that listened on another address than the loopback."""
        return {found for found in self.found if not is_loopback(found[1])}


def is_loopback(address: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(address.split("%")[0]).is_loopback


def gloo_default_address() -> str | None:
    """The address gloo listens on when GLOO_SOCKET_IFNAME is not set: the first address
    the machine's name resolves to that a socket can bind, as gloo picks it
    (ProcessGroupGloo.cpp, doesHostnameResolveToUsableAddress). None when there is none:
    then gloo warns
    "Unable to resolve hostname to a (local) address. Using the loopback address as
    fallback." (its text in torch/lib/libtorch_cpu.so) and listens on the loopback."""
    try:
        found = socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):  # socket.gaierror is an OSError: a name that does
        return None                  # not resolve
    for family, kind, protocol, _, address in found:
        try:
            with socket.socket(family, kind, protocol) as probe:
                probe.bind((address[0], 0, *address[2:]))
        except OSError:
            continue
        return address[0]
    return None


def torchft_source(module: str, text: str) -> str | None:
    """Where ``text`` first appears in the installed torchft's ``module``, as
    ``torchft/manager.py:312``; None when torchft or the text is not there."""
    import importlib.util

    # found, not imported: importing torchft would import torch into this process
    spec = importlib.util.find_spec("torchft")
    if spec is None or not spec.submodule_search_locations:
        return None
    package = Path(spec.submodule_search_locations[0])
    path = package.joinpath(*module.split(".")[1:]).with_suffix(".py")
    if not path.is_file():
        return None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if text in line:
            return f"{path.relative_to(package.parent)}:{number}"
    return None


# --- the command line ---------------------------------------------------------------------


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.fault_tolerance",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    torchft_demo = demos.add_parser(
        "torchft", help="a lighthouse and N replica groups; group 1 dies and comes back")
    elastic_demo = demos.add_parser(
        "elastic", help="under torchrun --max-restarts 1: rank 1 dies, all resume from "
                        "the last checkpoint")
    compare_demo = demos.add_parser(
        "compare", help="the same failure under torchrun and under torchft, and each job "
                        "without it")
    hand_demo = demos.add_parser(
        "by-hand", help=f"the lighthouse and two copies of {PLAIN_PROGRAM}, one killed and "
                        "started again")
    for demo, steps, kill in ((torchft_demo, 200, 50), (elastic_demo, 200, 50),
                              (compare_demo, 200, 50), (hand_demo, 1500, 300)):
        demo.add_argument("--steps", type=positive_int, default=steps,
                          help=f"steps to train (default {steps})")
        demo.add_argument("--kill-at-step", type=int, default=kill, metavar="K",
                          help=f"the step in which group or rank 1 is killed "
                               f"(default {kill})")
    torchft_demo.add_argument("--groups", type=positive_int, default=2,
                              help="replica groups, of one rank each (default 2)")
    torchft_demo.add_argument("--no-kill", action="store_true",
                              help="train without killing any group")
    torchft_demo.add_argument("--heal-model-only", action="store_true",
                              help="the mistake: hand a healing group the weights alone, "
                                   "not the optimizer's state")
    torchft_demo.add_argument("--repeats", type=positive_int, default=1, metavar="N",
                              help="run the job N times, one after the other (default 1)")
    for demo in (torchft_demo, compare_demo):
        demo.add_argument("--rejoin-after", type=positive_int, default=25, metavar="R",
                          help="the killed group's spare, started with the others, joins "
                               "once they have committed R steps without it (default 25)")
    for demo in (elastic_demo, compare_demo):
        demo.add_argument("--checkpoint-every", type=positive_int, default=20, metavar="K",
                          help="checkpoint every K steps (default 20)")
    elastic_demo.add_argument("--checkpoint-dir", metavar="DIR", required=True,
                              help="an existing folder for the checkpoints")
    for demo in (torchft_demo, elastic_demo, compare_demo):
        demo.add_argument("--width", type=positive_int, default=256,
                          help="hidden features of the model (default 256)")
    hand_demo.add_argument("--no-start-again", dest="start_again", action="store_false",
                           help="leave group 1 dead: group 0 trains on alone")
    for demo in (torchft_demo, compare_demo, hand_demo):
        demo.add_argument("--heartbeat-timeout", type=positive_float, default=1.0,
                          metavar="SECONDS", help="the lighthouse declares a group dead "
                                                  "after this long without a heartbeat, "
                                                  "and waits this long for stragglers "
                                                  "(default 1)")
    for demo in (torchft_demo, compare_demo):
        demo.add_argument("--collective-timeout", type=positive_float, default=10.0,
                          metavar="SECONDS", help="longest wait for a quorum, a collective "
                                                  "or a peer's state (default 10)")
    add_common_options(torchft_demo, timeout=60)
    add_common_options(elastic_demo, timeout=10)
    add_common_options(compare_demo, timeout=90)
    add_common_options(hand_demo, timeout=60)
    return parser


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    events = open_events(args.events)
    os.environ.setdefault("RUST_LOG", "warn")  # torchft's servers log every quorum at INFO
    if args.kill_at_step is not None and not 1 <= args.kill_at_step < args.steps:
        parser.error(f"--kill-at-step must be a step of the run, 1 to {args.steps - 1}, "
                     f"got {args.kill_at_step}")
    if args.demo == "by-hand":  # programs of their own: this process needs no torch
        missing = torchft_missing(imported=False)
        return fail(missing) if missing else by_hand(args, events)
    import_torch()
    if args.demo == "elastic":
        return elastic_main(parser, args)
    missing = torchft_missing()
    if missing and args.demo != "compare":
        fail(missing)
    args.kill_group = 1
    if args.kill_at_step + args.rejoin_after >= args.steps:
        parser.error(f"--kill-at-step plus --rejoin-after must be below --steps "
                     f"({args.steps}): the others must still train when it comes back")
    if args.demo == "torchft":
        if args.groups < 2:
            parser.error(f"--groups must be at least 2, so that one goes on, got "
                         f"{args.groups}")
        kill_at = None if args.no_kill else args.kill_at_step
        for repeat in range(1, args.repeats + 1):
            name = "torchft" if args.repeats == 1 else f"torchft {repeat}"
            if run_torchft(args, events, name, kill_at) != 0:
                return 1
        return 0
    args.groups, args.heal_model_only = 2, False
    if missing:
        say_main(f"{missing}: only the DDP jobs run")
    return compare(args, events, with_torchft=not missing)


def elastic_main(parser, args) -> int:
    from torch.distributed.elastic.multiprocessing.errors import record

    from workers.job import job_from_args

    args.backend, args.world_size = "gloo", 2
    job = job_from_args(parser, args)
    if not job.started_as_rank:
        parser.error("elastic is about torchrun's restarts: start it with "
                     "torchrun --nproc-per-node 2 --max-restarts 1")
    if job.world_size != 2:
        parser.error(f"elastic has exactly 2 ranks: use --nproc-per-node 2, got "
                     f"{job.world_size}")
    if not os.path.isdir(args.checkpoint_dir):
        parser.error(f"--checkpoint-dir {args.checkpoint_dir}: no such folder")
    args.job_name, args.store_port = "torchrun", None
    return run_ranks(job, record(ddp_rank), args, preload=("torch._dynamo",))


if __name__ == "__main__":
    exit_now(main())
