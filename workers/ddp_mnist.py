"""Data-parallel training on MNIST: one process, gradients averaged by hand, and DDP.

    python -m workers.ddp_mnist single
    python -m workers.ddp_mnist manual --world-size 2
    python -m workers.ddp_mnist ddp --world-size 2 --checkpoint ckpt.pt
    python -m workers.ddp_mnist compare --world-size 2 --checkpoint-dir DIR
    python -m workers.ddp_mnist mistakes
    torchrun --standalone --nproc-per-node 2 -m workers.ddp_mnist ddp

All three ways of training see the same data in the same order for the same --seed: the
single process takes global batches of --batch-size images, and with N ranks each rank
takes its share, --batch-size / N images, of the same global batch. So they compute the
same thing, and the chapter checks that they end with the same weights.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset
from torch.utils.data.distributed import DistributedSampler

from workers import PRELOADS
from workers.job import (
    Job,
    add_job_options,
    job_from_args,
    joined,
    loopback_store,
    run_ranks,
    share_cores,
    sockets_on_loopback,
    wrap,
)
from workers.mnist import DEFAULT_DATA_ROOT, MnistNet, mnist_datasets, prepare_mnist
from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    exit_now,
    fail,
    first_line,
    open_events,
    physical_cores,
    positive_float,
    positive_int,
    say,
    say_main,
)

# --- part 1: data parallelism by hand -----------------------------------------------------


def epoch_order(size: int, seed: int, epoch: int) -> list[int]:
    """The global order of the training set in one epoch: a new shuffle every epoch.

    The same permutation DistributedSampler draws (a generator seeded with seed + epoch).
    """
    generator = torch.Generator().manual_seed(seed + epoch)
    return torch.randperm(size, generator=generator).tolist()


def shard(order: list[int], rank: int, world_size: int) -> list[int]:
    """Rank r's disjoint share: every world_size-th index, starting at r.

    Global batch k (indices k*B .. (k+1)*B of ``order``) is then split evenly, B/N to each
    rank, as batch k of every rank: the N ranks together see exactly the global batch.
    """
    return order[rank::world_size]


def average_gradients(model: nn.Module, world_size: int) -> None:
    """After backward(): replace every gradient by its mean over all ranks."""
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM)
        parameter.grad /= world_size


# --- training, in every mode --------------------------------------------------------------


def training_step(model: nn.Module, images, labels, optimizer, mode: str,
                  world_size: int) -> torch.Tensor:
    """One step, the same in every mode; only "manual" averages the gradients itself."""
    loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()  # under DDP, gradients are averaged here, bucket by bucket
    if mode == "manual":
        average_gradients(model, world_size)
    optimizer.step()
    return loss


def train(model: nn.Module, mode: str, rank: int, world_size: int, args, device,
          events: Events) -> None:
    """Train ``model`` (DDP-wrapped for mode "ddp") on this rank's share of each batch."""
    train_set, test_set = mnist_datasets(args.data_root, args.train_images)
    dtype = next(model.parameters()).dtype  # the images follow the model's (--dtype)
    per_rank_batch = args.batch_size // world_size
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if mode == "ddp":
        sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank,
                                     shuffle=True, seed=args.seed)
    step = 0
    for epoch in range(args.epochs):
        if mode == "ddp":
            sampler.set_epoch(epoch)  # a new shuffle every epoch, the same on every rank
            loader = DataLoader(train_set, batch_size=per_rank_batch, sampler=sampler)
        else:  # by hand: this rank's share of this epoch's shuffle
            order = shard(epoch_order(len(train_set), args.seed, epoch), rank, world_size)
            loader = DataLoader(Subset(train_set, order), batch_size=per_rank_batch)
        model.train()
        for images, labels in loader:
            maybe_crash(rank, step, args)
            with events.span(rank, "step", mode=mode, epoch=epoch, step=step) as record:
                images, labels = images.to(device, dtype), labels.to(device)
                loss = training_step(model, images, labels, optimizer, mode, world_size)
                record["loss"] = loss.item()
            step += 1
        accuracy = evaluate(model, test_set, rank, world_size, device)
        last = global_batch_loss(loss, world_size)
        if rank == 0:
            say(rank, f"epoch {epoch}: loss {last:.3f} (last global batch), test accuracy "
                      f"{accuracy:.2%}")
        events.emit(rank, "epoch", mode=mode, epoch=epoch, steps=step, accuracy=accuracy,
                    loss=last)


