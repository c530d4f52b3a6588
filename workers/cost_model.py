"""Predict, then measure: a cost model of collectives, fitted on this machine.

A message of n bytes costs T = alpha + n / beta: a fixed latency alpha, whatever its size,
and a bandwidth beta. A collective is a sequence of such messages, so its cost is a count of
latencies and a count of bytes: a ring all-reduce over N ranks takes 2(N - 1) steps, each
rank sending 2(N - 1)/N of the tensor. This worker times each collective over a grid of
message sizes at one world size, so that the page can fit alpha and beta per collective on
some of the points and predict the others before looking at them.

    python -m workers.cost_model grid --world-size 2 --backend gloo
    python -m workers.cost_model grid --world-size 3 --sizes 4096 1048576 --trials 9
    python -m workers.cost_model uses --world-size 2 --fits fits.json   # the page writes it
    python -m workers.cost_model uses --world-size 4 --uses tensor-parallel --fits fits.json
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist

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
    open_events,
    positive_float,
    positive_int,
    say,
)

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
DEFAULT_SIZES = [1 << k for k in range(10, 23, 2)]  # 1 KiB, 4 KiB, ..., 4 MiB


# --- the model ----------------------------------------------------------------------------


def terms(collective: str, world_size: int) -> tuple[float, float]:
    """The model's two terms for one collective at N ranks, as gloo runs it in torch 2.15:
    ``(steps, share)``, so that a tensor of n bytes costs steps * alpha + share * n / beta
    (n: the bytes of the whole tensor; for reduce_scatter its input, for all_gather its
    output). Each collective's copies in memory scale with n too: its own beta holds
    them, at the world size it was fitted at."""
    if collective == "all_reduce":  # a ring: reduce-scatter, then all-gather
        return 2 * (world_size - 1), 2 * (world_size - 1) / world_size
    if collective == "reduce_scatter":  # gloo: a clone, an all_reduce of it whole, a copy
        return 2 * (world_size - 1), 2 * (world_size - 1) / world_size
    if collective == "all_gather":  # a ring: each rank's part goes round once
        return world_size - 1, (world_size - 1) / world_size
    if collective == "broadcast":  # a binomial tree: ceil(log2 N) rounds, the whole tensor
        rounds = math.ceil(math.log2(world_size)) if world_size > 1 else 0
        return rounds, rounds
    raise ValueError(f"no model for {collective!r}: one of {', '.join(COLLECTIVES)}")


@dataclass(frozen=True)
class Fit:
    """alpha (seconds) and 1 / beta (seconds per byte), each with its standard error, and
    the fit's relative residuals (measured / predicted - 1) at the points it was given."""

    alpha: float
    alpha_error: float
    per_byte: float
    per_byte_error: float
    residuals: tuple[float, ...]

    @property
    def beta(self) -> float:
        """Bytes per second."""
        return 1 / self.per_byte if self.per_byte > 0 else math.inf

    def predict(self, steps: float, share: float, size: float) -> float:
        return steps * self.alpha + share * size * self.per_byte


def fit(points: list[tuple[float, float, float, float]]) -> Fit:
    """alpha and 1 / beta from ``(steps, share, size, seconds)`` points, by least squares on
    the model's own terms, seconds = steps * alpha + share * size / beta, each point weighed
    by 1 / seconds**2: relative errors count alike, so 1 KiB messages weigh as much as
    4 MiB ones. Standard errors from the residuals (at least three points)."""
    if len(points) < 3:
        raise ValueError(f"a fit of two parameters needs at least 3 points, got "
                         f"{len(points)}")
    # rows of the weighted problem: (steps / t, share * size / t) . (alpha, 1/beta) = 1
    rows = [(steps / t, share * size / t) for steps, share, size, t in points]
    aa = sum(a * a for a, _ in rows)
    ab = sum(a * b for a, b in rows)
    bb = sum(b * b for _, b in rows)
    ay = sum(a for a, _ in rows)
    by = sum(b for _, b in rows)
    det = aa * bb - ab * ab
    if det <= 0 or det <= 1e-12 * aa * bb:
        raise ValueError("the points cannot separate alpha from beta: give sizes that "
                         "differ")
    alpha = (bb * ay - ab * by) / det
    per_byte = (aa * by - ab * ay) / det
    relative = [a * alpha + b * per_byte - 1 for a, b in rows]  # predicted / measured - 1
    variance = sum(r * r for r in relative) / max(len(rows) - 2, 1)
    residuals = tuple(1 / (1 + r) - 1 for r in relative)  # measured / predicted - 1
    return Fit(alpha, math.sqrt(variance * bb / det), per_byte,
               math.sqrt(variance * aa / det), residuals)


