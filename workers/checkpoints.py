"""Checkpoints and restarts: a sharded checkpoint (torch.distributed.checkpoint) saved by N
ranks and loaded into M, and torchrun --max-restarts resuming a job from its last
checkpoint.

    python -m workers.checkpoints save --world-size 4 --checkpoint /tmp/sharded
    python -m workers.checkpoints load --world-size 2 --checkpoint /tmp/sharded
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --local-addr 127.0.0.1 \\
        --nproc-per-node 2 --max-restarts 1 -m workers.checkpoints elastic \\
        --checkpoint-dir DIR

``save`` trains the sharding chapter's FSDP2 model a few steps and saves it with
``dcp.save``, every rank writing its own shards, plus a whole copy for ``load`` to check
against. ``load`` builds the model on its own number of ranks, loads the checkpoint, and
checks every weight and optimizer value. ``elastic`` trains the MNIST model with DDP,
checkpoints every K steps, and crashes rank 1 once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn import functional as F

from workers import PRELOADS
from workers.job import (
    Job,
    add_job_options,
    job_from_args,
    joined,
    run_ranks,
    share_cores,
    synchronize,
)
from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    exit_now,
    fail,
    open_events,
    positive_int,
    say,
)
from workers.sharding import (
    FullyShardedModel,
    add_model_options,
    batch_for,
    storage_bytes,
    tower,
)
from workers.verdicts import counted

# --- a sharded checkpoint: saved by N ranks, loaded by M ---------------------------------

WHOLE_COPY = "whole_state_for_checking.pt"  # not part of the checkpoint: save's own check


def sharded_model(args, device) -> FullyShardedModel:
    """The sharding chapter's FSDP2 model and its Adam, for saving and loading."""
    torch.manual_seed(0)
    return FullyShardedModel(tower(args.width, args.depth).to(device), device, args.lr,
                             reshard_after_forward=True)


