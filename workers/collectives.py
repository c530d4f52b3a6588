"""Point-to-point and collective communication, with a bandwidth benchmark.

    python -m workers.collectives p2p --world-size 3
    python -m workers.collectives ones --world-size 4
    python -m workers.collectives collectives --world-size 4
    python -m workers.collectives ring --world-size 4
    python -m workers.collectives bandwidth --world-size 2
    torchrun --standalone --nproc-per-node 4 -m workers.collectives collectives

Every rank starts with a small tensor that says which rank it came from. Each collective is
a plain function of this rank's tensor; ``recorded`` runs it and records the tensors before
and after, on every rank, so the page can draw and check them. An operation the backend
does not support is recorded with its error, not a crash.
"""

from __future__ import annotations

import inspect
import os
import socket
import statistics
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
    exit_now,
    first_line,
    open_events,
    positive_int,
    say,
)

UNSUPPORTED = (RuntimeError, ValueError, NotImplementedError)  # how a backend says "not me"


def start_values(rank: int, world_size: int, device) -> torch.Tensor:
    """Rank r holds [10(r+1), 10(r+1)+1, ...]: every value says where it came from."""
    return torch.arange(world_size, dtype=torch.float32, device=device) + 10 * (rank + 1)


# --- point-to-point -----------------------------------------------------------------------


def p2p(rank: int, world_size: int, device) -> dict:
    """send/recv, isend/irecv and a token round a ring; returns what this rank measured."""
    measured = {}
    # Blocking, under gloo: recv() returns only once the matching send() has delivered
    # (under nccl the host returns at once, and the GPU stream waits).
    if rank == 0:
        time.sleep(0.5)  # rank 1 is already waiting in recv()
        dist.send(torch.tensor([42.0], device=device), dst=1)
        say(rank, "send(42) to rank 1 after sleeping 0.5 s")
    elif rank == 1:
        box = torch.zeros(1, device=device)
        begin = time.perf_counter()
        dist.recv(box, src=0)
        measured.update(recv_blocked=time.perf_counter() - begin, received=box.item())
        say(rank, f"recv() returned {box.item():g} after blocking "
                  f"{measured['recv_blocked']:.2f} s")
    # And under gloo send() returns only once the matching recv() has taken the data: rank
    # 1 is late.
    if rank == 0:
        begin = time.perf_counter()
        dist.send(torch.tensor([7.0], device=device), dst=1)
        measured["send_blocked"] = time.perf_counter() - begin
        say(rank, f"send(7) returned after blocking {measured['send_blocked']:.2f} s")
    elif rank == 1:
        time.sleep(0.5)  # rank 0 is already waiting in send()
        dist.recv(torch.zeros(1, device=device), src=0)

    # Non-blocking: isend/irecv return a Work handle at once; wait() is where it blocks.
    if rank in (0, 1):
        other = 1 - rank
        outgoing = torch.tensor([float(rank)], device=device)
        incoming = torch.zeros(1, device=device)
        begin = time.perf_counter()
        sending = dist.isend(outgoing, dst=other)
        receiving = dist.irecv(incoming, src=other)
        posted = time.perf_counter() - begin
        time.sleep(0.2)  # free to compute while the messages travel
        sending.wait()
        receiving.wait()  # only now may `incoming` be read
        measured.update(posted=posted, got=incoming.item())
        say(rank, f"isend/irecv posted in {posted * 1000:.2f} ms; "
                  f"after wait() got {incoming.item():g}")

    # A token passed around the ring: rank r adds r and hands it to rank r+1.
    dist.barrier()
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    token = torch.zeros(1, device=device)
    if rank == 0:
        dist.send(token, dst=right)
        dist.recv(token, src=left)
    else:
        dist.recv(token, src=left)
        token += rank
        dist.send(token, dst=right)
    measured["token"] = token.item()
    say(rank, f"ring: token is {token.item():g} after passing rank {rank}")
    return measured


