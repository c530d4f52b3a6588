"""A backend of your own: torch.distributed's collectives, written in Python over the store.

A backend is what ``init_process_group("gloo")`` names: the object a collective reaches
once ``dist.all_reduce`` has found the group and the tensor's device. This module writes
one, ``StoreBackend``, for CPU tensors: every rank puts its bytes in the job's
``TCPStore`` and reads its peers' there. A thread of its own runs each collective, so a
call with ``async_op=True`` returns at once and ``Work.wait()`` blocks, as gloo's and
nccl's do. ``register()`` makes ``init_process_group("mine")`` build it.

    python -m workers.backend values --world-size 3     # every collective, against gloo's
    python -m workers.backend overlap                   # compute while it communicates
    python -m workers.backend ddp --world-size 2        # DDP on it, against DDP on gloo
    python -m workers.backend speed                     # all_reduce's time, against gloo's
    python -m workers.backend mistakes                  # what a reader's mistakes give
"""

from __future__ import annotations

import hashlib
import os
import queue
import statistics
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend

from workers.job import Job, job_from_args, joined, run_ranks, share_cores
from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    exit_now,
    first_line,
    open_events,
    physical_cores,
    positive_int,
    say,
)

ReduceOp = dist.ReduceOp


def python_backends() -> bool:
    """Whether this torch lets Python subclass ``Backend`` (2.14 and later: before, the
    class has no constructor Python can call, "No constructor defined!")."""

    class Probe(Backend):
        pass

    try:
        Probe(0, 1)
    except TypeError:
        return False
    return True


# Before 2.14 a Python backend has to be a whole ProcessGroup (see ``register``).
BASE = Backend if python_backends() else dist.ProcessGroup


# --- the backend --------------------------------------------------------------------------

REDUCE = {  # the reductions this backend knows: combine ``b`` into ``a`` in place
    ReduceOp.SUM: torch.Tensor.add_,
    ReduceOp.PRODUCT: torch.Tensor.mul_,
    ReduceOp.MIN: lambda a, b: torch.minimum(a, b, out=a),
    ReduceOp.MAX: lambda a, b: torch.maximum(a, b, out=a),
}


class BackendError(RuntimeError):
    """A call this backend refuses, or a collective that failed on its thread."""


def to_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def from_bytes(data: bytes, like: torch.Tensor, sender: int) -> torch.Tensor:
    """A tensor shaped like ``like`` from a peer's bytes, or one line on what differs."""
    expected = like.numel() * like.element_size()
    if len(data) != expected:
        raise BackendError(f"rank {sender} sent {len(data)} bytes where this rank "
                           f"expected {expected} ({tuple(like.shape)} {like.dtype}): "
                           f"shapes or dtypes differ across ranks")
    if expected == 0:
        return torch.empty_like(like)
    return torch.frombuffer(bytearray(data), dtype=like.dtype).view(like.shape)


class StoreWork(dist.Work):
    """The handle a collective returns: ``wait()`` blocks until the backend's thread has
    finished it, and raises what went wrong there; ``get_future()`` is what DDP's hooks
    chain on."""

    def __init__(self, done: torch.futures.Future):
        super().__init__()
        self.done = done
        self.future = done.then(lambda f: f.value())  # a failure fails the chained future

    def wait(self, timeout=None):
        self.done.wait()  # raises the exception the thread set, if any
        self.future.wait()  # and the chained future is complete too, for whoever polls it
        return True

    def get_future(self):
        return self.future


