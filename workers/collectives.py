"""Point-to-point and collective communication, with a bandwidth benchmark.

    python -m workers.collectives p2p --world-size 3
    python -m workers.collectives collectives --world-size 4
    python -m workers.collectives ring --world-size 4
    python -m workers.collectives bandwidth --world-size 2
    torchrun --standalone --nproc-per-node 4 -m workers.collectives collectives

Every rank starts with a small tensor that says which rank it came from; each operation's
tensors are recorded before and after, on every rank, so the page can draw and check them.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    first_line,
    from_torchrun,
    launch,
    open_events,
    pick_backend,
    positive_int,
    rank_device,
    say,
    say_main,
)
from workers.runner import free_port


def start_values(rank: int, world_size: int, device) -> torch.Tensor:
    """Rank r holds [10(r+1), 10(r+1)+1, ...]: every value says where it came from."""
    return torch.arange(world_size, dtype=torch.float32, device=device) + 10 * (
        rank + 1
    )


def timed(events: Events, rank: int, name: str, before, run, **fields):
    """Run one operation, then record its tensors before and after, and its duration."""
    begin = time.time()
    after = run()
    events.emit(
        rank, name, t=begin, t_end=time.time(), before=before, after=after, **fields
    )
    return after


# --- point-to-point ------------------------------------------------------------------------


def p2p(rank: int, world_size: int, device, events: Events) -> None:
    # Blocking: recv() returns only once the matching send() has delivered.
    if rank == 0:
        time.sleep(0.5)  # rank 1 is already waiting in recv()
        dist.send(torch.tensor([42.0], device=device), dst=1)
        say(rank, "send(42) to rank 1 after sleeping 0.5 s")
    elif rank == 1:
        box = torch.zeros(1, device=device)
        begin = time.time()
        dist.recv(box, src=0)
        waited = time.time() - begin
        say(rank, f"recv() returned {box.item():g} after blocking {waited:.2f} s")
        events.emit(rank, "recv", t=begin, t_end=time.time(), value=box.item())

    # Non-blocking: isend/irecv return a Work handle at once; wait() is where it blocks.
    if rank in (0, 1):
        other = 1 - rank
        outgoing = torch.tensor([float(rank)], device=device)
        incoming = torch.zeros(1, device=device)
        begin = time.time()
        sending = dist.isend(outgoing, dst=other)
        receiving = dist.irecv(incoming, src=other)
        posted = time.time() - begin
        time.sleep(0.2)  # free to compute while the messages travel
        sending.wait()
        receiving.wait()  # only now may `incoming` be read
        say(
            rank,
            f"isend/irecv posted in {posted * 1000:.2f} ms; after wait() got {incoming.item():g}",
        )
        events.emit(
            rank, "isend/irecv", t=begin, t_end=time.time(), got=incoming.item()
        )

    # A token passed around the ring: rank r adds r and hands it to rank r+1.
    dist.barrier()
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    token = torch.zeros(1, device=device)
    begin = time.time()
    if rank == 0:
        dist.send(token, dst=right)
        dist.recv(token, src=left)
    else:
        dist.recv(token, src=left)
        token += rank
        dist.send(token, dst=right)
    say(rank, f"ring: token is {token.item():g} after passing rank {rank}")
    events.emit(rank, "ring pass", t=begin, t_end=time.time(), token=token.item())


# --- collectives ---------------------------------------------------------------------------

REDUCE_OPS = ["SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR"]
BITWISE = {"BAND", "BOR", "BXOR"}


def collectives(rank: int, world_size: int, device, events: Events) -> None:
    n = world_size
    x = start_values(rank, n, device)
    listed = lambda t: t.tolist()  # noqa: E731  (tensors become JSON lists)

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

    def all_gather_into_tensor():
        out = torch.zeros(n * n, device=device)
        # PyTorch 2.14 renamed it all_gather_single; older releases have only the old name.
        getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(out, x)
        return listed(out)

    def reduce_scatter():
        out = torch.zeros(1, device=device)
        dist.reduce_scatter(out, list(x.clone().split(1)), op=dist.ReduceOp.SUM)
        return listed(out)

    def all_to_all():
        outs = [torch.zeros(1, device=device) for _ in range(n)]
        dist.all_to_all(outs, list(x.clone().split(1)))
        return [o.item() for o in outs]

    timed(events, rank, "broadcast", listed(x), broadcast, root=0)
    timed(events, rank, "scatter", listed(x) if rank == 0 else [], scatter, root=0)
    timed(events, rank, "gather", listed(x[:1]), gather, root=0)
    timed(events, rank, "reduce", listed(x), reduce, root=0, op="SUM")
    for op in REDUCE_OPS:
        all_reduce_with(op, rank, device, x, events)
    timed(events, rank, "all_gather", listed(x), all_gather)
    timed(events, rank, "all_gather_into_tensor", listed(x), all_gather_into_tensor)
    timed(events, rank, "reduce_scatter", listed(x), reduce_scatter, op="SUM")
    timed(events, rank, "all_to_all", listed(x), all_to_all)

    time.sleep(0.2 * rank)  # arrive at the barrier at different times ...
    timed(
        events, rank, "barrier", [], lambda: dist.barrier() or []
    )  # ... leave together

    # Object collectives pickle arbitrary Python objects: never use them with untrusted peers.
    config = [{"lr": 0.1, "from": "rank 0"}] if rank == 0 else [None]
    timed(events, rank, "broadcast_object_list", list(config),
          lambda: dist.broadcast_object_list(config, src=0) or config)  # fmt: skip
    gathered = [None] * n
    mine = {"rank": rank, "pid": os.getpid()}
    timed(events, rank, "all_gather_object", mine,
          lambda: dist.all_gather_object(gathered, mine) or gathered)  # fmt: skip
    say(rank, f"ran {len(REDUCE_OPS) + 12} operations; all_reduce SUM gave {sum_of(n)}")


def sum_of(n: int) -> list[float]:
    return [sum(10 * (r + 1) + i for r in range(n)) for i in range(n)]


def all_reduce_with(
    op: str, rank: int, device, x: torch.Tensor, events: Events
) -> None:
    """all_reduce with one ReduceOp; an op the backend refuses is recorded, not fatal."""
    if op in BITWISE:  # bitwise ops need integers: rank r holds [2^r, r + 1]
        t = torch.tensor([1 << rank, rank + 1], dtype=torch.int64, device=device)
    else:
        t = x.clone()
    before = t.tolist()
    begin = time.time()
    try:
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        after, error = t.tolist(), None
    except (RuntimeError, ValueError) as failure:
        after, error = None, first_line(failure)
    events.emit(rank, "all_reduce", t=begin, t_end=time.time(), op=op, before=before,
                after=after, error=error)  # fmt: skip


# --- ring all-reduce by hand ---------------------------------------------------------------


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


def ring(
    rank: int, world_size: int, device, events: Events, numel: int, trials: int
) -> None:
    numel -= numel % world_size  # equal chunks
    generator = torch.Generator().manual_seed(rank)
    data = torch.randn(numel, generator=generator).to(device)
    by_hand, library = data.clone(), data.clone()
    ring_all_reduce(by_hand, rank, world_size)
    dist.all_reduce(library)
    difference = (by_hand - library).abs().max().item()
    say(rank, f"ring by hand vs dist.all_reduce: largest difference {difference:.2e}")
    events.emit(rank, "ring check", difference=difference, numel=numel,
                equal=torch.allclose(by_hand, library, rtol=1e-5, atol=1e-5))  # fmt: skip
    for name, reduce_all in [("ring by hand", lambda t: ring_all_reduce(t, rank, world_size)),
                             ("dist.all_reduce", dist.all_reduce)]:  # fmt: skip
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
        events.emit(
            rank, "ring timing", implementation=name, seconds=median, numel=numel
        )


def synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(
            device
        )  # GPU work is asynchronous: wait before reading the clock


# --- bandwidth -----------------------------------------------------------------------------

DEFAULT_SIZES = [1 << k for k in range(10, 27, 2)]  # 1 KiB, 4 KiB, ..., 64 MiB


def bandwidth(rank, world_size, device, events, sizes, warmup, trials) -> None:
    """all_reduce bandwidth per message size, and the memory-copy bandwidth for reference."""
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
            say(rank, f"{size:>9} B: {median * 1e6:9.1f} us  algbw {algbw / 1e9:6.2f} GB/s  "
                      f"busbw {busbw / 1e9:6.2f} GB/s")  # fmt: skip
        events.emit(
            rank, "bandwidth", size=size, seconds=median, algbw=algbw, busbw=busbw
        )
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
        events.emit(
            rank, "memcpy", size=max(sizes), bandwidth=copy_bw, device=str(device)
        )
    dist.barrier()


# --- one rank, from start to finish --------------------------------------------------------


def rank_main(rank, world_size, args, address, port) -> None:
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    device = rank_device(args.backend, local_rank)
    wait = timedelta(seconds=args.timeout)
    if from_torchrun():
        dist.init_process_group(args.backend, timeout=wait)  # env:// from torchrun
    else:
        dist.init_process_group(args.backend, init_method=f"tcp://{address}:{port}",
                                rank=rank, world_size=world_size, timeout=wait)  # fmt: skip
    events = Events(args.events)
    try:
        if args.demo == "p2p":
            p2p(rank, world_size, device, events)
        elif args.demo == "collectives":
            collectives(rank, world_size, device, events)
        elif args.demo == "ring":
            ring(rank, world_size, device, events, args.numel, args.trials)
        else:
            bandwidth(
                rank, world_size, device, events, args.sizes, args.warmup, args.trials
            )
    finally:
        dist.destroy_process_group()


def parse_args(argv=None):
    parser = Parser(
        prog="python -m workers.collectives", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("demo", choices=["p2p", "collectives", "ring", "bandwidth"])
    parser.add_argument(
        "--world-size", type=positive_int, default=2, help="ranks (default 2)"
    )
    parser.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto",
                        help="auto: nccl with one GPU per rank when there are enough, else gloo")  # fmt: skip
    parser.add_argument("--numel", type=positive_int, default=1 << 22,
                        help="ring: floats in the tensor (default 4M = 16 MB)")  # fmt: skip
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=DEFAULT_SIZES,
                        metavar="BYTES", help="bandwidth: message sizes (default 1 KiB ... 64 MiB)")  # fmt: skip
    parser.add_argument(
        "--warmup", type=int, default=2, help="untimed runs first (default 2)"
    )
    parser.add_argument(
        "--trials", type=positive_int, default=5, help="timed runs (default 5)"
    )
    add_common_options(parser, timeout=60)
    args = parser.parse_args(argv)
    torchrun = from_torchrun()
    world_size = torchrun[1] if torchrun else args.world_size
    if world_size < 2:
        parser.error("every demo here needs peers: --world-size must be at least 2")
    if world_size > 64:
        parser.error("at most 64 ranks on one machine")
    if any(size % 4 for size in args.sizes):
        parser.error("--sizes must be multiples of 4 bytes (float32 elements)")
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    args.backend = pick_backend(args.backend, local_ranks)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    open_events(args.events)
    torchrun = from_torchrun()
    if torchrun:  # started by torchrun as one rank
        rank, world_size = torchrun
        rank_main(rank, world_size, args, None, None)
        return 0
    address = "127.0.0.1"
    port = int(os.environ.get("MASTER_PORT") or free_port(address))
    say_main(f"{args.world_size} ranks, backend {args.backend}")
    job = (args.world_size, args, address, port)
    return launch(rank_main, job, args.world_size, timeout=args.timeout + 30)


if __name__ == "__main__":
    sys.exit(main())