# --- collectives: one plain function each -------------------------------------------------
# Each takes the tensor x this rank holds and returns what the rank holds after the call
# (None where the collective leaves it unspecified). Every rank calls every one, in order.


def broadcast(x, rank, n, root=0):
    t = x.clone()
    dist.broadcast(t, src=root)  # the root's tensor, on every rank
    return t


def scatter(x, rank, n, root=0):
    out = x.new_zeros(1)
    dist.scatter(out, list(x.split(1)) if rank == root else None, src=root)  # i: rank i
    return out


def gather(x, rank, n, root=0):
    parts = [x.new_zeros(1) for _ in range(n)] if rank == root else None
    dist.gather(x[:1], parts, dst=root)  # each rank's first value, on the root
    return torch.cat(parts) if rank == root else None


def reduce(x, rank, n, root=0):
    t = x.clone()
    dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)  # the sum, on the root only
    return t if rank == root else None  # elsewhere t is unspecified: scratch space


def all_reduce(x, rank, n, op=dist.ReduceOp.SUM):
    t = x.clone()
    dist.all_reduce(t, op=op)  # the reduction, on every rank
    return t


def all_gather(x, rank, n):
    parts = [x.new_zeros(n) for _ in range(n)]
    dist.all_gather(parts, x)  # into a list, a tensor per rank
    return torch.cat(parts)


def all_gather_single(x, rank, n):
    out = x.new_zeros(n * n)
    # into one flat tensor; before PyTorch 2.13 its name was all_gather_into_tensor
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, x)
    return out


def reduce_scatter(x, rank, n):
    out = x.new_zeros(1)
    dist.reduce_scatter(out, list(x.split(1)), op=dist.ReduceOp.SUM)  # from a list
    return out


def reduce_scatter_single(x, rank, n):
    out = x.new_zeros(1)
    # from one flat tensor; before PyTorch 2.13 its name was reduce_scatter_tensor
    (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, x)
    return out


def all_to_all(x, rank, n):
    outs = [x.new_zeros(1) for _ in range(n)]
    dist.all_to_all(outs, list(x.split(1)))  # lists: piece s goes to rank s
    return torch.cat(outs)


def all_to_all_single(x, rank, n):
    out = x.new_zeros(n)
    dist.all_to_all_single(out, x)  # flat tensors: element s goes to rank s
    return out


def all_to_all_uneven(x, rank, n):
    # as mixture-of-experts dispatch does: rank r sends r + 1 values to each rank
    send_counts = torch.full((n,), rank + 1, dtype=torch.int64, device=x.device)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)  # first: how many each will send
    sent = x.repeat_interleave(rank + 1)  # x[s], r + 1 times, for each rank s
    out = x.new_zeros(int(recv_counts.sum()))
    dist.all_to_all_single(out, sent, output_split_sizes=recv_counts.tolist(),
                           input_split_sizes=send_counts.tolist())  # rank r's values for s
    return out


# torch.save on the way out, torch.load(weights_only=True) on arrival: plain data only, no
# code run by unpickling (the option is recent: older releases pickle, always)
SAFE_OBJECTS = {"weights_only": True} if "weights_only" in inspect.signature(
    dist.broadcast_object_list).parameters else {}


def broadcast_object_list(x, rank, n):
    config = [{"lr": 0.1, "from": "rank 0"}] if rank == 0 else [None]
    dist.broadcast_object_list(config, src=0, **SAFE_OBJECTS)  # rank 0's, on every rank
    return config


def all_gather_object(x, rank, n):
    gathered = [None] * n
    dist.all_gather_object(gathered, {"rank": rank, "pid": os.getpid()})
    return gathered


TENSOR_COLLECTIVES = [broadcast, scatter, gather, reduce, all_reduce, all_gather,
                      all_gather_single, reduce_scatter, reduce_scatter_single, all_to_all,
                      all_to_all_single]
REDUCE_OPS = ["SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR"]
BITWISE = {"BAND", "BOR", "BXOR"}
ROOTED = [broadcast, scatter, gather, reduce]