class StoreBackend(BASE):
    """CPU tensors through the job's store: rank r puts its bytes under ``seq/tag/r`` and
    reads its peers' keys, waiting at most the group's timeout for them."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta, threaded=True):
        super().__init__(rank, size)
        self.store, self.my_rank, self.world_size, self.timeout = store, rank, size, timeout
        self.seq = 0  # every rank calls collectives in the same order: the numbers agree
        self.queue = queue.Queue() if threaded else None
        if threaded:
            self.thread = threading.Thread(target=self.serve, name="mine", daemon=True)
            self.thread.start()

    def getBackendName(self) -> str:
        return "mine"

    @property
    def options(self):
        """What c10d asks of every backend (its flight recorder does). Without this, torch
        2.15's Python trampoline answers by asking itself again, without end: on Python 3.13
        the process dies of it (SIGSEGV, a C stack overflow)."""
        return Backend.Options("mine", self.timeout)

    # the transport: bytes in the store, under keys every rank can name
    def put(self, seq: int, tag: str, tensor: torch.Tensor) -> None:
        self.store.set(f"{seq}/{tag}/{self.my_rank}", to_bytes(tensor))

    def get(self, seq: int, tag: str, like: torch.Tensor, ranks) -> list[torch.Tensor]:
        keys = [f"{seq}/{tag}/{r}" for r in ranks]
        self.store.wait(keys, self.timeout)  # a missing peer is an error, not a hang
        return [from_bytes(self.store.get(k), like, r) for k, r in zip(keys, ranks)]

    def finish(self, seq: int, tags) -> None:
        """The last rank through deletes the collective's keys: every rank has read them."""
        if self.store.add(f"{seq}/done", 1) == self.world_size:
            for key in [f"{seq}/{t}/{r}" for t in tags for r in range(self.world_size)]:
                self.store.delete_key(key)
            self.store.delete_key(f"{seq}/done")

    # the thread: a collective is checked and numbered in the caller, run on the thread
    def submit(self, run, result) -> StoreWork:
        done = torch.futures.Future()
        if self.queue is None:  # inline: the call itself communicates
            run()
            done.set_result(result)
        else:
            self.queue.put((run, result, done))
        return StoreWork(done)

    def serve(self) -> None:
        while (item := self.queue.get()) is not None:
            run, result, done = item
            try:
                run()
            except Exception as error:  # handed to whoever waits on the Work
                done.set_exception(BackendError(f"mine: {first_line(error)}"))
            else:
                done.set_result(result)

    def shutdown(self) -> None:  # destroy_process_group() calls it
        if self.queue is not None:  # the thread ends once its last collective has
            self.queue.put(None)
            self.thread.join(self.timeout.total_seconds())
        # The store lives in rank 0's process (under torchrun, in the agent's): rank 0 waits
        # until every rank is done with it before its process may end (at most the group's
        # timeout, and 10 s: a rank that died never says so).
        patience = min(10.0, self.timeout.total_seconds())
        arrived, deadline = self.store.add("left", 1), time.monotonic() + patience
        while self.my_rank == 0 and arrived < self.world_size and \
                time.monotonic() < deadline:
            time.sleep(0.01)
            arrived = self.store.add("left", 0)

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def check(self, tensors, what: str) -> None:
        for tensor in tensors:
            if tensor.device.type != "cpu":
                raise BackendError(f"mine.{what}: CPU tensors only, got one on "
                                   f"{tensor.device}")

    def reduction(self, opts, what: str):
        op = getattr(opts.reduceOp, "op", opts.reduceOp)  # a ReduceOp, or its enum value
        if op not in REDUCE:
            raise BackendError(f"mine.{what}: {op} is not supported (SUM, PRODUCT, MIN "
                               f"and MAX are)")
        return REDUCE[op]

    # the collectives
    def allreduce(self, tensors, opts):
        self.check(tensors, "allreduce")
        combine, seq = self.reduction(opts, "allreduce"), self.next_seq()
        everyone = range(self.world_size)

        def run():
            for i, tensor in enumerate(tensors):
                self.put(seq, f"t{i}", tensor)
            for i, tensor in enumerate(tensors):
                parts = self.get(seq, f"t{i}", tensor, everyone)
                total = parts[0].clone()
                for part in parts[1:]:  # rank 0, 1, 2, ... on every rank: the same bits
                    combine(total, part)
                tensor.copy_(total)  # in place: the caller's tensor holds the result
            self.finish(seq, [f"t{i}" for i in range(len(tensors))])

        return self.submit(run, tensors)

    def broadcast(self, tensors, opts):
        self.check(tensors, "broadcast")
        root, seq = opts.rootRank, self.next_seq()

        def run():
            for i, tensor in enumerate(tensors):
                if self.my_rank == root:
                    self.put(seq, f"t{i}", tensor)
                else:
                    tensor.copy_(self.get(seq, f"t{i}", tensor, [root])[0])
            self.finish(seq, [f"t{i}" for i in range(len(tensors))])

        return self.submit(run, tensors)

    def allgather(self, output_lists, tensors, opts):
        self.check(tensors, "allgather")
        for outputs in output_lists:
            if len(outputs) != self.world_size:
                raise BackendError(f"mine.allgather: {len(outputs)} outputs for "
                                   f"{self.world_size} ranks")
        seq = self.next_seq()

        def run():
            for i, tensor in enumerate(tensors):
                self.put(seq, f"t{i}", tensor)
            for i, (tensor, outputs) in enumerate(zip(tensors, output_lists)):
                for output, part in zip(outputs, self.get(seq, f"t{i}", tensor,
                                                          range(self.world_size))):
                    output.copy_(part)
            self.finish(seq, [f"t{i}" for i in range(len(tensors))])

        return self.submit(run, output_lists)

    def reduce_scatter(self, outputs, input_lists, opts):
        self.check(outputs, "reduce_scatter")
        combine, seq = self.reduction(opts, "reduce_scatter"), self.next_seq()

        def run():  # rank r puts the part meant for rank j under tag "t{i}>{j}"
            for i, inputs in enumerate(input_lists):
                for j, part in enumerate(inputs):
                    self.put(seq, f"t{i}>{j}", part)
            for i, output in enumerate(outputs):
                parts = self.get(seq, f"t{i}>{self.my_rank}", output,
                                 range(self.world_size))
                total = parts[0].clone()
                for part in parts[1:]:
                    combine(total, part)
                output.copy_(total)
            self.finish(seq, [f"t{i}>{j}" for i in range(len(outputs))
                              for j in range(self.world_size)])

        return self.submit(run, outputs)

    def barrier(self, opts):
        seq = self.next_seq()

        def run():
            self.put(seq, "barrier", torch.empty(0))
            self.get(seq, "barrier", torch.empty(0), range(self.world_size))
            self.finish(seq, ["barrier"])

        return self.submit(run, [])

    # the single-tensor forms (all_gather_into_tensor, reduce_scatter_tensor), as lists
    def all_gather_single(self, output, tensor, opts):
        return self.allgather([list(output.view(self.world_size, -1).view(
            self.world_size, *tensor.shape).unbind())], [tensor], opts)

    def reduce_scatter_single(self, output, tensor, opts):
        return self.reduce_scatter([output], [list(tensor.view(
            self.world_size, *output.shape).unbind())], opts)