def global_batch_loss(loss: torch.Tensor, world_size: int) -> float:
    """The mean loss over the whole global batch: the mean of the ranks' equal shares'."""
    total = loss.detach().clone()
    if world_size > 1:
        dist.all_reduce(total)
    return total.item() / world_size


def evaluate(model, test_set, rank: int, world_size: int, device) -> float:
    """Accuracy on the whole test set: each rank scores its share, then one all_reduce."""
    model.eval()
    mine = Subset(test_set, range(rank, len(test_set), world_size))  # disjoint, no padding
    counts = torch.zeros(2, device=device)  # [correct, seen]
    dtype = next(model.parameters()).dtype
    with torch.no_grad():
        for images, labels in DataLoader(mine, batch_size=500):
            images, labels = images.to(device, dtype), labels.to(device)
            counts[0] += (model(images).argmax(1) == labels).sum()
            counts[1] += len(labels)
    if world_size > 1:
        dist.all_reduce(counts)
    model.train()  # back to training mode (it matters with dropout or batch norm)
    return (counts[0] / counts[1]).item()


def save_and_reload(model, path: str, rank: int, world_size: int, device) -> dict:
    """Rank 0 writes the checkpoint; every rank reads it back onto its own device."""
    if rank == 0:
        torch.save(model.state_dict(), path)  # the plain module's weights: no "module."
    if world_size > 1:
        dist.barrier()  # nobody reads before rank 0 has finished writing
    # map_location: a tensor saved from cuda:0 would else load onto cuda:0 on every rank
    return torch.load(path, map_location=device, weights_only=True)


def maybe_crash(rank: int, step: int, args) -> None:
    """Fault injection for the launcher and failure chapters: --crash-rank R at step K."""
    if rank == getattr(args, "crash_rank", None) and step == args.crash_at_step:
        raise RuntimeError(f"rank {rank} crashed on purpose at step {step}")


# --- the three modes ----------------------------------------------------------------------


def train_and_save(mode: str, rank: int, world_size: int, args, device, events) -> None:
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = MnistNet().to(device, getattr(torch, args.dtype))
    if mode == "ddp":
        model = wrap(model, device)
    train(model, mode, rank, world_size, args, device, events)
    plain = model.module if mode == "ddp" else model  # the model DDP wraps
    if args.checkpoint:
        loaded = save_and_reload(plain, args.checkpoint, rank, world_size, device)
        largest = max((loaded[k] - v).abs().max().item()
                      for k, v in plain.state_dict().items())
        if args.demo != "compare" or rank == 0:  # compare's table checks the files
            say(rank, f"saved {args.checkpoint} (rank 0) and reloaded it: largest "
                      f"difference from my weights {largest:g}")
        events.emit(rank, "checkpoint", path=args.checkpoint, largest_difference=largest)


def rank_main(rank: int, job: Job, args, mode: str) -> None:
    """One rank of a manual or DDP job, under this worker's launcher or under torchrun."""
    share_cores(job.world_size)
    events = Events(args.events)
    events.emit(rank, "environment", mode=mode, pid=os.getpid(),
                threads=torch.get_num_threads(), variables=dict(os.environ))
    with joined(job, rank) as device:
        if job.started_as_rank:  # no parent prepared the data: one rank per machine does
            if int(os.environ["LOCAL_RANK"]) == 0:
                say(rank, f"data: {prepare_mnist(args.data_root, args.download)}")
            dist.barrier()  # the others wait until the files are there
        train_and_save(mode, rank, job.world_size, args, device, events)


def single(args, events: Events, device: torch.device | None = None,
           mode: str = "single") -> int:
    """One process, the whole global batch: the reference the ranks must match. On
    ``device``; by itself, on the GPU if there is one."""
    if device is None:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    events.emit(0, "environment", mode=mode, pid=os.getpid(), device=str(device),
                threads=torch.get_num_threads(), variables=dict(os.environ))
    train_and_save(mode, 0, 1, args, device, events)
    return 0