def ones(rank: int, n: int, device) -> dict:
    """Each collective on tensors of ones, in the order of a widely copied four-rank example
    written after PyTorch's tutorial "Writing Distributed Applications with PyTorch": rank 0
    broadcasts a 2 and scatters [1, 2, ..., n]. Every output buffer starts at zeros, so a
    value that never arrived shows. What this rank's tensor held before and after each call
    (None: this rank has no such tensor)."""
    held = {}

    def step(name, tensor, call):  # tensor: where this rank's result lands
        before = listed(tensor)
        call()
        held[name] = {"before": before, "after": listed(tensor)}

    t = torch.ones(1, device=device)
    step("reduce", t, lambda: dist.reduce(t, dst=0))  # SUM on rank 0; elsewhere unspecified
    t = torch.ones(1, device=device)
    step("all_reduce", t, lambda: dist.all_reduce(t, op=dist.ReduceOp.SUM))
    parts = torch.zeros(n, device=device) if rank == 0 else None
    step("gather", parts, lambda: dist.gather(torch.ones(1, device=device),
                                              list(parts.split(1)) if rank == 0 else None,
                                              dst=0))
    parts = torch.zeros(n, device=device)
    step("all_gather", parts, lambda: dist.all_gather(list(parts.split(1)),
                                                      torch.ones(1, device=device)))
    t = torch.full((1,), 2.0 if rank == 0 else 1.0, device=device)
    step("broadcast", t, lambda: dist.broadcast(t, src=0))
    t = torch.zeros(1, device=device)
    pieces = list(torch.arange(1.0, n + 1, device=device).split(1)) if rank == 0 else None
    step("scatter", t, lambda: dist.scatter(t, scatter_list=pieces, src=0))
    return held


def ones_mismatches(held: dict[int, dict], n: int) -> list[str]:
    """Where the ranks' ``ones`` results differ from each collective's definition: one line
    per wrong value (none when every rank holds what it should). Output buffers must start
    at zeros, so a collective that did nothing is caught. What ``reduce`` leaves on the
    ranks other than its root is unspecified and not checked."""
    expected = {"reduce": {0: [float(n)]}, "all_reduce": [float(n)],
                "gather": {0: [1.0] * n}, "all_gather": [1.0] * n, "broadcast": [2.0],
                "scatter": {r: [r + 1.0] for r in range(n)}}
    before = {"gather": {0: [0.0] * n}, "all_gather": [0.0] * n, "scatter": [0.0]}
    wrong = []
    for check, when in ((before, "before"), (expected, "after")):
        for name, values in check.items():
            for r in sorted(held):
                want = values.get(r, "unchecked") if isinstance(values, dict) else values
                got = held[r][name][when]
                if want != "unchecked" and got != want:
                    wrong.append(f"rank {r} {name} {when}: {got}, not {want}")
    if sorted(held) != list(range(n)):
        wrong.append(f"ranks {sorted(held)} answered, not 0 to {n - 1}")
    return wrong


def compact(values) -> str:
    """A list of numbers, briefly: ``[1, 1]``; None as ``-``."""
    if values is None:
        return "-"
    return "[" + ", ".join(f"{value:g}" for value in values) + "]"


# --- recording, beside the lesson ---------------------------------------------------------