def register(name: str = "mine", threaded: bool = True) -> None:
    """``init_process_group(name)`` builds a StoreBackend from then on, for CPU tensors."""

    def create(store, rank, size, timeout):  # store: a PrefixStore of this group's own
        backend = BACKEND_CLASS(store, rank, size, timeout, threaded)
        KEEP.append(backend)  # under TORCH_DISTRIBUTED_DEBUG=DETAIL c10d holds a wrapper
        return backend

    dist.Backend.register_backend(name, create, devices=["cpu"])


# --- what the lesson leaves out --------------------------------------------------------

# Every backend ever created stays referenced: under TORCH_DISTRIBUTED_DEBUG=DETAIL, c10d
# registers a wrapper around it, not the backend itself, and a Python object nobody else
# holds loses its methods (every call then asks for "getBackendName").
KEEP: list = []


def unsupported(name: str):
    def method(self, *args, **kwargs):
        raise BackendError(f"Backend mine does not support {name}")
    method.__name__ = name
    return method


class WholeProcessGroup(StoreBackend):
    """Before 2.14: the backend is a ``ProcessGroup`` subclass that replaces the group.
    Every op it does not define must refuse in Python: the C++ one it would inherit looks
    for a backend of the tensor's device, which such a group never has ("No backend type
    associated with device type cpu"). And 2.11's Python API calls the single-tensor forms
    by their old names."""

    def _allgather_base(self, output, tensor, opts):
        return self.all_gather_single(output, tensor, opts)

    def _reduce_scatter_base(self, output, tensor, opts):
        return self.reduce_scatter_single(output, tensor, opts)