def compare(job: Job, args, events: Events) -> int:
    """The three modes one after the other, each saving its weights in --checkpoint-dir.

    The one process computes where the ranks do, so that their times compare like with
    like: on the CPU under gloo (even where a GPU is visible), on GPU 0 under nccl. On the
    CPU it has a thread per core this process may use (torch's default ignores a CPU
    quota), then runs again with one thread, "one_thread", for its times only."""
    device = torch.device("cuda", 0) if job.backend == "nccl" else torch.device("cpu")
    on_cpu = device.type == "cpu"
    for mode in ["single"] + ["one_thread"] * on_cpu + ["manual", "ddp"]:
        args.checkpoint = (str(Path(args.checkpoint_dir) / f"{mode}-{args.dtype}.pt")
                           if mode != "one_thread" else None)
        say_main(f"--- {mode}")
        if mode in ("single", "one_thread"):
            if on_cpu:
                torch.set_num_threads(1 if mode == "one_thread" else physical_cores())
            code = single(args, events, device, mode)
        else:
            code = run_ranks(job.on_fresh_port(), rank_main, args, mode, preload=PRELOAD)
        if code:
            return code
    return 0


# --- what goes wrong ----------------------------------------------------------------------


def mistakes(args, events: Events) -> int:
    """The recipe's mistakes, each shown by the order, error or count it produces."""
    size, world_size = args.test_images, args.world_size
    for calls_set_epoch in (True, False):  # the first indices rank 0 gets in each epoch
        sampler = DistributedSampler(range(size), num_replicas=world_size, rank=0,
                                     shuffle=True, seed=args.seed)
        for epoch in range(2):
            if calls_set_epoch:
                sampler.set_epoch(epoch)
            first = list(sampler)[:6]
            called = "with" if calls_set_epoch else "without"
            say_main(f"{called} set_epoch, epoch {epoch}: first indices {first}")
            events.emit("main", "order", set_epoch=calls_set_epoch, epoch=epoch,
                        first=first)
    try:  # the sampler decides the order, so the DataLoader may not shuffle as well
        DataLoader(range(size), sampler=sampler, shuffle=True)
    except ValueError as error:
        say_main(f"DataLoader(sampler=..., shuffle=True) -> ValueError: {error}")
        events.emit("main", "mistake", mistake="sampler and shuffle", error=str(error))
    # device_ids on a CPU model: DDP refuses it in its constructor, so one rank shows it
    sockets_on_loopback()
    dist.init_process_group("gloo", store=loopback_store(0, 1, 0, timedelta(seconds=30)),
                            rank=0, world_size=1)
    try:
        DDP(MnistNet(), device_ids=[0])  # right for a model on GPU 0; this one is on CPU
    except ValueError as error:
        say_main(f"DDP(cpu_model, device_ids=[0]) -> ValueError: {first_line(error)}")
        events.emit("main", "mistake", mistake="device_ids", error=str(error))
    finally:
        dist.destroy_process_group()
    # evaluating with DistributedSampler: it pads every rank's share to the same length
    seen = [i for r in range(world_size)
            for i in DistributedSampler(range(size), world_size, r, shuffle=False)]
    twice = sorted({i for i in seen if seen.count(i) > 1})
    say_main(f"DistributedSampler over {size} test images on {world_size} ranks: "
             f"{len(seen)} scored, images {twice} twice")
    events.emit("main", "mistake", mistake="padding", size=size, seen=len(seen),
                twice=twice)
    return 0


# --- command line -------------------------------------------------------------------------

# Imported by every rank before it joins its group: torch._dynamo imported later (the first
# optimizer imports it) keeps the group alive past destroy_process_group.
PRELOAD = PRELOADS["ddp_mnist"]  # (in workers/__init__.py)


