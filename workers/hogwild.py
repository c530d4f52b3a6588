"""Hogwild training, tensors shared between processes, and CPU oversubscription measured.

    python -m workers.hogwild train --processes 2 --steps 100 --repeats 3
    python -m workers.hogwild shared --processes 3
    python -m workers.hogwild queue
    python -m workers.hogwild fd-limit --nofile 64
    python -m workers.hogwild grid --repeats 3           # processes x threads, measured
    python -m workers.hogwild cuda                       # needs a GPU
    torchrun --standalone --nproc-per-node 2 -m workers.hogwild threads

Every process here comes from ``workers.ranks.launch`` (a forkserver with torch preloaded);
the model and the training images are put in shared memory once and handed to every process.
"""

from __future__ import annotations

import os
import resource
import time

import torch
import torch.multiprocessing as mp
from torch.nn import functional as F

from workers import PRELOADS
from workers.mnist import DEFAULT_DATA_ROOT, MnistNet, mnist_tensors
from workers.ranks import (
    MOST_PROCESSES,
    Events,
    Parser,
    add_common_options,
    exit_now,
    fail,
    first_line,
    launch,
    open_events,
    physical_cores,
    positive_float,
    positive_int,
    say,
    say_main,
)

CONTEXT = mp.get_context("forkserver")  # queues, events, barriers for launch()'s processes
# Imported by every process before it trains (the first optimizer would import
# torch._dynamo in the middle of the timed work).
PRELOAD = PRELOADS["hogwild"]  # (in workers/__init__.py)

# --- Hogwild ------------------------------------------------------------------------------


def shared_mnist(root: str):
    """The MNIST tensors, normalised once and moved to shared memory: every process reads
    the same pages instead of a copy each."""
    train, test = mnist_tensors(root)
    return tuple(tuple(t.share_memory_() for t in pair) for pair in (train, test))


def set_threads(threads: int | None) -> int:
    """``threads`` intra-op threads in this process; None keeps PyTorch's default."""
    if threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def hogwild_steps(model, images, labels, steps: int, batch_size: int, lr: float,
                  generator: torch.Generator):
    """The Hogwild loop: ``steps`` SGD steps with momentum 0.9 (each process keeps its own
    momentum buffer) on a model whose parameters are shared, yielding each step's loss.
    ``optimizer.step()`` writes straight into the weights every other process is reading,
    with no lock; the gradients are this process's own."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for _ in range(steps):
        batch = torch.randint(len(labels), (batch_size,), generator=generator)
        loss = F.cross_entropy(model(images[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()  # lock-free: races with the other processes' steps
        yield loss.item()


def hogwild_process(rank, model, images, labels, steps, threads, run, args,
                    events: Events) -> None:
    """One process of a run: ``hogwild_steps``, timed, its loss recorded every few steps."""
    threads = set_threads(threads)
    generator = torch.Generator().manual_seed(args.seed + rank)  # a different order each
    losses = hogwild_steps(model, images, labels, steps, args.batch_size, args.lr,
                           generator)
    with events.span(rank, "trained", threads=threads, pid=os.getpid(), **run):
        for step, loss in enumerate(losses):
            if step % LOSS_EVERY == 0:
                events.emit(rank, "loss", step=step, loss=loss, **run)
    say(rank, f"{run['processes']} process(es), repeat {run['repeat']}: {steps} steps "
              f"with {threads} thread(s), last loss {loss:.3f}")


LOSS_EVERY = 5  # steps between two recorded losses


def accuracy(model, images, labels) -> float:
    with torch.no_grad():
        return (model(images).argmax(1) == labels).float().mean().item()


def hogwild_training(args, events: Events) -> int:
    """One process against ``--processes`` Hogwild processes, the same number of updates in
    all (``--steps`` per Hogwild process), each with its share of the cores."""
    (images, labels), (test_images, test_labels) = shared_mnist(args.data_root)
    cores = physical_cores()  # the cores this process may use, hyper-threads counted once
    updates = args.steps * args.processes
    say_main(f"{updates} updates of {args.batch_size} images, by 1 process and by "
             f"{args.processes} Hogwild processes, {args.repeats} time(s) each")
    for repeat in range(args.repeats):
        for processes in sorted({1, args.processes}):
            torch.manual_seed(args.seed)  # the same initial weights every time
            model = MnistNet()
            model.share_memory()  # parameters to shared memory: children get handles
            threads = args.threads or max(1, cores // processes)
            run = dict(processes=processes, repeat=repeat)
            job = (model, images, labels, updates // processes, threads, run, args, events)
            code = launch(hogwild_process, job, processes, timeout=args.timeout,
                          preload=PRELOAD)
            if code:
                return code
            score = accuracy(model, test_images, test_labels)  # what the children wrote
            say_main(f"{processes} process(es), repeat {repeat}: test accuracy {score:.2%}")
            events.emit("main", "accuracy", accuracy=score, threads=threads, **run)
    return 0


# --- the parameters really are shared -----------------------------------------------------


def mapping_of(tensor: torch.Tensor) -> dict:
    """Which memory mapping of this process holds a tensor's storage (/proc/self/maps)."""
    address = tensor.untyped_storage().data_ptr()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            low, high = (int(part, 16) for part in fields[0].split("-"))
            if low <= address < high:
                name = fields[5].strip() if len(fields) > 5 else "(anonymous)"
                return {"inode": int(fields[4]), "file": name, "address": hex(address)}
    return {"inode": 0, "file": "(not found)", "address": hex(address)}