for _name in ("reduce", "gather", "scatter", "alltoall", "alltoall_base", "send", "recv",
              "recv_anysource", "allreduce_coalesced", "allgather_coalesced",
              "allgather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced"):
    setattr(WholeProcessGroup, _name, unsupported(_name))

BACKEND_CLASS = StoreBackend if BASE is Backend else WholeProcessGroup


class Timed(BACKEND_CLASS):
    """The same backend, recording when its thread runs each collective (for the
    timeline); the lesson's class stays free of it."""

    spans: list = []

    def submit(self, run, result):
        def timed():
            begin = time.time()
            run()
            Timed.spans.append((begin, time.time()))

        return super().submit(timed, result)


# --- the demos ----------------------------------------------------------------------------

DTYPES = (torch.float32, torch.float64, torch.int64)
OPS = ("SUM", "PRODUCT", "MIN", "MAX")


def inputs(rank: int, dtype, shape=(5, 7), seed: int = 0) -> torch.Tensor:
    """Rank ``rank``'s input: every rank can make every other rank's, to check against."""
    generator = torch.Generator().manual_seed(1000 * seed + rank)
    if dtype.is_floating_point:  # near 1, so that a product of five stays ordinary
        noise = torch.randn(shape, generator=generator, dtype=torch.float64)
        return (1 + noise / 4).to(dtype)
    return torch.randint(-50, 50, shape, generator=generator).to(dtype)


def rank_order(parts, op: str) -> torch.Tensor:
    """Rank 0's part combined with rank 1's, then rank 2's, ...: this backend's order."""
    total = parts[0].clone()
    for part in parts[1:]:
        REDUCE[getattr(ReduceOp, op)](total, part)
    return total


def bound(parts, op: str) -> torch.Tensor:
    """How far two orders of the same floating-point reduction can be apart: each sum's
    rounding errors add up to at most (N - 1) u times the sum of the magnitudes (u the
    unit roundoff), each product's to (N - 1) u times its magnitude; twice that for two."""
    unit = torch.finfo(parts[0].dtype).eps / 2
    scale = sum(p.abs().double() for p in parts) if op == "SUM" else \
        rank_order(parts, "PRODUCT").abs().double()
    return 2 * (len(parts) - 1) * unit * scale * 1.01


def compared(name: str, mine: torch.Tensor, gloo: torch.Tensor, ours: torch.Tensor,
             tolerance=None) -> dict:
    """One check: this backend's result against gloo's, bit for bit and within the bound,
    and against the rank-order result it defines for itself."""
    difference = (mine.double() - gloo.double()).abs()
    return {"check": name, "dtype": str(mine.dtype).removeprefix("torch."),
            "bits_equal": torch.equal(mine, gloo), "own_order": torch.equal(mine, ours),
            "largest_difference": difference.max().item() if difference.numel() else 0.0,
            "within_bound": bool((difference <= tolerance).all()) if tolerance is not None
            else torch.equal(mine, gloo),
            "digest": hashlib.sha256(to_bytes(mine)).hexdigest()[:16]}