def add_training_options(parser, epochs: int = 5, train_images: int | None = None) -> None:
    parser.add_argument("--epochs", type=positive_int, default=epochs,
                        help=f"default {epochs}")
    parser.add_argument("--batch-size", type=positive_int, default=40,
                        help="global batch, split evenly over the ranks (default 40)")
    parser.add_argument("--lr", type=positive_float, default=0.03, help="default 0.03")
    parser.add_argument("--seed", type=int, default=0, help="default 0")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                        help="float64 makes rounding too small for training to amplify "
                             "(default float32)")
    parser.add_argument("--data-root", default=DEFAULT_DATA_ROOT, metavar="DIR",
                        help="where MNIST/raw is or will be (default: data/ in the clone)")
    parser.add_argument("--download", action="store_true",
                        help="fetch the full 60,000 + 10,000 images (needs network)")
    parser.add_argument("--train-images", type=positive_int, default=train_images,
                        metavar="N", help="train on the first N images only (default: all)")


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.ddp_mnist",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    single_demo = demos.add_parser("single", help="one process, the whole global batch")
    manual = demos.add_parser("manual", help="N ranks averaging gradients by hand")
    ddp = demos.add_parser("ddp", help="N ranks with DistributedDataParallel")
    compare_demo = demos.add_parser("compare", help="single, manual and ddp, in turn")
    wrong = demos.add_parser("mistakes", help="set_epoch, sampler and shuffle, device_ids "
                                              "on a CPU model, padded evaluation")
    for demo in (single_demo, manual, ddp):
        add_training_options(demo)
        demo.add_argument("--checkpoint", metavar="PATH",
                          help="rank 0 saves the final weights here; all ranks reload them")
    add_training_options(compare_demo, epochs=1)
    compare_demo.add_argument("--checkpoint-dir", metavar="DIR", required=True,
                              help="an existing folder for single-, manual- and "
                                   "ddp-DTYPE.pt (DTYPE: --dtype)")
    for demo in (manual, ddp):
        demo.add_argument("--crash-rank", type=int, metavar="R",
                          help="rank R raises an exception at step --crash-at-step")
        demo.add_argument("--crash-at-step", type=int, default=5, metavar="K",
                          help="the global step at which --crash-rank fails (default 5)")
    for demo in (manual, ddp, compare_demo):
        add_job_options(demo)
    wrong.add_argument("--world-size", type=positive_int, default=3,
                       help="the ranks the samplers split for (default 3)")
    wrong.add_argument("--test-images", type=positive_int, default=1000, metavar="N",
                       help="the size of the data set they split (default 1000)")
    wrong.add_argument("--seed", type=int, default=0, help="default 0")
    for demo in (single_demo, manual, ddp, compare_demo, wrong):
        add_common_options(demo, timeout=120)
    return parser


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    events = open_events(args.events)
    if args.demo == "mistakes":  # one process, no data: the samplers and DDP's constructor
        return mistakes(args, events)
    least = 1 if args.demo == "ddp" else 2  # DDP runs on one rank too (one GPU, say)
    job = None if args.demo == "single" else job_from_args(parser, args, least)
    world_size = job.world_size if job else 1
    if args.batch_size % world_size:
        parser.error(f"--batch-size {args.batch_size} does not split evenly over "
                     f"{world_size} ranks")
    for folder in [getattr(args, "checkpoint_dir", None),
                   os.path.dirname(os.path.abspath(args.checkpoint))
                   if getattr(args, "checkpoint", None) else None]:
        if folder and not os.path.isdir(folder):
            fail(f"cannot write checkpoints in {folder}: no such folder")
    if job and job.started_as_rank:  # torchrun (or a script) started this process as a rank
        if args.demo not in ("manual", "ddp"):
            fail(f"{args.demo} starts its own jobs: run it without torchrun")
        return run_ranks(job, rank_main, args, args.demo, preload=PRELOAD)
    try:
        say_main(f"data: {prepare_mnist(args.data_root, args.download)}")
    except OSError as error:
        fail(f"cannot prepare MNIST under {args.data_root}: {first_line(error)}")
    say_main(f"{args.demo}: global batch {args.batch_size}, "
             f"{args.batch_size // world_size} per rank on {world_size} rank(s)")
    if args.demo == "single":
        return single(args, events)
    if args.demo == "compare":
        return compare(job, args, events)
    return run_ranks(job, rank_main, args, args.demo, preload=PRELOAD)


if __name__ == "__main__":
    exit_now(main())