def shared_process(rank, model, everyone_wrote, events: Events) -> None:
    bias = model.fc.bias  # 10 numbers, shared by every process
    bias.data[rank] = rank + 1  # each process writes its own element ...
    everyone_wrote.wait()  # ... and after everyone has, each reads them all
    where = mapping_of(bias)
    first_four = bias.data[:4].tolist()
    say(rank, f"is_shared={bias.is_shared()}, storage at {where['address']} in "
              f"{where['file']} (inode {where['inode']}); fc.bias[:4] = {first_four}")
    events.emit(rank, "shared", pid=os.getpid(), seen=bias.data.tolist(), **where)


def gradient_process(rank, model, method: str, events: Events) -> None:
    """Compute a gradient of fc: is it this process's own, or the parent's shared one?"""
    model.fc(torch.ones(1, 512)).sum().backward()
    weight, bias = model.fc.weight.grad.is_shared(), model.fc.bias.grad.is_shared()
    say(rank, f"{method:<10} child: fc.weight.grad is_shared={weight}, "
              f"fc.bias.grad is_shared={bias}")
    events.emit(rank, "gradient", method=method, weight_grad_shared=weight,
                bias_grad_shared=bias)


def shared(args, events: Events) -> int:
    model = MnistNet()
    model.fc.bias.data.zero_()
    say_main(f"before share_memory(): is_shared={model.fc.bias.is_shared()}, "
             f"in {mapping_of(model.fc.bias)['file']}")
    model.fc.weight.grad = torch.zeros_like(model.fc.weight)  # a .grad before sharing, and
    model.share_memory()  # share_memory() moves it to shared memory too; fc.bias has none
    where = mapping_of(model.fc.bias)
    shared_now = model.fc.bias.is_shared()
    say_main(f"after share_memory(): is_shared={shared_now}, in {where['file']}")
    events.emit("main", "shared", pid=os.getpid(), seen=None, **where)
    code = launch(shared_process, (model, CONTEXT.Barrier(args.processes), events),
                  args.processes, timeout=args.timeout)
    say_main(f"after the children wrote: fc.bias[:4] = {model.fc.bias.data[:4].tolist()}")
    events.emit("main", "after", seen=model.fc.bias.data.tolist())
    # The gradients: pickled to the child (forkserver, spawn, a queue) or inherited (fork).
    for method in ["forkserver", "fork"]:
        children = [mp.get_context(method).Process(target=gradient_process,
                                                    args=(rank, model, method, events))
                    for rank in range(args.processes)]
        for child in children:
            child.start()
        for child in children:
            child.join(args.timeout)
        total = model.fc.weight.grad.sum().item()
        say_main(f"after the {method} children: the parent's fc.weight.grad sums to "
                 f"{total:g}, its fc.bias.grad is {model.fc.bias.grad}")
        events.emit("main", "parent gradient", method=method, weight_grad_sum=total,
                    bias_grad_is_none=model.fc.bias.grad is None)
    return code


# --- tensors through queues ---------------------------------------------------------------


def send_then_write(to_consumer, received, written, events: Events) -> None:
    """The producer: send a tensor, then write to it after the consumer has it."""
    tensor = torch.zeros(4)
    address = tensor.data_ptr()
    to_consumer.put(tensor)  # copies it into shared memory, once, and sends a handle
    received.wait()
    moved = tensor.data_ptr() != address
    say(0, f"after put: is_shared={tensor.is_shared()}, moved to new memory={moved}")
    tensor[0] = 42  # a write *after* sending ...
    written.set()
    events.emit(0, "sent", shared_after=tensor.is_shared(), moved=moved)