def values(rank: int, size: int, events: Events) -> None:
    """Every collective on this backend and on gloo, from the same inputs."""
    gloo = dist.new_group(backend="gloo")
    checks = []
    for dtype in DTYPES:
        everyone = [inputs(r, dtype) for r in range(size)]
        for op in OPS:
            results = []
            for group in (None, gloo):  # None: the default group, this backend
                tensor = everyone[rank].clone()
                dist.all_reduce(tensor, op=getattr(ReduceOp, op), group=group)
                results.append(tensor)
            exact = not dtype.is_floating_point or op in ("MIN", "MAX")
            checks.append(compared(f"all_reduce {op}", *results, rank_order(everyone, op),
                                   None if exact else bound(everyone, op)))
    everyone = [inputs(r, torch.float32, (3, 4), seed=1) for r in range(size)]
    for root in (0, size - 1):
        results = []
        for group in (None, gloo):
            tensor = everyone[rank].clone()
            dist.broadcast(tensor, src=root, group=group)
            results.append(tensor)
        checks.append(compared(f"broadcast from {root}", *results, everyone[root]))
    results = []
    for group in (None, gloo):
        outputs = [torch.zeros(3, 4) for _ in range(size)]
        dist.all_gather(outputs, everyone[rank], group=group)
        results.append(torch.stack(outputs))
    checks.append(compared("all_gather", *results, torch.stack(everyone)))
    results = []
    for group in (None, gloo):
        output = torch.zeros(size * 3, 4)
        dist.all_gather_into_tensor(output, everyone[rank], group=group)
        results.append(output)
    checks.append(compared("all_gather_into_tensor", *results, torch.cat(everyone)))
    whole = [inputs(r, torch.float64, (size * 2, 3), seed=2) for r in range(size)]
    mine = slice(2 * rank, 2 * rank + 2)
    parts = [w[mine] for w in whole]
    results = []
    for group in (None, gloo):
        output = torch.zeros(2, 3, dtype=torch.float64)
        dist.reduce_scatter(output, list(whole[rank].clone().split(2)), group=group)
        results.append(output)
    checks.append(compared("reduce_scatter", *results, rank_order(parts, "SUM"),
                           bound(parts, "SUM")))
    results = []
    for group in (None, gloo):
        output = torch.zeros(2, 3, dtype=torch.float64)
        dist.reduce_scatter_tensor(output, whole[rank].clone(), group=group)
        results.append(output)
    checks.append(compared("reduce_scatter_tensor", *results, rank_order(parts, "SUM"),
                           bound(parts, "SUM")))
    dist.barrier()  # on this backend: every rank returns from it, or none would go on
    events.emit(rank, "values", world_size=size, checks=checks)
    if rank == 0:
        equal = sum(c["bits_equal"] for c in checks)
        say(rank, f"{len(checks)} checks at {size} ranks: {equal} bit for bit as gloo's, "
                  f"{sum(c['within_bound'] for c in checks)} within the rounding bound")
        for c in checks:
            if not c["bits_equal"]:
                say(rank, f"  {c['check']} {c['dtype']}: differs from gloo's by at most "
                          f"{c['largest_difference']:.3g}")


def overlap(rank: int, size: int, events: Events, mebibytes: int, trials: int) -> None:
    """An all_reduce started with async_op=True, computation, then wait(): on this backend
    with its thread, and inline (the call itself communicates)."""
    tensor = torch.ones(mebibytes << 18)  # float32: 4 bytes each
    a = torch.randn(192, 192)
    # the products get this rank's share of the cores but one, kept for the backend's
    # thread, and a core is left for the store's (OMP_NUM_THREADS, when set, decides)
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (physical_cores() - 1) // size - 1))

    def compute(repeats):
        for _ in range(repeats):
            a.mm(a)

    groups = {"with its thread": dist.new_group(backend="mine_timed"),
              "inline": dist.new_group(backend="mine_inline_timed")}
    for group in groups.values():  # warm up: the store's and the group's first calls
        dist.all_reduce(tensor, group=group)
    dist.barrier()
    begin = time.perf_counter()
    for _ in range(3):
        dist.all_reduce(tensor, group=groups["inline"])
    communication = (time.perf_counter() - begin) / 3
    compute(50)  # warm up, then as many products as the all_reduce takes
    begin = time.perf_counter()
    compute(50)
    repeats = max(1, round(50 * communication / (time.perf_counter() - begin)))
    for name, group in groups.items():
        for trial in range(trials):
            dist.barrier()
            Timed.spans.clear()
            t0 = time.time()
            work = dist.all_reduce(tensor, group=group, async_op=True)
            t1 = time.time()
            compute(repeats)
            t2 = time.time()
            work.wait()
            t3 = time.time()
            events.emit(rank, "overlap", mode=name, trial=trial, call=(t0, t1),
                        compute=(t1, t2), wait=(t2, t3), communication=Timed.spans[0])
    for trial in range(trials):  # each part alone, for the share hidden
        dist.barrier()
        t0 = time.time()
        dist.all_reduce(tensor, group=groups["inline"])
        t1 = time.time()
        compute(repeats)
        events.emit(rank, "alone", trial=trial, communication=t1 - t0,
                    compute=time.time() - t1)
    events.emit(rank, "threads", compute_threads=torch.get_num_threads())
    work = dist.all_reduce(tensor, group=groups["with its thread"], async_op=True)
    work.wait()  # done: what the handle says of it
    events.emit(rank, "polled", is_completed=work.is_completed(),
                future_done=work.get_future().done())
    if rank == 0:
        say(rank, f"{mebibytes} MiB all-reduced while {repeats} products of 192 x 192 "
                  f"run, {trials} trials each way")