def save(trained: FullyShardedModel, folder: str) -> None:
    """Every rank writes its own shards of the model and of Adam's state."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(trained.model, trained.optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=folder)


def load(trained: FullyShardedModel, folder: str) -> None:
    """Every rank reads the parts of the checkpoint that its shards need."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(trained.model, trained.optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=folder)  # fills the tensors of `state` in place
    set_state_dict(trained.model, trained.optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"])


def whole_state(trained: FullyShardedModel) -> dict:
    """The whole model and optimizer state, gathered, on rank 0 (empty elsewhere)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state, optimizer_state = get_state_dict(trained.model, trained.optimizer,
                                                  options=options)
    return {"model": model_state, "optimizer": optimizer_state}


def flat_tensors(state: dict) -> list[torch.Tensor]:
    """Every tensor of a nested state dict, in the order of its sorted keys."""
    tensors = []
    for key in sorted(state, key=str):
        value = state[key]
        if isinstance(value, dict):
            tensors += flat_tensors(value)
        elif torch.is_tensor(value):
            tensors.append(value)
    return tensors


def save_demo(rank: int, args, device, events: Events) -> None:
    """Train a few steps, save the sharded checkpoint, and a whole copy to check a load."""
    trained = sharded_model(args, device)
    for step in range(args.steps):
        inputs, targets = batch_for(rank, step, args, device)
        F.mse_loss(trained.forward(inputs), targets).backward()
        trained.update()
        trained.zero_grad()
    begin = time.perf_counter()
    save(trained, args.checkpoint)
    seconds = time.perf_counter() - begin
    whole = whole_state(trained)
    if rank == 0:
        torch.save(whole, os.path.join(args.checkpoint, WHOLE_COPY))
        say(rank, f"saved by {dist.get_world_size()} ranks in {seconds:.2f} s: "
                  f"{', '.join(sorted(os.listdir(args.checkpoint)))}")
    events.emit(rank, "saved", world_size=dist.get_world_size(), seconds=seconds,
                local_bytes=storage_bytes(trained.parameters))


def load_demo(rank: int, args, device, events: Events) -> None:
    """Load the checkpoint into this job's ranks, however many saved it; check every
    weight and optimizer value against the whole copy the saving job wrote."""
    trained = sharded_model(args, device)
    load(trained, args.checkpoint)
    loaded = whole_state(trained)
    rows = [0] * dist.get_world_size()  # FSDP2 cut dim 0: rank r's rows follow rank r-1's
    dist.all_gather_object(rows, trained.parameters[0].to_local().shape[0])
    say(rank, f"holds rows {sum(rows[:rank])}-{sum(rows[:rank + 1]) - 1} of each weight")
    events.emit(rank, "shard", world_size=dist.get_world_size(),
                local_bytes=storage_bytes(trained.parameters))
    if rank == 0:
        saved = torch.load(os.path.join(args.checkpoint, WHOLE_COPY))
        pairs = list(zip(flat_tensors(loaded), flat_tensors(saved), strict=True))
        different = sum(not torch.equal(mine, theirs) for mine, theirs in pairs)
        events.emit(rank, "loaded", world_size=dist.get_world_size(), tensors=len(pairs),
                    different=different)
        say(rank, f"loaded into {counted(dist.get_world_size(), 'rank')}: {len(pairs)} "
                  f"tensors, {different} different from the saved ones")
        if different:
            raise RuntimeError(f"{different} of {len(pairs)} tensors changed between save "
                               "and load")


# --- elastic restart ----------------------------------------------------------------------


def elastic(rank: int, events: Events, args) -> None:
    """DDP training that checkpoints every K steps and resumes from the last checkpoint.
    Each step's batch is a function of the step number and the rank only, so a resumed run
    computes exactly what an uninterrupted one does."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from workers.mnist import MnistNet, mnist_tensors

    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    (images, labels), _ = mnist_tensors(args.data_root)
    torch.manual_seed(0)
    model = DDP(MnistNet())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.03, momentum=0.9)
    checkpoint = Path(args.checkpoint_dir) / "last.pt"
    step = 0
    if checkpoint.exists():  # every rank reads it, so every rank must see this folder
        state = torch.load(checkpoint, weights_only=True)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
        say(rank, f"attempt {attempt}: resumed from the checkpoint of step {step}")
        events.emit(rank, "resumed", attempt=attempt, step=step)
    while step < args.steps:
        maybe_crash(rank, attempt, step, args, events)
        generator = torch.Generator().manual_seed(1000 * step + rank)
        batch = torch.randint(len(labels), (20,), generator=generator)
        loss = F.cross_entropy(model(images[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        events.emit(rank, "step", step=step, loss=loss.item(), attempt=attempt)
        if step % args.checkpoint_every == 0:
            if rank == 0:  # the weights are the same on every rank: one writer
                state = {"model": model.module.state_dict(),
                         "optimizer": optimizer.state_dict(), "step": step}
                torch.save(state, checkpoint.with_suffix(".partial"))
                # renamed into place: a crashed process never leaves it half-written
                # (a machine losing power might: nothing here calls os.fsync first)
                os.replace(checkpoint.with_suffix(".partial"), checkpoint)
            dist.barrier()  # nobody goes on before the checkpoint is complete
    if rank == 0:
        torch.save(model.module.state_dict(), Path(args.checkpoint_dir) / "final.pt")
        say(rank, f"attempt {attempt}: finished at step {step}")
    events.emit(rank, "finished", step=step, attempt=attempt)


def maybe_crash(rank: int, attempt: int, step: int, args, events: Events) -> None:
    """Rank 1 fails once, in the first attempt, at --crash-at-step."""
    if rank == 1 and attempt == 0 and step == args.crash_at_step:
        events.emit(rank, "crash", step=step, attempt=attempt)
        raise RuntimeError(f"rank 1 crashed on purpose at step {step}")


# --- the job -----------------------------------------------------------------------------

DEMOS = {"save": save_demo, "load": load_demo}
PRELOAD = PRELOADS["checkpoints"]  # the same imports as the sharding chapter's ranks
# elastic builds an optimizer, and the first optimizer imports torch._dynamo: each rank
# imports it before it joins the group (workers.ranks.import_modules says why)
ELASTIC_IMPORTS = ("torch._dynamo",)


def rank_main(rank: int, job: Job, args) -> None:
    events = Events(args.events)
    if args.demo == "elastic":
        with joined(job, rank):
            return elastic(rank, events, args)
    share_cores(job.world_size)
    with joined(job, rank) as device:
        DEMOS[args.demo](rank, args, device, events)
        synchronize(device)


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.checkpoints",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    saving = demos.add_parser("save", help="train FSDP2, then save a sharded checkpoint")
    loading = demos.add_parser(
        "load", help="load a sharded checkpoint into any number of ranks, and check it")
    restarting = demos.add_parser(
        "elastic", help="under torchrun --max-restarts: resume from the last checkpoint")
    add_model_options(saving, steps=3)
    add_model_options(loading, steps=3)
    for checkpointing in (saving, loading):
        checkpointing.add_argument("--checkpoint", required=True, metavar="DIR",
                                   help="the checkpoint's folder")
        add_job_options(checkpointing)
        add_common_options(checkpointing, timeout=60)
    restarting.add_argument("--crash-at-step", type=int, default=10, metavar="K",
                            help="the step at which rank 1 fails, once (default 10)")
    restarting.add_argument("--steps", type=positive_int, default=30, help="default 30")
    restarting.add_argument("--checkpoint-every", type=positive_int, default=10,
                            metavar="K", help="checkpoint every K steps (default 10)")
    restarting.add_argument("--checkpoint-dir", metavar="DIR", required=True,
                            help="an existing folder for the checkpoints")
    restarting.add_argument("--data-root", default=None, metavar="DIR",
                            help="MNIST root (default: data/ in the clone)")
    add_common_options(restarting, timeout=30)
    return parser


def check_checkpoint_folder(args) -> None:
    """Before any rank starts: save needs a folder it can write, load a saved checkpoint.
    (A checkpoint of other shapes is left to DCP, whose error the chapter shows.)"""
    folder = args.checkpoint
    if args.demo == "save":
        try:
            os.makedirs(folder, exist_ok=True)
            probe = os.path.join(folder, ".writable")
            open(probe, "w").close()
            os.remove(probe)
        except OSError as error:
            fail(f"cannot write the checkpoint folder {folder}: {error.strerror}")
    elif not os.path.exists(os.path.join(folder, ".metadata")):
        fail(f"no checkpoint in {folder}: save one first "
             f"(python -m workers.checkpoints save --checkpoint {folder})")
    elif not os.path.exists(os.path.join(folder, WHOLE_COPY)):
        fail(f"{folder} was not saved by this worker's save demo, whose copy load checks")


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    open_events(args.events)
    if args.demo != "elastic":
        job = job_from_args(parser, args, least=1)
        check_checkpoint_folder(args)
        return run_ranks(job, rank_main, args, preload=PRELOAD)
    args.backend, args.world_size = "gloo", 2
    job = job_from_args(parser, args)
    if not job.started_as_rank:
        parser.error("elastic is about torchrun's restarts: start it with "
                     "torchrun --max-restarts 1")
    if not os.path.isdir(args.checkpoint_dir):
        parser.error(f"--checkpoint-dir {args.checkpoint_dir}: no such folder")
    if args.data_root is None:
        from workers.mnist import DEFAULT_DATA_ROOT

        args.data_root = DEFAULT_DATA_ROOT
    # @record: an exception of a rank goes into torchrun's report (the failures chapter)
    return run_ranks(job, record(rank_main), args, preload=ELASTIC_IMPORTS)


if __name__ == "__main__":
    exit_now(main())