def receive_then_read(to_consumer, received, written, args, events: Events) -> None:
    """The consumer: the producer's later write is seen here, in the same memory."""
    tensor = to_consumer.get(timeout=args.timeout)
    received.set()
    written.wait()
    say(1, f"received {tensor.tolist()}: the producer's later write is visible")
    events.emit(1, "received", value=tensor[0].item(), shared=tensor.is_shared())


def queue_process(rank, to_consumer, received, written, queues, both_done, events, args):
    """Rank 0 produces, rank 1 consumes: the visibility lesson, then the benchmark."""
    if rank == 0:
        send_then_write(to_consumer, received, written, events)
    else:
        receive_then_read(to_consumer, received, written, args, events)
    for repeat in range(args.repeats):
        for (queue_type, pattern), (forward, back) in queues.items():
            transfer(rank, forward, back, queue_type, pattern, repeat, args, events)
            # Neither side may exit while the other still unpickles a tensor it sent: the
            # receiver of a handle fetches the memory through the sender's process.
            both_done.wait()


def transfer(rank, forward, back, queue_type, pattern, repeat, args, events) -> None:
    """``args.items`` tensors of 1 MB from rank 0 to rank 1, timed on the consumer.

    ``forward`` carries filled tensors to the consumer; ``back`` returns them for reuse.
    """
    count, numel = args.items, 1 << 18
    if rank == 0:
        if pattern == "buffers sent back":
            for _ in range(4):
                back.put(torch.empty(numel).share_memory_())
        for i in range(count):
            if pattern == "buffers sent back":
                buffer = back.get()  # a free buffer the consumer returned
            else:
                buffer = torch.empty(numel)  # new shared memory, and a copy, every time
            buffer.fill_(i)
            forward.put(buffer)
        while not isinstance(back.get(), str):
            pass  # buffers still coming back, until the consumer's "done"
    else:
        with events.span(rank, "transfer", queue=queue_type, pattern=pattern, items=count,
                         repeat=repeat):
            total = 0.0
            for _ in range(count):
                buffer = forward.get()
                total += buffer[0].item()
                if pattern == "buffers sent back":
                    back.put(buffer)  # return it for reuse
        back.put("done")
        assert total == sum(range(count))


def queue_demo(args, events: Events) -> int:
    queues = {}  # a pair (forward, back) for every kind of queue and transfer pattern
    for queue_type in ("Queue", "SimpleQueue"):
        for pattern in ("new buffer each time", "buffers sent back"):
            make = getattr(CONTEXT, queue_type)
            queues[(queue_type, pattern)] = (make(), make())
    received, written = CONTEXT.Event(), CONTEXT.Event()
    job = (CONTEXT.Queue(), received, written, queues, CONTEXT.Barrier(2), events, args)
    return launch(queue_process, job, 2, timeout=args.timeout)


# --- sharing strategies and the file-descriptor limit -------------------------------------


def fd_limit_process(rank, strategy, queue, done, args, events: Events) -> None:
    mp.set_sharing_strategy(strategy)  # sender and receiver must agree
    if rank == 0:
        tensors = [torch.full((16,), float(i)) for i in range(args.count)]
        for tensor in tensors:
            queue.put(tensor)
        done.wait(args.timeout)  # the sender must outlive the receiver's use of its tensors
        return
    try:
        receive_and_keep(rank, strategy, queue, args, events)
    finally:
        done.set()


def receive_and_keep(rank, strategy, queue, args, events: Events) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, hard))  # as `ulimit -n`
    kept = []  # holding every received tensor keeps every one of their handles open
    try:
        for _ in range(args.count):
            kept.append(queue.get(timeout=args.timeout))
    except RuntimeError as error:
        say(rank, f"{strategy}: failed after {len(kept)} tensors with ulimit -n "
                  f"{args.nofile}: {type(error).__name__}: {first_line(error)}")
        events.emit(rank, "fd-limit", strategy=strategy, received=len(kept),
                    error=first_line(error))
        raise SystemExit(1) from None
    say(rank, f"{strategy}: received and kept all {len(kept)} tensors with ulimit -n "
              f"{args.nofile}")
    events.emit(rank, "fd-limit", strategy=strategy, received=len(kept), error=None)