# --- the timings --------------------------------------------------------------------------


# the flat forms' names since 2.13; 2.11 knows only the old ones (reduce_scatter_tensor,
# all_gather_into_tensor), which 2.15 keeps as aliases
REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def collective_call(name: str, numel: int, world_size: int, device):
    """A function that runs collective ``name`` once over a tensor of ``numel`` float32
    elements (``numel`` a multiple of the world size), and the bytes the model counts."""
    whole = torch.ones(numel, device=device)
    part = torch.ones(numel // world_size, device=device)
    if name == "all_reduce":
        return (lambda: dist.all_reduce(whole)), whole
    if name == "reduce_scatter":
        return (lambda: REDUCE_SCATTER(part, whole)), whole
    if name == "all_gather":
        return (lambda: ALL_GATHER(whole, part)), whole
    return (lambda: dist.broadcast(whole, src=0)), whole


def timed(call, device, warmup: int, trials: int) -> list[float]:
    """``warmup`` untimed calls, then ``trials`` timed ones, each after a barrier, as the
    collectives chapter measured bandwidth: seconds on this rank."""
    seconds = []
    for trial in range(warmup + trials):
        dist.barrier()
        synchronize(device)
        begin = time.perf_counter()
        call()
        synchronize(device)
        if trial >= warmup:
            seconds.append(time.perf_counter() - begin)
    return seconds


def grid(rank: int, world_size: int, device, events: Events, collectives, sizes, warmup,
         trials, predicted: dict) -> None:
    """Each collective at each size, timed; beside it the time ``predicted`` for it
    (``{collective: {bytes: seconds}}``), where one was made before the run."""
    for name in collectives:
        for size in sizes:
            numel = max(size // 4 // world_size, 1) * world_size
            call, tensor = collective_call(name, numel, world_size, device)
            seconds = timed(call, device, warmup, trials)
            nbytes = tensor.numel() * tensor.element_size()
            guess = predicted.get(name, {}).get(str(nbytes))
            if rank == 0:
                median = statistics.median(seconds)
                said = f"{name:<15}{nbytes:>9} B: {median * 1e6:9.0f} us"
                if guess is not None:
                    said += f", predicted {guess * 1e6:.0f} us"
                say(rank, said + f" (rank 0's median of {trials})")
            events.emit(rank, "timing", collective=name, size=nbytes, world_size=world_size,
                        seconds=seconds, predicted=guess)
    events.emit(rank, "gloo records", records=gloo_records(collectives, world_size, device))


def gloo_records(collectives, world_size: int, device) -> dict:
    """What the backend ran for one call of each collective, as its flight recorder names
    it (``gloo:all_reduce``, ...: the hangs chapter reads the same records)."""
    records = {}
    for name in collectives:
        call, _ = collective_call(name, world_size * 256, world_size, device)
        dist.barrier()
        last = max((entry["record_id"] for entry in flight_records()), default=-1)
        call()
        records[name] = [entry["profiling_name"] for entry in flight_records()
                         if entry["record_id"] > last]
    return records


def flight_records() -> list[dict]:
    """This rank's flight recorder entries, oldest first."""
    import pickle

    return pickle.loads(torch._C._distributed_c10d._dump_fr_trace()).get("entries", [])


# --- the model used: three costs the book measured elsewhere -----------------------------


def predicted(fits: dict, collective: str, world_size: int, size: float) -> float:
    """Seconds the fitted model gives ``collective`` over ``size`` bytes at N ranks."""
    steps, share = terms(collective, world_size)
    return steps * fits[collective]["alpha"] + share * size * fits[collective]["per_byte"]


def timed_all_reduce(step_buckets: list, bucket):
    """A DDP communication hook: the bucket's all-reduce, after a barrier, timed and
    recorded in ``step_buckets``, then averaged."""
    buffer = bucket.buffer()
    dist.barrier()
    begin = time.perf_counter()
    dist.all_reduce(buffer)
    step_buckets.append((bucket.index(), buffer.numel() * buffer.element_size(),
                         time.perf_counter() - begin))
    future = torch.futures.Future()
    future.set_result(buffer.div_(dist.get_world_size()))
    return future


def zero2_step(shard: torch.Tensor, whole: torch.Tensor) -> None:
    """ZeRO-2's communication in a step: each rank gets its shard's gradients summed, then
    everyone gets every shard's updated parameters."""
    REDUCE_SCATTER(shard, whole)
    ALL_GATHER(whole, shard)


def ddp_buckets(rank: int, world_size: int, device, events: Events, fits: dict, caps,
                warmup: int, steps: int) -> None:
    """DDP on the MNIST net at each bucket cap: each bucket's all-reduce timed inside a
    communication hook, after a barrier; the buckets' predicted sum said before any timed
    step."""
    from torch.nn import functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from workers.mnist import MnistNet

    generator = torch.Generator().manual_seed(rank)
    images = torch.randn(64, 1, 28, 28, generator=generator).to(device)
    labels = torch.randint(0, 10, (64,), generator=generator).to(device)
    for cap in caps:
        torch.manual_seed(0)
        model = DDP(MnistNet().to(device), bucket_cap_mb=cap)
        step_buckets = []  # (bucket index, bytes, seconds) of this step's all-reduces
        model.register_comm_hook(step_buckets, timed_all_reduce)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        seconds, guess = [], None
        for step in range(warmup + steps):
            step_buckets.clear()
            optimizer.zero_grad()
            F.cross_entropy(model(images), labels).backward()
            optimizer.step()
            if step < warmup:  # the buckets DDP keeps once it has rebuilt them
                sizes = [size for _, size, _ in sorted(step_buckets)]
                guess = sum(predicted(fits, "all_reduce", world_size, b) for b in sizes)
                if step == warmup - 1 and rank == 0:
                    say(rank, f"bucket_cap_mb={cap:g}: {len(sizes)} bucket"
                              f"{'s' * (len(sizes) != 1)} of "
                              f"{sizes} B, predicted {guess * 1e6:.0f} us of all-reduce "
                              f"per step")
            else:
                seconds.append(sum(t for *_, t in step_buckets))
        if rank == 0:
            say(rank, f"bucket_cap_mb={cap:g}: measured "
                      f"{statistics.median(seconds) * 1e6:.0f} us per step (median)")
        events.emit(rank, "ddp buckets", cap_mb=cap, buckets=sizes, predicted=guess,
                    seconds=seconds)


def zero2_against_ddp(rank: int, world_size: int, device, events: Events, fits: dict,
                      sizes, warmup: int, trials: int) -> None:
    """ZeRO-2's communication for a step (the gradients reduce-scattered, the parameters
    all-gathered) against DDP's (one all-reduce of the gradients), predicted, then timed."""
    for size in sizes:
        numel = -(-size // 4 // world_size) * world_size  # padded to whole shards
        whole = torch.ones(numel, device=device)
        shard = torch.ones(numel // world_size, device=device)
        nbytes = numel * 4
        guess = {"ddp": predicted(fits, "all_reduce", world_size, nbytes),
                 "zero2": predicted(fits, "reduce_scatter", world_size, nbytes)
                 + predicted(fits, "all_gather", world_size, nbytes)}
        if rank == 0:
            say(rank, f"{nbytes} B of gradients: predicted DDP "
                      f"{guess['ddp'] * 1e6:.0f} us, "
                      f"ZeRO-2 {guess['zero2'] * 1e6:.0f} us")
        seconds = {"ddp": timed(partial(dist.all_reduce, whole), device, warmup, trials),
                   "zero2": timed(partial(zero2_step, shard, whole), device, warmup,
                                  trials)}
        sent = {"ddp": terms("all_reduce", world_size)[1] * nbytes,
                "zero2": (terms("reduce_scatter", world_size)[1]
                          + terms("all_gather", world_size)[1]) * nbytes}
        if rank == 0:
            say(rank, f"{nbytes} B of gradients: measured DDP "
                      f"{statistics.median(seconds['ddp']) * 1e6:.0f} us, ZeRO-2 "
                      f"{statistics.median(seconds['zero2']) * 1e6:.0f} us (medians)")
        events.emit(rank, "zero2", size=nbytes, predicted=guess, seconds=seconds, sent=sent)


def tensor_parallel_layer(rank: int, world_size: int, device, events: Events, fits: dict,
                          token_counts, width: int, warmup: int, trials: int) -> None:
    """One tensor-parallel MLP's forward, split as the tensor-parallel chapter splits it
    (``up`` by its output features, ``down`` by its input features): each rank's partial
    output, tokens x width floats, all-reduced; predicted, then timed."""
    hidden = 4 * width
    generator = torch.Generator().manual_seed(0)  # the same whole weights on every rank
    up = torch.randn(hidden, width, generator=generator).to(device)  # as nn.Linear's
    down = torch.randn(width, hidden, generator=generator).to(device)
    mine = slice(rank * hidden // world_size, (rank + 1) * hidden // world_size)
    for tokens in token_counts:
        x = torch.randn(tokens, width, generator=generator).to(device)
        partial_sum = torch.relu(x @ up[mine].T) @ down[:, mine].T  # my hidden units' part
        nbytes = partial_sum.numel() * partial_sum.element_size()
        guess = predicted(fits, "all_reduce", world_size, nbytes)
        if rank == 0:
            say(rank, f"{tokens} tokens x {width}: the all-reduce of {nbytes} B, predicted "
                      f"{guess * 1e6:.0f} us")
        seconds = timed(partial(dist.all_reduce, partial_sum), device, warmup, trials)
        if rank == 0:
            say(rank, f"{tokens} tokens x {width}: measured "
                      f"{statistics.median(seconds) * 1e6:.0f} us (median)")
        events.emit(rank, "tensor parallel", tokens=tokens, width=width, size=nbytes,
                    predicted=guess, seconds=seconds)


# --- one rank, from start to finish -------------------------------------------------------


def rank_main(rank: int, job: Job, args) -> None:
    events = Events(args.events)
    share_cores(job.world_size)  # a thread per core in every rank slows gloo's copies
    with joined(job, rank) as device:
        if args.demo == "grid":
            grid(rank, job.world_size, device, events, args.collectives, args.sizes,
                 args.warmup, args.trials, args.predicted)
            return
        if "ddp" in args.uses:
            ddp_buckets(rank, job.world_size, device, events, args.fits, args.caps,
                        args.warmup, args.trials)
        if "zero2" in args.uses:
            zero2_against_ddp(rank, job.world_size, device, events, args.fits,
                              [mnist_gradient_bytes(), 4 << 20], args.warmup, args.trials)
        if "tensor-parallel" in args.uses:
            tensor_parallel_layer(rank, job.world_size, device, events, args.fits,
                                  args.tokens, args.width, args.warmup, args.trials)


USES = ("ddp", "zero2", "tensor-parallel")


def gloo_only(demo) -> None:
    """--backend's default is gloo here: the model counts gloo's algorithms."""
    for action in demo._actions:
        if action.dest == "backend":
            action.default = "gloo"
            action.help = ("gloo (default), whose algorithms the model counts; auto and "
                           "nccl are refused where they give nccl")


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.cost_model",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    grid_demo = demos.add_parser("grid", help="time each collective at each message size")
    grid_demo.add_argument("--collectives", nargs="+", choices=COLLECTIVES,
                           default=list(COLLECTIVES), metavar="NAME",
                           help=f"which to time (default: {' '.join(COLLECTIVES)})")
    grid_demo.add_argument("--sizes", type=positive_int, nargs="+", default=DEFAULT_SIZES,
                           metavar="BYTES", help="message sizes (default 1 KiB ... 4 MiB)")
    # gloo grows a connection's buffers to a new size's messages: the first calls at a size
    # can take several times as long as the next ones
    grid_demo.add_argument("--warmup", type=int, default=5,
                           help="untimed runs first, at each size (default 5)")
    grid_demo.add_argument("--trials", type=positive_int, default=7,
                           help="timed runs (default 7)")
    uses_demo = demos.add_parser("uses", help="predict, then time: DDP's buckets at "
                                 "two caps, ZeRO-2's two collectives against DDP's one, "
                                 "a tensor-parallel MLP's all-reduce")
    uses_demo.add_argument("--uses", nargs="+", choices=USES, default=list(USES),
                           metavar="USE", help=f"which (default: {' '.join(USES)})")
    uses_demo.add_argument("--tokens", type=positive_int, nargs="+", default=[64, 1024],
                           metavar="N", help="the tensor-parallel MLP's tokens "
                           "(default 64 1024)")
    uses_demo.add_argument("--width", type=positive_int, default=256,
                           help="the tensor-parallel MLP's width (default 256, the "
                           "tensor-parallel chapter's; hidden is 4 x width)")
    model = uses_demo.add_mutually_exclusive_group(required=True)
    model.add_argument("--fits", metavar="PATH",
                       help='a JSON file of the fitted model: {"all_reduce": {"alpha": '
                       'seconds, "per_byte": seconds}, ...}, for every collective')
    model.add_argument("--link", type=positive_float, nargs=2, metavar=("ALPHA", "BETA"),
                       help="one typed link for every collective instead: alpha in seconds "
                       "and beta in bytes per second (say 5e-6 25e9)")
    uses_demo.add_argument("--caps", type=positive_float, nargs="+", default=[25, 0.02],
                           metavar="MB",
                           help="DDP's bucket_cap_mb values (default 25 0.02)")
    uses_demo.add_argument("--warmup", type=int, default=5,
                           help="untimed steps or calls first (default 5)")
    uses_demo.add_argument("--trials", type=positive_int, default=7,
                           help="timed steps or calls (default 7)")
    add_job_options(uses_demo)
    gloo_only(uses_demo)
    add_common_options(uses_demo, timeout=60)
    grid_demo.add_argument("--predictions", metavar="PATH",
                           help="a JSON file of the times predicted for this world size, "
                           '{"all_reduce": {"1024": seconds, ...}, ...}, printed beside '
                           "the times measured")
    add_job_options(grid_demo)
    gloo_only(grid_demo)
    add_common_options(grid_demo, timeout=60)
    return parser


def read_predictions(parser, path: str | None) -> dict:
    """The predictions file, checked: a mistake in it is one line, before any rank
    starts."""
    if path is None:
        return {}
    try:
        with open(path) as file:
            predicted = json.load(file)
    except OSError as error:
        parser.error(f"cannot read the predictions file {path}: {error.strerror}")
    except ValueError as error:
        parser.error(f"the predictions file {path} is not JSON: {error}")
    if not isinstance(predicted, dict) or not all(
            isinstance(times, dict)
            and all(isinstance(t, (int, float)) for t in times.values())
            for times in predicted.values()):
        parser.error(f"the predictions file {path} must map each collective to "
                     '{"bytes": seconds, ...}')
    return predicted


def read_fits(parser, path: str) -> dict:
    """The fitted model's file, checked: alpha and per_byte for every collective."""
    try:
        with open(path) as file:
            fits = json.load(file)
    except OSError as error:
        parser.error(f"cannot read the fits file {path}: {error.strerror}")
    except ValueError as error:
        parser.error(f"the fits file {path} is not JSON: {error}")
    if not isinstance(fits, dict) or any(
            not isinstance(fits.get(name), dict)
            or not all(isinstance(fits[name].get(k), (int, float))
                       for k in ("alpha", "per_byte")) for name in COLLECTIVES):
        parser.error(f"the fits file {path} must give every collective "
                     '{"alpha": seconds, "per_byte": seconds}: ' + ", ".join(COLLECTIVES))
    return fits


def mnist_gradient_bytes() -> int:
    """The bytes of the MNIST net's gradients: what DDP all-reduces each step."""
    from workers.mnist import MnistNet

    return sum(p.numel() * p.element_size() for p in MnistNet().parameters())


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    if args.warmup < 0:
        parser.error("--warmup must be 0 or more")
    if args.demo == "grid":
        args.predicted = read_predictions(parser, args.predictions)
    else:
        args.fits = (read_fits(parser, args.fits) if args.fits else
                     {name: {"alpha": args.link[0], "per_byte": 1 / args.link[1]}
                      for name in COLLECTIVES})
        if args.warmup < 1:
            parser.error("--warmup must be 1 or more: DDP's buckets are known after a step")
    os.environ["TORCH_FR_BUFFER_SIZE"] = "64"  # the recorder on, whatever the shell says
    job = job_from_args(parser, args)
    if job.backend != "gloo":
        parser.error(f"--backend {args.backend} gives {job.backend}: this worker's model "
                     f"counts gloo's algorithms (nccl chooses rings and trees by size), so "
                     f"it runs with --backend gloo only")
    open_events(args.events)
    return run_ranks(job, rank_main, args)


if __name__ == "__main__":
    exit_now(main())
