"""Data-parallel training on MNIST: one process, gradients averaged by hand, and DDP.

    python -m workers.ddp_mnist --mode single
    python -m workers.ddp_mnist --mode manual --world-size 2
    python -m workers.ddp_mnist --mode ddp --world-size 2 --checkpoint ckpt.pt
    torchrun --standalone --nproc-per-node 2 -m workers.ddp_mnist --mode ddp

All three modes see the same data in the same order for the same --seed: the single process
takes global batches of --batch-size images, and with N ranks each rank takes its share,
--batch-size / N images, of the same global batch. So they compute the same thing, and the
chapter checks that they end with the same weights.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.utils.data import DataLoader, Subset

from workers.mnist import DEFAULT_DATA_ROOT, MnistNet, mnist_datasets, prepare_mnist
from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    fail,
    from_torchrun,
    launch,
    launch_environment,
    open_events,
    pick_backend,
    positive_float,
    positive_int,
    rank_device,
    say,
    say_main,
)
from workers.runner import free_port

# --- part 1: data parallelism by hand ------------------------------------------------------


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


def average_gradients(model: torch.nn.Module, world_size: int) -> None:
    """After backward(): replace every gradient by its mean over all ranks."""
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM)
        parameter.grad /= world_size


# --- training, in every mode ---------------------------------------------------------------


def train(rank: int, world_size: int, args, device, events: Events) -> None:
    events.emit(rank, "started", pid=os.getpid())
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = MnistNet(unused=args.mistake == "unused-parameter").to(device)
    train_set, test_set = mnist_datasets(args.data_root)
    per_rank_batch = args.batch_size // world_size
    sampler = None
    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data.distributed import DistributedSampler

        # On a GPU: device_ids=[local_rank]. On a CPU model: no device_ids at all.
        on_gpu = device.type == "cuda" or args.mistake == "device-ids-on-cpu"
        model = DDP(model, device_ids=[device.index or 0] if on_gpu else None,
                    find_unused_parameters=args.find_unused_parameters)  # fmt: skip
        sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank,
                                     shuffle=True, seed=args.seed)  # fmt: skip
        loader = DataLoader(train_set, batch_size=per_rank_batch, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    step = 0
    for epoch in range(args.epochs):
        if sampler is not None:
            if args.mistake != "no-set-epoch":
                sampler.set_epoch(epoch)  # without it: the same order every epoch
            order = list(sampler)
        else:
            order = shard(
                epoch_order(len(train_set), args.seed, epoch), rank, world_size
            )
            loader = DataLoader(Subset(train_set, order), batch_size=per_rank_batch)
        if args.show_order:
            say(rank, f"epoch {epoch}: first samples {order[:6]}")
        events.emit(rank, "order", epoch=epoch, first=order[:20], count=len(order))
        model.train()
        for batch, (images, labels) in enumerate(loader):
            if batch == args.steps_per_epoch:
                break
            if rank == args.crash_rank and step == args.crash_at_step:
                raise RuntimeError(f"rank {rank} crashed on purpose at step {step}")
            begin = time.time()
            images, labels = images.to(device), labels.to(device)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()  # under DDP, gradients are averaged here, bucket by bucket
            if args.mode == "manual":
                average_gradients(model, world_size)
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            events.emit(rank, "step", t=begin, t_end=time.time(), epoch=epoch,
                        step=step, loss=loss.item())  # fmt: skip
            step += 1
        accuracy = evaluate(model, test_set, rank, world_size, device)
        if rank == 0:
            say(
                rank,
                f"epoch {epoch}: loss {loss.item():.3f}, test accuracy {accuracy:.2%}",
            )
        events.emit(rank, "epoch", epoch=epoch, steps=step, accuracy=accuracy)

    plain = model.module if args.mode == "ddp" else model  # the model DDP wraps
    if args.checkpoint:
        save_and_reload(plain, args.checkpoint, rank, world_size, device, events)
    elif rank == 0:
        say(rank, f"finished {step} steps")


def evaluate(model, test_set, rank: int, world_size: int, device) -> float:
    """Accuracy on the whole test set: each rank scores its share, then one all_reduce."""
    model.eval()
    mine = Subset(
        test_set, range(rank, len(test_set), world_size)
    )  # disjoint, no padding
    counts = torch.zeros(2, device=device)  # [correct, seen]
    with torch.no_grad():
        for images, labels in DataLoader(mine, batch_size=500):
            images, labels = images.to(device), labels.to(device)
            counts[0] += (model(images).argmax(1) == labels).sum()
            counts[1] += len(labels)
    if world_size > 1:
        dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


def save_and_reload(
    model, path: str, rank: int, world_size: int, device, events
) -> None:
    """Rank 0 writes the checkpoint; every rank reads it back onto its own device."""
    if rank == 0:
        torch.save(
            model.state_dict(), path
        )  # the plain module's weights: no "module." prefix
        say(rank, f"saved {path}")
    if world_size > 1:
        dist.barrier()  # nobody reads before rank 0 has finished writing
    # map_location: a tensor saved from cuda:0 would otherwise load onto cuda:0 on every rank
    loaded = torch.load(path, map_location=device, weights_only=True)
    largest = max(
        (loaded[k] - v).abs().max().item() for k, v in model.state_dict().items()
    )
    say(rank, f"reloaded {path}: largest difference from my weights {largest:g}")
    events.emit(rank, "checkpoint", path=path, largest_difference=largest)


# --- one rank, from start to finish --------------------------------------------------------


def rank_main(
    rank: int, world_size: int, args, address: str | None, port: int | None
) -> None:
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    if (
        "OMP_NUM_THREADS" not in os.environ
    ):  # torchrun sets 1; share the cores otherwise
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_ranks))
    device = rank_device(args.backend, local_rank)
    events = Events(args.events)
    events.emit(rank, "environment", pid=os.getpid(), threads=torch.get_num_threads(),
                variables=launch_environment())  # fmt: skip
    if args.mode == "single":
        train(0, 1, args, device, events)
        return
    timeout = timedelta(seconds=args.timeout)
    if from_torchrun():
        dist.init_process_group(args.backend, timeout=timeout)  # env:// from torchrun
        if local_rank == 0:
            say(rank, f"data: {prepare_mnist(args.data_root, args.download)}")
        dist.barrier()  # the others wait until the files are there
    else:
        dist.init_process_group(args.backend, init_method=f"tcp://{address}:{port}",
                                rank=rank, world_size=world_size, timeout=timeout)  # fmt: skip
    try:
        train(rank, world_size, args, device, events)
    finally:
        dist.destroy_process_group()


def parse_args(argv=None):
    parser = Parser(
        prog="python -m workers.ddp_mnist", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--mode", choices=["single", "manual", "ddp"], default="ddp",
                        help="one process; N ranks averaging gradients by hand; or DDP (default)")  # fmt: skip
    parser.add_argument("--world-size", type=positive_int, default=2, help="ranks (default 2)")  # fmt: skip
    parser.add_argument("--epochs", type=positive_int, default=5, help="default 5")
    parser.add_argument("--batch-size", type=positive_int, default=40,
                        help="global batch, split evenly over the ranks (default 40)")  # fmt: skip
    parser.add_argument("--lr", type=positive_float, default=0.03, help="default 0.03")
    parser.add_argument("--seed", type=int, default=0, help="default 0")
    parser.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto",
                        help="auto: nccl with one GPU per rank when there are enough, else gloo")  # fmt: skip
    parser.add_argument("--data-root", default=DEFAULT_DATA_ROOT, metavar="DIR",
                        help="where MNIST/raw is, or will be written (default: data/ in the clone)")  # fmt: skip
    parser.add_argument("--download", action="store_true",
                        help="fetch the full 60,000 + 10,000 images (needs network)")  # fmt: skip
    parser.add_argument("--checkpoint", metavar="PATH",
                        help="rank 0 saves the final weights here; every rank reloads them")  # fmt: skip
    parser.add_argument("--steps-per-epoch", type=positive_int, metavar="K",
                        help="stop each epoch after K steps (quick runs)")  # fmt: skip
    parser.add_argument("--crash-rank", type=int, metavar="R",
                        help="rank R raises an exception at step --crash-at-step")  # fmt: skip
    parser.add_argument("--crash-at-step", type=int, default=5, metavar="K",
                        help="the global step at which --crash-rank fails (default 5)")  # fmt: skip
    parser.add_argument("--show-order", action="store_true",
                        help="print the first sample indices of every epoch")  # fmt: skip
    parser.add_argument("--mistake", choices=["no-set-epoch", "unused-parameter", "device-ids-on-cpu"],
                        help="reproduce a classic DDP mistake")  # fmt: skip
    parser.add_argument("--find-unused-parameters", action="store_true",
                        help="DDP(find_unused_parameters=True): the fix for unused-parameter")  # fmt: skip
    add_common_options(parser, timeout=120)
    args = parser.parse_args(argv)
    torchrun = from_torchrun()
    world_size = (
        1 if args.mode == "single" else torchrun[1] if torchrun else args.world_size
    )
    args.world_size = world_size
    if args.mode != "single" and world_size < 2:
        parser.error(f"--mode {args.mode} needs --world-size of at least 2 (or use --mode single)")  # fmt: skip
    if world_size > 64:
        parser.error("at most 64 ranks on one machine")
    if args.batch_size % world_size:
        parser.error(f"--batch-size {args.batch_size} does not split evenly over {world_size} ranks")  # fmt: skip
    if args.mistake and args.mode != "ddp":
        parser.error("--mistake reproduces DDP mistakes: use it with --mode ddp")
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    args.backend = pick_backend(args.backend, local_ranks)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    open_events(args.events)
    if args.checkpoint and not os.path.isdir(
        os.path.dirname(os.path.abspath(args.checkpoint))
    ):
        fail(
            f"cannot write the checkpoint {args.checkpoint}: its folder does not exist"
        )
    torchrun = from_torchrun()
    if torchrun:  # started by torchrun as one rank
        rank_main(torchrun[0], torchrun[1], args, None, None)
        return 0
    try:
        source = prepare_mnist(args.data_root, args.download)
    except OSError as error:
        fail(f"cannot prepare MNIST under {args.data_root}: {error}")
    say_main(f"data: {source}")
    say_main(f"mode {args.mode}, {args.world_size} rank(s), backend {args.backend}, "
             f"global batch {args.batch_size}, {args.batch_size // args.world_size} per rank")  # fmt: skip
    if args.mode == "single":
        rank_main(0, 1, args, None, None)
        return 0
    address = "127.0.0.1"
    port = int(os.environ.get("MASTER_PORT") or free_port(address))
    job = (args.world_size, args, address, port)
    return launch(rank_main, job, args.world_size, timeout=args.timeout,
                  preload=("torchvision", "workers.mnist"))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