def listed(value):
    """A tensor, or a list of them, as JSON-ready lists; anything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value


def recorded(events: Events, rank: int, collective, x, before, name=None, op=None,
             root=None):
    """``collective(x, rank, n)``, recorded as one event: what this rank held before and
    after, and when it entered and left; a backend that does not support it is recorded
    with its error (rank 0 says so). ``op``: a ReduceOp's name, passed on as ``op=``;
    ``root``: passed on as ``root=`` and recorded. Returns what the rank held after (or
    None)."""
    name = name or collective.__name__
    fields = {"op": op} if op else {}
    options = {"op": getattr(dist.ReduceOp, op)} if op else {}
    if root is not None:
        fields["root"] = options["root"] = root
    with events.span(rank, name, before=before, **fields) as record:
        try:
            after = collective(x, rank, dist.get_world_size(), **options)
            record["after"], record["error"] = listed(after), None
        except UNSUPPORTED as error:
            release = torch.__version__.split("+")[0]
            why = f"not supported by {dist.get_backend()} in torch {release}"
            record["after"], record["error"] = None, f"{why}: {first_line(error)}"
            if rank == 0:
                say(rank, f"{name} {op or ''}".strip() + f": {why}")
            after = None
    return after


def every_collective(rank: int, n: int, device, events: Events, roots=(0,)) -> None:
    """Every collective on this rank's start values, each recorded (those with a root once
    per root); then every reduce op of all_reduce; a barrier reached at different times;
    the object collectives."""
    x = start_values(rank, n, device)
    count = 0
    for collective in TENSOR_COLLECTIVES:
        for root in (roots if collective in ROOTED else [None]):
            before = x[:1].tolist() if collective is gather else x.tolist()
            before = [] if collective is scatter and rank != root else before
            recorded(events, rank, collective, x, before, root=root)
            count += 1
    recorded(events, rank, all_to_all_uneven, x, x.repeat_interleave(rank + 1).tolist())
    count += 1
    summed = None
    for op in REDUCE_OPS:  # bitwise ops need integers: rank r holds [2^r, r + 1]
        t = (torch.tensor([1 << rank, rank + 1], device=device) if op in BITWISE else x)
        after = recorded(events, rank, all_reduce, t, t.tolist(), name="all_reduce ops",
                         op=op)
        summed = after if op == "SUM" else summed
        count += 1
    time.sleep(0.2 * rank)  # arrive at the barrier at different times ...
    with events.span(rank, "barrier"):
        dist.barrier()  # ... leave together
    count += 1
    for collective in (broadcast_object_list, all_gather_object):
        recorded(events, rank, collective, x, None)
        count += 1
    say(rank, f"recorded {count} operations; all_reduce SUM gave {listed(summed)}")
    events.emit(rank, "summary", operations=count, all_reduce_sum=listed(summed))


# --- ring all-reduce by hand --------------------------------------------------------------


def ring_reduce_scatter(tensor: torch.Tensor, rank: int, n: int) -> torch.Tensor:
    """The first half of a ring all-reduce, in place. In each of n-1 steps every rank sends
    one of its n chunks to its right neighbour and adds the chunk arriving from its left.
    Returns rank r's chunk (r+1) % n, then summed over all ranks (the others hold partial
    sums). The length must be a multiple of n: only then does chunk() cut n equal chunks."""
    assert tensor.numel() % n == 0, "pad the tensor to a multiple of the world size"
    chunks = tensor.chunk(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    incoming = torch.empty_like(chunks[0])
    for step in range(n - 1):
        sending = dist.P2POp(dist.isend, chunks[(rank - step) % n], right)
        receiving = dist.P2POp(dist.irecv, incoming, left)
        for work in dist.batch_isend_irecv([sending, receiving]):
            work.wait()  # only now is `incoming` complete and the sent chunk free
        chunks[(rank - step - 1) % n].add_(incoming)
    return chunks[(rank + 1) % n]


def ring_all_gather(tensor: torch.Tensor, rank: int, n: int) -> None:
    """The second half: n-1 steps pass each finished chunk round the same ring; a rank
    copies the chunk that arrives over its partial sum instead of adding it."""
    chunks = tensor.chunk(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    incoming = torch.empty_like(chunks[0])
    for step in range(n - 1):
        sending = dist.P2POp(dist.isend, chunks[(rank - step + 1) % n], right)
        receiving = dist.P2POp(dist.irecv, incoming, left)
        for work in dist.batch_isend_irecv([sending, receiving]):
            work.wait()
        chunks[(rank - step) % n].copy_(incoming)


def ring_all_reduce(tensor: torch.Tensor, rank: int, world_size: int) -> None:
    """Sum ``tensor`` over all ranks in place: each rank sends 2(n-1)/n of it in all."""
    ring_reduce_scatter(tensor, rank, world_size)
    ring_all_gather(tensor, rank, world_size)


def ring(rank: int, world_size: int, device, events: Events, numel: int, trials: int):
    numel -= numel % world_size  # equal chunks
    generator = torch.Generator().manual_seed(rank)
    data = torch.randn(numel, generator=generator).to(device)
    by_hand, library, half = data.clone(), data.clone(), data.clone()
    finished = ring_reduce_scatter(half, rank, world_size)  # the first half alone
    ring_all_reduce(by_hand, rank, world_size)
    dist.all_reduce(library)
    difference = (by_hand - library).abs().max().item()
    say(rank, f"ring by hand vs dist.all_reduce: largest difference {difference:.2e}")
    # Any two orders of summing n float32 values differ by at most (n-1)·eps times the sum
    # of their magnitudes (each is within (n-1)·eps/2 of it): a bound that holds on any
    # machine, where a fixed tolerance holds only for the data it was tried on. Twice it,
    # for the rounding of the magnitudes' own sum.
    magnitude = data.abs()
    dist.all_reduce(magnitude)
    bound = 2 * (world_size - 1) * torch.finfo(torch.float32).eps * magnitude
    equal = bool(((by_hand - library).abs() <= bound).all())
    mine = (rank + 1) % world_size  # the chunk the reduce-scatter finished here
    scattered = bool(((finished - library.chunk(world_size)[mine]).abs()
                      <= bound.chunk(world_size)[mine]).all())
    events.emit(rank, "ring check", difference=difference, numel=numel, equal=equal,
                chunk=mine, scattered=scattered)
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
        low, high = min(seconds) * 1000, max(seconds) * 1000
        say(rank, f"{name:<15} {numel * 4 / 1e6:.0f} MB: {low:.1f} to {high:.1f} ms")
        events.emit(rank, "ring timing", implementation=name, seconds=seconds, numel=numel)


# --- bandwidth ----------------------------------------------------------------------------

DEFAULT_SIZES = [1 << k for k in range(10, 25, 2)]  # 1 KiB, 4 KiB, ..., 16 MiB


def bandwidth(rank, world_size, device, events, sizes, warmup, trials) -> None:
    """all_reduce bandwidth per message size, each trial after a barrier."""
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
        events.emit(rank, "bandwidth", size=size, seconds=seconds, algbw=algbw, busbw=busbw,
                    world_size=n)


# --- two reference points beside it: a memory copy, and a plain socket --------------------


def copy_at_once(rank, world_size, device, events, size, warmup, trials) -> None:
    """Every rank copies ``size`` bytes at the same time, on one thread each (on a GPU: its
    own GPU), each trial after a barrier: the memory bandwidth a rank gets while all do."""
    src = torch.ones(size // 4, device=device)
    dst = torch.empty_like(src)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread per rank, however many cores the machine has
    seconds = []
    try:
        for trial in range(warmup + trials):
            dist.barrier()
            synchronize(device)
            begin = time.perf_counter()
            dst.copy_(src)
            synchronize(device)
            if trial >= warmup:
                seconds.append(time.perf_counter() - begin)
    finally:
        torch.set_num_threads(threads)
    if rank == 0:
        each = "on its own GPU" if device.type == "cuda" else "one thread each"
        say(rank, f"memory copy of {size} B on every rank at once, {each}: "
                  f"{size / statistics.median(seconds) / 1e9:.2f} GB/s per rank (median)")
    events.emit(rank, "copy", size=size, seconds=seconds, world_size=world_size, threads=1,
                device=str(device))


def tcp_stream(rank, events, sizes, warmup, trials) -> None:
    """A raw TCP stream over loopback from rank 0 to rank 1, on plain sockets: ``sendall``
    and ``recv_into`` of each message size, each trial timed from a barrier until rank 1
    has every byte and rank 0 its one-byte reply. The other ranks wait at the barriers."""
    listener = socket.create_server(("127.0.0.1", 0)) if rank == 0 else None
    port = [listener.getsockname()[1] if listener else None]
    dist.broadcast_object_list(port, src=0)
    connection = None
    if rank == 0:
        connection, _ = listener.accept()
        listener.close()
    elif rank == 1:
        connection = socket.create_connection(("127.0.0.1", port[0]))
    if connection is not None:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as gloo does
    try:
        for size in sizes:
            buffer = memoryview(bytearray(size))
            seconds = []
            for trial in range(warmup + trials):
                dist.barrier()
                begin = time.perf_counter()
                if rank == 0:
                    connection.sendall(buffer)
                    receive(connection, buffer[:1])  # rank 1 has it all
                elif rank == 1:
                    receive(connection, buffer)
                    connection.sendall(buffer[:1])
                if trial >= warmup:
                    seconds.append(time.perf_counter() - begin)
            if rank in (0, 1):
                events.emit(rank, "tcp", size=size, seconds=seconds)
            if rank == 0:
                say(rank, f"{size:>9} B over a plain socket: "
                          f"{size / statistics.median(seconds) / 1e9:6.2f} GB/s (median)")
    finally:
        if connection is not None:
            connection.close()


def receive(connection: socket.socket, buffer: memoryview) -> None:
    """Fill ``buffer`` from the socket: ``recv_into`` returns whatever has arrived."""
    received = 0
    while received < len(buffer):
        got = connection.recv_into(buffer[received:])
        if not got:
            raise ConnectionError("the other rank closed the stream")
        received += got


# --- one rank, from start to finish -------------------------------------------------------


def rank_main(rank: int, job: Job, args) -> None:
    events = Events(args.events)
    with joined(job, rank) as device:
        if args.demo == "p2p":
            events.emit(rank, "p2p", **p2p(rank, job.world_size, device))
        elif args.demo == "ones":
            held = ones(rank, job.world_size, device)
            say(rank, "  ".join(f"{name} {compact(v['before'])} -> {compact(v['after'])}"
                                if v["before"] is not None else f"{name} -"
                                for name, v in held.items()))
            events.emit(rank, "ones", **held)
        elif args.demo == "collectives":
            every_collective(rank, job.world_size, device, events, args.roots)
        elif args.demo == "ring":
            ring(rank, job.world_size, device, events, args.numel, args.trials)
        else:
            bandwidth(rank, job.world_size, device, events, args.sizes, args.warmup,
                      args.trials)
            copy_at_once(rank, job.world_size, device, events, max(args.sizes), args.warmup,
                         args.trials)
            if job.backend == "gloo":  # the wire gloo uses on one machine
                tcp_stream(rank, events, args.sizes, args.warmup, args.trials)


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.collectives",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    p2p_demo = demos.add_parser("p2p", help="send/recv, isend/irecv, a token round a ring")
    ones_demo = demos.add_parser("ones", help="each collective on tensors of ones, every "
                                 "rank's tensor before and after")
    every = demos.add_parser("collectives", help="every collective, before and after")
    ring_demo = demos.add_parser("ring", help="a ring all-reduce by hand, and the library")
    bandwidth_demo = demos.add_parser("bandwidth", help="all_reduce bandwidth per size")
    every.add_argument("--roots", type=int, nargs="+", default=[0], metavar="RANK",
                       help="broadcast, scatter, gather, reduce from each (default 0)")
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
    for demo in (p2p_demo, ones_demo, every, ring_demo, bandwidth_demo):
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
    if any(not 0 <= root < job.world_size for root in getattr(args, "roots", [])):
        parser.error(f"--roots must be ranks of the job: 0 to {job.world_size - 1}")
    open_events(args.events)
    return run_ranks(job, rank_main, args)


if __name__ == "__main__":
    exit_now(main())
