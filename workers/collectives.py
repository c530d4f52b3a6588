"""Point-to-point and collective communication, with a bandwidth benchmark.

    python -m workers.collectives p2p --world-size 3
    python -m workers.collectives collectives --world-size 4
    python -m workers.collectives ring --world-size 4
    python -m workers.collectives bandwidth --world-size 2
    torchrun --standalone --nproc-per-node 4 -m workers.collectives collectives

Every rank starts with a small tensor that says which rank it came from; each operation's
tensors are recorded before and after, on every rank, so the page can draw and check them.
An operation the backend does not support is recorded with its error, not a crash.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

from workers.job import (
    Job,
    add_job_options,
    job_from_args,
    joined,
    run_ranks,
    synchronize,
)
from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    first_line,
    open_events,
    positive_int,
    say,
)

# PyTorch 2.14 renamed the single-tensor collectives: all_gather_into_tensor became
# all_gather_single, reduce_scatter_tensor became reduce_scatter_single (the old names
# still work, with a FutureWarning). On older releases only the old names exist.
all_gather_single = (getattr(dist, "all_gather_single", None)
                     or dist.all_gather_into_tensor)
reduce_scatter_single = (getattr(dist, "reduce_scatter_single", None)
                         or dist.reduce_scatter_tensor)
UNSUPPORTED = (RuntimeError, ValueError, NotImplementedError)  # how a backend says "not me"


def start_values(rank: int, world_size: int, device) -> torch.Tensor:
    """Rank r holds [10(r+1), 10(r+1)+1, ...]: every value says where it came from."""
    return torch.arange(world_size, dtype=torch.float32, device=device) + 10 * (rank + 1)


def recorded(events: Events, rank: int, name: str, before, operation, **fields) -> None:
    """Run one operation; record its tensors before and after, and how long it took.

    An operation this backend does not support is recorded with its error instead, and
    rank 0 says so.
    """
    with events.span(rank, name, before=before, **fields) as record:
        try:
            record["after"], record["error"] = operation(), None
        except UNSUPPORTED as error:
            release = torch.__version__.split("+")[0]
            why = f"not supported by {dist.get_backend()} in torch {release}"
            record["after"], record["error"] = None, f"{why}: {first_line(error)}"
            if rank == 0:
                say(rank, f"{name} {fields.get('op', '')}".strip() + f": {why}")


# --- point-to-point -----------------------------------------------------------------------


def p2p(rank: int, world_size: int, device, events: Events) -> None:
    # Blocking: recv() returns only once the matching send() has delivered.
    if rank == 0:
        time.sleep(0.5)  # rank 1 is already waiting in recv()
        dist.send(torch.tensor([42.0], device=device), dst=1)
        say(rank, "send(42) to rank 1 after sleeping 0.5 s")
    elif rank == 1:
        box = torch.zeros(1, device=device)
        with events.span(rank, "recv") as record:
            dist.recv(box, src=0)
            record["value"] = box.item()
        say(rank, f"recv() returned {box.item():g} after blocking for rank 0")

    # Non-blocking: isend/irecv return a Work handle at once; wait() is where it blocks.
    if rank in (0, 1):
        other = 1 - rank
        outgoing = torch.tensor([float(rank)], device=device)
        incoming = torch.zeros(1, device=device)
        with events.span(rank, "isend/irecv") as record:
            begin = time.time()
            sending = dist.isend(outgoing, dst=other)
            receiving = dist.irecv(incoming, src=other)
            record["posted"] = time.time() - begin
            time.sleep(0.2)  # free to compute while the messages travel
            sending.wait()
            receiving.wait()  # only now may `incoming` be read
            record["got"] = incoming.item()
        say(rank, f"isend/irecv posted in {record['posted'] * 1000:.2f} ms; "
                  f"after wait() got {incoming.item():g}")

    # A token passed around the ring: rank r adds r and hands it to rank r+1.
    dist.barrier()
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    token = torch.zeros(1, device=device)
    with events.span(rank, "ring pass") as record:
        if rank == 0:
            dist.send(token, dst=right)
            dist.recv(token, src=left)
        else:
            dist.recv(token, src=left)
            token += rank
            dist.send(token, dst=right)
        record["token"] = token.item()
    say(rank, f"ring: token is {token.item():g} after passing rank {rank}")


# --- collectives --------------------------------------------------------------------------

REDUCE_OPS = ["SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR"]
BITWISE = {"BAND", "BOR", "BXOR"}


def collectives(rank: int, world_size: int, device, events: Events) -> None:
    n = world_size
    x = start_values(rank, n, device)

    def listed(t: torch.Tensor) -> list:  # tensors become JSON lists in the events
        return t.tolist()

    def broadcast():
        t = x.clone()
        dist.broadcast(t, src=0)
        return listed(t)

    def scatter():  # rank 0 hands element i of its tensor to rank i
        out = torch.zeros(1, device=device)
        dist.scatter(out, list(x.clone().split(1)) if rank == 0 else None, src=0)
        return listed(out)

    def gather():
        parts = [torch.zeros(1, device=device) for _ in range(n)] if rank == 0 else None
        dist.gather(x[:1].clone(), parts, dst=0)
        return [p.item() for p in parts] if rank == 0 else []

    def reduce():
        t = x.clone()
        dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)
        return listed(t) if rank == 0 else None  # other ranks' tensors: unspecified

    def all_gather():
        parts = [torch.zeros(n, device=device) for _ in range(n)]
        dist.all_gather(parts, x)
        return [v for p in parts for v in listed(p)]

    def all_gather_into_one_tensor():
        out = torch.zeros(n * n, device=device)
        all_gather_single(out, x)
        return listed(out)

    def reduce_scatter():
        out = torch.zeros(1, device=device)
        dist.reduce_scatter(out, list(x.clone().split(1)), op=dist.ReduceOp.SUM)
        return listed(out)

    def reduce_scatter_from_one_tensor():
        out = torch.zeros(1, device=device)
        reduce_scatter_single(out, x.clone(), op=dist.ReduceOp.SUM)
        return listed(out)

    def all_to_all():
        outs = [torch.zeros(1, device=device) for _ in range(n)]
        dist.all_to_all(outs, list(x.clone().split(1)))
        return [o.item() for o in outs]

    recorded(events, rank, "broadcast", listed(x), broadcast, root=0)
    recorded(events, rank, "scatter", listed(x) if rank == 0 else [], scatter, root=0)
    recorded(events, rank, "gather", listed(x[:1]), gather, root=0)
    recorded(events, rank, "reduce", listed(x), reduce, root=0, op="SUM")
    for op in REDUCE_OPS:
        all_reduce_with(op, rank, device, x, events)
    recorded(events, rank, "all_gather", listed(x), all_gather)
    recorded(events, rank, "all_gather_single", listed(x), all_gather_into_one_tensor)
    recorded(events, rank, "reduce_scatter", listed(x), reduce_scatter, op="SUM")
    recorded(events, rank, "reduce_scatter_single", listed(x),
             reduce_scatter_from_one_tensor, op="SUM")
    recorded(events, rank, "all_to_all", listed(x), all_to_all)

    time.sleep(0.2 * rank)  # arrive at the barrier at different times ...
    recorded(events, rank, "barrier", [], lambda: dist.barrier() or [])  # ... leave at once

    # Object collectives pickle any Python object: never use them with untrusted peers.
    config = [{"lr": 0.1, "from": "rank 0"}] if rank == 0 else [None]
    recorded(events, rank, "broadcast_object_list", list(config),
             lambda: dist.broadcast_object_list(config, src=0) or config)
    gathered = [None] * n
    mine = {"rank": rank, "pid": os.getpid()}
    recorded(events, rank, "all_gather_object", mine,
             lambda: dist.all_gather_object(gathered, mine) or gathered)
    say(rank, f"tried {len(REDUCE_OPS) + 14} operations; all_reduce SUM gave {sum_of(n)}")
    textbook_examples(rank, world_size, device, events)


def sum_of(n: int) -> list[float]:
    return [sum(10 * (r + 1) + i for r in range(n)) for i in range(n)]


def all_reduce_with(op: str, rank: int, device, x: torch.Tensor, events: Events) -> None:
    """all_reduce with one ReduceOp; an op the backend refuses is recorded, not fatal."""
    if op in BITWISE:  # bitwise ops need integers: rank r holds [2^r, r + 1]
        t = torch.tensor([1 << rank, rank + 1], dtype=torch.int64, device=device)
    else:
        t = x.clone()

    def all_reduce():
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        return t.tolist()

    recorded(events, rank, "all_reduce", t.tolist(), all_reduce, op=op)


def textbook_examples(rank: int, world_size: int, device, events: Events) -> None:
    """The small examples most tutorials start with; with four ranks they give p2p -> 1,
    broadcast -> 2, all_reduce -> 4, gather -> [1, 1, 1, 1], scatter -> [1] ... [4]."""
    if world_size > 1:  # p2p: both start from 0; rank 0 adds 1 and sends it to rank 1
        tensor = torch.zeros(1, device=device)
        if rank == 0:
            tensor += 1
            dist.send(tensor, dst=1)
        elif rank == 1:
            dist.recv(tensor, src=0)
        events.emit(rank, "textbook", example="p2p", value=tensor.tolist())
    tensor = torch.ones(1, device=device)  # broadcast: rank 0 adds 1; all get its value
    if rank == 0:
        tensor += 1
    dist.broadcast(tensor, src=0)
    events.emit(rank, "textbook", example="broadcast", value=tensor.tolist())
    tensor = torch.ones(1, device=device)  # all_reduce: the sum of a one from every rank
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    events.emit(rank, "textbook", example="all_reduce", value=tensor.tolist())
    ones = [torch.zeros(1, device=device) for _ in range(world_size)] if rank == 0 else None
    dist.gather(torch.ones(1, device=device), ones, dst=0)  # gather: all the ones, on 0
    if rank == 0:
        events.emit(rank, "textbook", example="gather", value=[t.item() for t in ones])
    tensor = torch.zeros(1, device=device)  # scatter: rank 0 hands i + 1 to rank i
    pieces = [torch.tensor([i + 1.0], device=device) for i in range(world_size)]
    dist.scatter(tensor, pieces if rank == 0 else None, src=0)
    events.emit(rank, "textbook", example="scatter", value=tensor.tolist())


# --- ring all-reduce by hand --------------------------------------------------------------


def ring_all_reduce(tensor: torch.Tensor, rank: int, world_size: int) -> None:
    """Sum ``tensor`` over all ranks in place: a reduce-scatter, then an all-gather.

    The tensor is cut into world_size chunks. In each of the n-1 reduce-scatter steps a rank
    sends one chunk to its right neighbour and adds the chunk arriving from its left; after
    them, rank r holds the full sum of chunk (r+1) % n. The n-1 all-gather steps pass those
    finished chunks around the ring. Each rank sends 2(n-1)/n of the tensor in all.
    """
    n = world_size
    chunks = tensor.chunk(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    incoming = torch.empty_like(chunks[0])
    for step in range(n - 1):  # reduce-scatter
        sending = dist.isend(chunks[(rank - step) % n], dst=right)
        dist.recv(incoming, src=left)
        sending.wait()
        chunks[(rank - step - 1) % n].add_(incoming)
    for step in range(n - 1):  # all-gather
        sending = dist.isend(chunks[(rank - step + 1) % n], dst=right)
        dist.recv(incoming, src=left)
        sending.wait()
        chunks[(rank - step) % n].copy_(incoming)


def ring(rank: int, world_size: int, device, events: Events, numel: int, trials: int):
    numel -= numel % world_size  # equal chunks
    generator = torch.Generator().manual_seed(rank)
    data = torch.randn(numel, generator=generator).to(device)
    by_hand, library = data.clone(), data.clone()
    ring_all_reduce(by_hand, rank, world_size)
    dist.all_reduce(library)
    difference = (by_hand - library).abs().max().item()
    say(rank, f"ring by hand vs dist.all_reduce: largest difference {difference:.2e}")
    equal = torch.allclose(by_hand, library, rtol=1e-5, atol=1e-5)
    events.emit(rank, "ring check", difference=difference, numel=numel, equal=equal)
    implementations = [("ring by hand", lambda t: ring_all_reduce(t, rank, world_size)),
                       ("dist.all_reduce", dist.all_reduce)]
    for name, reduce_all in implementations:
        seconds = []
        for _ in range(trials):
            t = data.clone()
            dist.barrier()
            begin = time.time()
            reduce_all(t)
            synchronize(device)
            seconds.append(time.time() - begin)
        median = statistics.median(seconds)
        say(rank, f"{name:<15} {numel * 4 / 1e6:.0f} MB: median {median * 1000:.1f} ms")
        events.emit(rank, "ring timing", implementation=name, seconds=median, numel=numel)


# --- bandwidth ----------------------------------------------------------------------------

DEFAULT_SIZES = [1 << k for k in range(10, 25, 2)]  # 1 KiB, 4 KiB, ..., 16 MiB


def bandwidth(rank, world_size, device, events, sizes, warmup, trials) -> None:
    """all_reduce bandwidth per message size, and the memory-copy bandwidth beside it."""
    n = world_size
    for size in sizes:
        t = torch.ones(size // 4, dtype=torch.float32, device=device)
        seconds = []
        for trial in range(warmup + trials):
            dist.barrier()
            synchronize(device)
            begin = time.perf_counter()
            dist.all_reduce(t)
            synchronize(device)
            if trial >= warmup:
                seconds.append(time.perf_counter() - begin)
        median = statistics.median(seconds)
        algbw = size / median  # bytes per second, as nccl-tests defines it
        busbw = algbw * 2 * (n - 1) / n  # what each link carried: comparable across n
        if rank == 0:
            say(rank, f"{size:>9} B: {median * 1e6:9.1f} us  "
                      f"algbw {algbw / 1e9:6.2f} GB/s  busbw {busbw / 1e9:6.2f} GB/s")
        events.emit(rank, "bandwidth", size=size, seconds=median, algbw=algbw, busbw=busbw)
    if rank == 0:  # one rank alone, so the copy has the memory to itself
        src = torch.ones(max(sizes) // 4, device=device)
        dst = torch.empty_like(src)
        seconds = []
        for _ in range(warmup + trials):
            synchronize(device)
            begin = time.perf_counter()
            dst.copy_(src)
            synchronize(device)
            seconds.append(time.perf_counter() - begin)
        copy_bw = max(sizes) / statistics.median(seconds[warmup:])
        say(rank, f"memory copy of {max(sizes)} B: {copy_bw / 1e9:.2f} GB/s")
        events.emit(rank, "memcpy", size=max(sizes), bandwidth=copy_bw, device=str(device))
    dist.barrier()


# --- one rank, from start to finish -------------------------------------------------------


def rank_main(rank: int, job: Job, args) -> None:
    events = Events(args.events)
    with joined(job, rank) as device:
        if args.demo == "p2p":
            p2p(rank, job.world_size, device, events)
        elif args.demo == "collectives":
            collectives(rank, job.world_size, device, events)
        elif args.demo == "ring":
            ring(rank, job.world_size, device, events, args.numel, args.trials)
        else:
            bandwidth(rank, job.world_size, device, events, args.sizes, args.warmup,
                      args.trials)


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.collectives",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    p2p_demo = demos.add_parser("p2p", help="send/recv, isend/irecv, a token round a ring")
    every = demos.add_parser("collectives", help="every collective, before and after")
    ring_demo = demos.add_parser("ring", help="a ring all-reduce by hand, and the library")
    bandwidth_demo = demos.add_parser("bandwidth", help="all_reduce bandwidth per size")
    ring_demo.add_argument("--numel", type=positive_int, default=1 << 20,
                           help="floats in the tensor (default 1M = 4 MB)")
    bandwidth_demo.add_argument("--sizes", type=positive_int, nargs="+",
                                default=DEFAULT_SIZES, metavar="BYTES",
                                help="message sizes (default 1 KiB ... 16 MiB)")
    bandwidth_demo.add_argument("--warmup", type=int, default=2,
                                help="untimed runs first (default 2)")
    for demo, trials in ((ring_demo, 3), (bandwidth_demo, 5)):
        demo.add_argument("--trials", type=positive_int, default=trials,
                          help=f"timed runs (default {trials})")
    for demo in (p2p_demo, every, ring_demo, bandwidth_demo):
        add_job_options(demo)
        add_common_options(demo, timeout=60)
    return parser


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    if any(size % 4 for size in getattr(args, "sizes", [])):
        parser.error("--sizes must be multiples of 4 bytes (float32 elements)")
    least = 1 if args.demo == "collectives" else 2  # every collective works on one rank
    job = job_from_args(parser, args, least)
    open_events(args.events)
    return run_ranks(job, rank_main, args)


if __name__ == "__main__":
    sys.exit(main())