def fd_limit(args, events: Events) -> int:
    """One job per sharing strategy, the receiver under the same open-file limit."""
    say_main(f"strategies here: {sorted(mp.get_all_sharing_strategies())}, "
             f"default {mp.get_sharing_strategy()}")
    for strategy in args.strategies:
        job = (strategy, CONTEXT.Queue(), CONTEXT.Event(), args, events)
        code = launch(fd_limit_process, job, 2, timeout=args.timeout)
        say_main(f"{strategy}: the job exited with {code}")
    return 0


# --- oversubscription, measured -----------------------------------------------------------


def context_switches() -> tuple[int, int]:
    """How often this process's threads, all of them, gave up a core to wait (voluntary)
    or were taken off one by the scheduler (involuntary), so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)  # summed over the process's threads
    return usage.ru_nvcsw, usage.ru_nivcsw


def grid_process(rank, model, images, labels, threads, steps, batch_size, start, results):
    used = set_threads(threads)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(rank)
    batches = [torch.randint(len(labels), (batch_size,), generator=generator)
               for _ in range(steps)]
    start.wait()  # every process starts the clock together
    began, cpu_began, switches_began = time.time(), time.process_time(), context_switches()
    for batch in batches:
        loss = F.cross_entropy(model(images[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    voluntary, involuntary = (now - then for now, then
                              in zip(context_switches(), switches_began))
    results.put(dict(t=began, t_end=time.time(), threads=used, images=steps * batch_size,
                     cpu=time.process_time() - cpu_began, voluntary=voluntary,
                     involuntary=involuntary))


def thread_settings(processes: int, cores: int) -> list[tuple[str, int | None]]:
    """The distinct thread counts among PyTorch's default, the rule max(1, cores //
    processes), and 1, each with the names of the settings it stands for."""
    default = torch.get_num_threads()
    named: dict[int, list[str]] = {}
    for label, count in [("default", default), ("rule", max(1, cores // processes)),
                         ("1 thread", 1)]:
        named.setdefault(count, []).append(label)
    return [(" = ".join(labels), None if count == default else count)
            for count, labels in named.items()]


def grid(args, events: Events) -> int:
    (images, labels), _ = shared_mnist(args.data_root)
    cores = physical_cores()  # the cores this process may use, hyper-threads counted once
    default = torch.get_num_threads()
    say_main(f"{cores} cores; PyTorch's default here is {default} threads per process")
    for repeat in range(args.repeats):  # the repeats interleaved, so a slow spell of the
        for processes in args.grid_processes:  # machine falls on every setting alike
            for label, threads in thread_settings(processes, cores):
                model = MnistNet()
                model.share_memory()
                start, results = CONTEXT.Barrier(processes), CONTEXT.SimpleQueue()
                job = (model, images, labels, threads, args.steps, args.batch_size, start,
                       results)
                code = launch(grid_process, job, processes, args.timeout, preload=PRELOAD)
                if code:
                    return code
                work = [results.get() for _ in range(processes)]
                wall = max(e["t_end"] for e in work) - min(e["t"] for e in work)
                rate = sum(e["images"] for e in work) / wall
                cpu = sum(e["cpu"] for e in work)
                voluntary = sum(e["voluntary"] for e in work)
                involuntary = sum(e["involuntary"] for e in work)
                threads_each = work[0]["threads"]
                say_main(f"{processes} x {threads_each} thread(s) ({label}), repeat "
                         f"{repeat}: {rate:6.0f} images/s, CPU/wall {cpu / wall:4.2f}, "
                         f"{(voluntary + involuntary) / wall:7.0f} switches/s")
                events.emit("main", "grid", processes=processes, setting=label,
                            threads=threads_each, repeat=repeat, rate=rate, wall=wall,
                            cpu=cpu, voluntary=voluntary, involuntary=involuntary)
    return 0


# --- threads under torchrun, and CUDA tensors ---------------------------------------------


def threads_report(events: Events) -> int:
    rank = int(os.environ.get("RANK", 0))
    omp = os.environ.get("OMP_NUM_THREADS")
    threads, cores = torch.get_num_threads(), physical_cores()
    events.emit(rank, "threads", omp_num_threads=omp, threads=threads, cores=cores)
    say(rank, f"OMP_NUM_THREADS={omp or '(not set)'}, torch.get_num_threads()={threads}, "
              f"cores={cores}")
    return 0


def cuda_process(rank, queue, done, events: Events) -> None:
    if rank == 0:
        tensor = torch.arange(4.0, device="cuda")
        queue.put(tensor)  # a handle to GPU memory; the memory stays the producer's
        done.wait()  # the producer must outlive every consumer's use of the tensor
        say(rank, "consumer is done: the producer may now free the tensor and exit")
    else:
        tensor = queue.get()
        say(rank, f"received {tensor.tolist()} on {tensor.device}, without a copy")
        events.emit(rank, "cuda", device=str(tensor.device), value=tensor.tolist())
        del tensor  # release it before telling the producer
        done.set()


def cuda(args, events: Events) -> int:
    if not torch.cuda.is_available():
        fail("cuda needs a GPU: none is visible")
    return launch(cuda_process, (CONTEXT.Queue(), CONTEXT.Event(), events), 2,
                  timeout=args.timeout)


# --- command line -------------------------------------------------------------------------


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.hogwild", description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    train = demos.add_parser("train", help="Hogwild: M processes train one shared model")
    shared_demo = demos.add_parser("shared", help="the parameters really are shared")
    queue = demos.add_parser("queue", help="tensors through queues, buffers reused")
    limit = demos.add_parser("fd-limit", help="sharing strategies under an open-file limit")
    grid_demo = demos.add_parser("grid", help="processes x threads, throughput measured")
    threads = demos.add_parser("threads", help="the threads a process got (under torchrun)")
    cuda_demo = demos.add_parser("cuda", help="a CUDA tensor through a queue (needs a GPU)")
    for demo, processes in ((train, 2), (shared_demo, 3)):
        demo.add_argument("--processes", type=positive_int, default=processes,
                          help=f"M processes (default {processes})")
    train.add_argument("--threads", type=positive_int, default=None,
                       help="threads per process (default: max(1, cores // processes))")
    train.add_argument("--steps", type=positive_int, default=100,
                       help="steps per Hogwild process; the one process takes as many "
                            "as all of them together (default 100)")
    train.add_argument("--lr", type=positive_float, default=0.01,
                       help="M processes step the shared weights M times as often as one "
                            "(default 0.01)")
    train.add_argument("--seed", type=int, default=0, help="default 0")
    for demo in (train, grid_demo):
        demo.add_argument("--repeats", type=positive_int, default=1,
                          help="times each setting is run (default 1)")
    for demo in (train, grid_demo):
        demo.add_argument("--batch-size", type=positive_int, default=40, help="default 40")
        demo.add_argument("--data-root", default=DEFAULT_DATA_ROOT, metavar="DIR",
                          help="where MNIST/raw is, or will be written (default: data/)")
    queue.add_argument("--items", type=positive_int, default=300,
                       help="tensors per transfer pattern (default 300)")
    queue.add_argument("--repeats", type=positive_int, default=1,
                       help="times each pattern is measured (default 1)")
    strategies = ["file_descriptor", "file_system"]
    limit.add_argument("--strategies", nargs="+", choices=strategies, default=strategies,
                       help="sharing strategies to try, one job each (default both)")
    limit.add_argument("--nofile", type=positive_int, default=64,
                       help="the receiver's open-file limit, as ulimit -n (default 64)")
    limit.add_argument("--count", type=positive_int, default=200,
                       help="tensors sent and kept (default 200)")
    grid_demo.add_argument("--grid-processes", type=positive_int, nargs="+",
                           default=[1, 2, 4], metavar="M", help="process counts (1 2 4)")
    grid_demo.add_argument("--steps", type=positive_int, default=8,
                           help="training steps per process (default 8)")
    for demo in (train, shared_demo, queue, limit, grid_demo, threads, cuda_demo):
        add_common_options(demo, timeout=120)
    return parser


DEMOS = {"train": hogwild_training, "shared": shared, "queue": queue_demo,
         "fd-limit": fd_limit, "grid": grid, "cuda": cuda}


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    counts = [getattr(args, "processes", 1), *getattr(args, "grid_processes", [])]
    if max(counts) > MOST_PROCESSES:
        parser.error(f"at most {MOST_PROCESSES} processes, got {max(counts)}")
    if args.demo == "fd-limit" and args.nofile < 16:
        parser.error("--nofile below 16 leaves too few files to start Python at all")
    events = open_events(args.events)
    if args.demo == "threads":
        return threads_report(events)
    return DEMOS[args.demo](args, events)


if __name__ == "__main__":
    exit_now(main())