def ddp(rank: int, size: int, events: Events, steps: int, data_root: str) -> None:
    """The MNIST net in float64, trained by DDP on gloo and on this backend, with DDP's
    own all-reduce and with a communication hook: the final weights of each."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    from workers.mnist import MnistNet, mnist_tensors

    (images, labels), _ = mnist_tensors(data_root)
    per_rank = 16
    gloo = dist.new_group(backend="gloo")
    runs = [("gloo", gloo, None), ("mine", None, None),
            ("mine, allreduce_hook", None, default_hooks.allreduce_hook)]
    weights = {}
    for name, group, hook in runs:
        torch.manual_seed(0)  # the same first weights on every rank and in every run
        model = DDP(MnistNet().double(), process_group=group, bucket_cap_mb=0.05)
        if hook is not None:
            model.register_comm_hook(group, hook)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for step in range(steps):
            first = (step * size + rank) * per_rank  # each rank its own images
            batch = slice(first, first + per_rank)
            loss = torch.nn.functional.cross_entropy(model(images[batch].double()),
                                                     labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        weights[name] = torch.cat([p.detach().flatten() for p in model.parameters()])
        del model, optimizer
    same = {name: torch.equal(w, weights["gloo"]) for name, w in weights.items()}
    events.emit(rank, "ddp", world_size=size, steps=steps, same_as_gloo=same,
                largest_difference={n: (w - weights["gloo"]).abs().max().item()
                                    for n, w in weights.items()},
                digests={n: hashlib.sha256(to_bytes(w)).hexdigest()[:16]
                         for n, w in weights.items()})
    if rank == 0:
        for name, equal in same.items():
            say(rank, f"{name:<22} {steps} steps: final weights "
                      f"{'equal to' if equal else 'differ from'} gloo's, bit for bit")


def speed(rank: int, size: int, events: Events, sizes, trials: int) -> None:
    """all_reduce at each size, on gloo and on this backend, the two taking turns call by
    call (so that the machine's disturbances fall on both): each trial's time."""
    groups = {"gloo": dist.new_group(backend="gloo"), "mine": None}
    for nbytes in sizes:
        tensor = torch.ones(max(nbytes // 4, 1))
        seconds = {name: [] for name in groups}
        for trial in range(trials + 5):  # five to warm up
            for name, group in groups.items():
                dist.barrier(group=groups["gloo"])
                begin = time.perf_counter()
                dist.all_reduce(tensor, group=group)
                if trial >= 5:
                    seconds[name].append(time.perf_counter() - begin)
        for name in groups:
            events.emit(rank, "speed", backend=name, size=tensor.numel() * 4,
                        seconds=seconds[name])
            if rank == 0:
                say(rank, f"{name:<5}{tensor.numel() * 4:>9} B: fastest "
                          f"{min(seconds[name]) * 1e6:8.0f} us, median "
                          f"{statistics.median(seconds[name]) * 1e6:8.0f} us")


def mistakes(rank: int, size: int, events: Events) -> None:
    """What a reader meets: an op the backend lacks, a reduction it lacks, shapes that
    differ across ranks, a rank that skips a collective, a backend for the wrong device."""
    tensor = torch.ones(3)

    def attempt(case: str, call) -> None:
        try:
            call()
            said = "no error"
        except Exception as error:  # the case's own message, for the page
            said = first_line(error)
        events.emit(rank, "mistake", case=case, error=said)
        say(rank, f"{case}: {said}")

    attempt("reduce (not written)", lambda: dist.reduce(tensor, dst=0))
    attempt("all_reduce with BAND", lambda: dist.all_reduce(tensor, op=ReduceOp.BAND))
    attempt("shapes differ", lambda: dist.all_reduce(torch.ones(3 + rank)))
    healthy = torch.ones(2)
    dist.all_reduce(healthy)
    say(rank, f"afterwards, all_reduce of ones: {healthy.tolist()}")
    short = dist.new_group(backend="mine", timeout=timedelta(seconds=2))
    if rank == 0:  # rank 1 skips it
        attempt("a rank skips it", lambda: dist.all_reduce(torch.ones(2), group=short))
    dist.barrier()
    cuda_only = dist.new_group(backend="mine_cuda")  # registered with devices=["cuda"]
    attempt("registered for cuda only", lambda: dist.all_reduce(tensor, group=cuda_only))


# --- one rank, from start to finish -------------------------------------------------------


def rank_main(rank: int, job: Job, args) -> None:
    register("mine")
    if args.demo == "overlap":
        for name, threaded in (("mine_timed", True), ("mine_inline_timed", False)):
            dist.Backend.register_backend(
                name, lambda *a, threaded=threaded: KEEP.append(Timed(*a, threaded)) or
                KEEP[-1], devices=["cpu"])
    if args.demo == "mistakes":
        dist.Backend.register_backend(
            "mine_cuda", lambda *a: KEEP.append(BACKEND_CLASS(*a)) or KEEP[-1],
            devices=["cuda"])
    events = Events(args.events)
    share_cores(job.world_size)
    with joined(job, rank):
        if args.demo == "values":
            values(rank, job.world_size, events)
        elif args.demo == "overlap":
            overlap(rank, job.world_size, events, args.mebibytes, args.trials)
        elif args.demo == "ddp":
            ddp(rank, job.world_size, events, args.steps, args.data_root)
        elif args.demo == "speed":
            speed(rank, job.world_size, events, args.sizes, args.trials)
        else:
            mistakes(rank, job.world_size, events)


DEMOS = ("values", "overlap", "ddp", "speed", "mistakes")


def command_line() -> Parser:
    from workers.mnist import DEFAULT_DATA_ROOT

    parser = Parser(prog="python -m workers.backend", description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    helps = {"values": "every collective on this backend and on gloo, the same inputs",
             "overlap": "compute while an all_reduce is in flight, with and without the "
                        "backend's thread",
             "ddp": "DDP trains the MNIST net in float64 on gloo and on this backend",
             "speed": "all_reduce's time at several sizes, on gloo and on this backend",
             "mistakes": "an op it lacks, a reduction it lacks, shapes that differ, a rank "
                         "that skips, a backend for the wrong device"}
    for name in DEMOS:
        demo = demos.add_parser(name, help=helps[name])
        demo.add_argument("--world-size", type=positive_int, default=2,
                          help="ranks to start (default 2; under torchrun: its WORLD_SIZE)")
        if name == "overlap":
            demo.add_argument("--mebibytes", type=positive_int, default=8,
                              help="the tensor all-reduced, in MiB (default 8)")
            demo.add_argument("--trials", type=positive_int, default=5,
                              help="trials each way (default 5)")
        if name == "ddp":
            demo.add_argument("--steps", type=positive_int, default=8,
                              help="training steps (default 8)")
            demo.add_argument("--data-root", default=DEFAULT_DATA_ROOT, metavar="DIR",
                              help="where the MNIST files are (default: the clone's data/)")
        if name == "speed":
            demo.add_argument("--sizes", type=positive_int, nargs="+",
                              default=[1 << 10, 16 << 10, 256 << 10, 1 << 22],
                              metavar="BYTES", help="sizes (default 1 KiB to 4 MiB)")
            demo.add_argument("--trials", type=positive_int, default=7,
                              help="timed calls at each size (default 7)")
        add_common_options(demo, timeout=60)
        demo.set_defaults(backend="gloo")  # this job's ranks meet as gloo's do
    return parser


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    if args.demo == "mistakes" and args.world_size != 2:
        parser.error("mistakes runs on 2 ranks: rank 1 is the one that skips")
    job = job_from_args(parser, args)
    job = Job(job.world_size, "mine", job.init_method, job.timeout, job.started_as_rank)
    open_events(args.events)
    return run_ranks(job, rank_main, args)


if __name__ == "__main__":
    exit_now(main())
