"""Predict, then measure: a cost model of collectives, fitted on this machine.

A message of n bytes costs T = alpha + n / beta: a fixed latency alpha, whatever its size, and
a bandwidth beta. A collective is a sequence of such messages, so its cost is a count of
latencies and a count of bytes: a ring all-reduce over N ranks takes 2(N - 1) steps, each
rank sending 2(N - 1)/N of the tensor. This worker times each collective over a grid of
message sizes at one world size, so that the page can fit alpha and beta per collective on
some of the points and predict the others before looking at them.

    python -m workers.cost_model grid --world-size 2 --backend gloo
    python -m workers.cost_model grid --world-size 3 --sizes 4096 1048576 --trials 9
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import dataclass

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
    positive_int,
    say,
)

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
DEFAULT_SIZES = [1 << k for k in range(10, 23, 2)]  # 1 KiB, 4 KiB, ..., 4 MiB


# --- the model ------------------------------------------------------------------------------


def terms(collective: str, world_size: int) -> tuple[float, float]:
    """The model's two terms for one collective at N ranks, as gloo runs it in torch 2.15:
    ``(steps, share)``, so that a tensor of n bytes costs steps * alpha + share * n / beta
    (n: the bytes of the whole tensor; for reduce_scatter its input, for all_gather its
    output). Each collective's copies in memory scale with n too: its own beta holds them."""
    n = world_size
    if collective == "all_reduce":  # a ring: reduce-scatter, then all-gather
        return 2 * (n - 1), 2 * (n - 1) / n
    if collective == "reduce_scatter":  # gloo: an all_reduce of the whole input, then a copy
        return 2 * (n - 1), 2 * (n - 1) / n
    if collective == "all_gather":  # a ring: each rank's part goes round once
        return n - 1, (n - 1) / n
    if collective == "broadcast":  # a binomial tree: ceil(log2 N) rounds of the whole tensor
        rounds = math.ceil(math.log2(n)) if n > 1 else 0
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
        raise ValueError(f"a fit of two parameters needs at least 3 points, got {len(points)}")
    # rows of the weighted problem: (steps / t, share * size / t) . (alpha, 1/beta) = 1
    rows = [(steps / t, share * size / t) for steps, share, size, t in points]
    aa = sum(a * a for a, _ in rows)
    ab = sum(a * b for a, b in rows)
    bb = sum(b * b for _, b in rows)
    ay = sum(a for a, _ in rows)
    by = sum(b for _, b in rows)
    det = aa * bb - ab * ab
    if det <= 0 or det <= 1e-12 * aa * bb:
        raise ValueError("the points cannot separate alpha from beta: give sizes that differ")
    alpha = (bb * ay - ab * by) / det
    per_byte = (aa * by - ab * ay) / det
    relative = [a * alpha + b * per_byte - 1 for a, b in rows]  # predicted / measured - 1
    variance = sum(r * r for r in relative) / max(len(rows) - 2, 1)
    residuals = tuple(1 / (1 + r) - 1 for r in relative)  # measured / predicted - 1
    return Fit(alpha, math.sqrt(variance * bb / det), per_byte,
               math.sqrt(variance * aa / det), residuals)


# --- the timings ----------------------------------------------------------------------------


def collective_call(name: str, numel: int, world_size: int, device):
    """A function that runs collective ``name`` once over a tensor of ``numel`` float32
    elements (``numel`` a multiple of the world size), and the bytes the model counts."""
    whole = torch.ones(numel, device=device)
    part = torch.ones(numel // world_size, device=device)
    if name == "all_reduce":
        return (lambda: dist.all_reduce(whole)), whole
    if name == "reduce_scatter":
        return (lambda: dist.reduce_scatter_tensor(part, whole)), whole
    if name == "all_gather":
        return (lambda: dist.all_gather_into_tensor(whole, part)), whole
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
                said = f"{name:<15}{nbytes:>9} B: {statistics.median(seconds) * 1e6:9.0f} us"
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


# --- one rank, from start to finish ---------------------------------------------------------


def rank_main(rank: int, job: Job, args) -> None:
    events = Events(args.events)
    share_cores(job.world_size)  # a thread per core in every rank slows gloo's copies
    with joined(job, rank) as device:
        grid(rank, job.world_size, device, events, args.collectives, args.sizes,
             args.warmup, args.trials, args.predicted)


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.cost_model", description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    grid_demo = demos.add_parser("grid", help="time each collective at each message size")
    grid_demo.add_argument("--collectives", nargs="+", choices=COLLECTIVES,
                           default=list(COLLECTIVES), metavar="NAME",
                           help=f"which to time (default: {' '.join(COLLECTIVES)})")
    grid_demo.add_argument("--sizes", type=positive_int, nargs="+", default=DEFAULT_SIZES,
                           metavar="BYTES", help="message sizes (default 1 KiB ... 4 MiB)")
    grid_demo.add_argument("--warmup", type=int, default=2,
                           help="untimed runs first (default 2)")
    grid_demo.add_argument("--trials", type=positive_int, default=5,
                           help="timed runs (default 5)")
    grid_demo.add_argument("--predictions", metavar="PATH",
                           help="a JSON file of the times predicted for this world size, "
                           '{"all_reduce": {"1024": seconds, ...}, ...}, printed beside '
                           "the times measured")
    add_job_options(grid_demo)
    add_common_options(grid_demo, timeout=60)
    return parser


def read_predictions(parser, path: str | None) -> dict:
    """The predictions file, checked: a mistake in it is one line, before any rank starts."""
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
            isinstance(times, dict) and all(isinstance(t, (int, float)) for t in times.values())
            for times in predicted.values()):
        parser.error(f"the predictions file {path} must map each collective to "
                     '{"bytes": seconds, ...}')
    return predicted


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    if args.warmup < 0:
        parser.error("--warmup must be 0 or more")
    args.predicted = read_predictions(parser, args.predictions)
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "64")  # a flight recorder in every rank
    job = job_from_args(parser, args)
    open_events(args.events)
    return run_ranks(job, rank_main, args)


if __name__ == "__main__":
    exit_now(main())
