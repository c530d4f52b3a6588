"""Inside DistributedDataParallel: buckets, overlap, gradient accumulation, communication
hooks and DDP's options, each measured on a real job.

    python -m workers.ddp_internals buckets --caps default 1 25
    python -m workers.ddp_internals overlap
    python -m workers.ddp_internals no-sync --micro-batches 4
    python -m workers.ddp_internals compression --epochs 1
    python -m workers.ddp_internals options
    python -m workers.ddp_internals compile
    torchrun --standalone --nproc-per-node 2 -m workers.ddp_internals overlap

Every demo is one job of --world-size ranks (default 2): gloo on the CPU, nccl with one GPU
per rank. The ranks record what they measured in the events file (--events), which the
chapter draws; rank 0 prints the results.
"""

import logging
import statistics
import time
from functools import partial

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from workers import PRELOADS
from workers.job import (
    Job,
    add_job_options,
    job_from_args,
    joined,
    run_ranks,
    share_cores,
    synchronize,
    wrap,
)
from workers.mnist import DEFAULT_DATA_ROOT, MnistNet, mnist_tensors, prepare_mnist
from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    exit_now,
    fail,
    first_line,
    open_events,
    positive_float,
    positive_int,
    say,
)

# --- a model with several buckets' worth of gradients, and how a step is timed ----------


class Tower(nn.Module):
    """``depth`` square linear layers of ``width`` features, each followed by a ReLU:
    ``4 * width**2`` bytes of weight gradient per layer."""

    def __init__(self, width: int, depth: int):
        super().__init__()
        layers = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)


def batch_for(rank: int, step: int, args, device) -> torch.Tensor:
    """Rank r's inputs for one step: different on every rank, the same on every run."""
    generator = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(args.batch_size, args.width, generator=generator).to(device)


def train_step(model, optimizer, inputs) -> None:
    optimizer.zero_grad()
    model(inputs).pow(2).mean().backward()
    optimizer.step()


def step_seconds(step, *args, steps: int, warmup: int, device) -> list[float]:
    """Wall time of each of ``steps`` calls of ``step(*args)``, after ``warmup`` more."""
    for _ in range(warmup):
        step(*args)
    times = []
    for _ in range(steps):
        synchronize(device)
        begin = time.perf_counter()
        step(*args)
        synchronize(device)
        times.append(time.perf_counter() - begin)
    return times


def slowest_rank(seconds, device) -> list[float]:
    """A step is as slow as its slowest rank: the maximum over the ranks, element by
    element, known to all."""
    value = torch.tensor(seconds if isinstance(seconds, list) else [seconds], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value.tolist()


def spread(times: list[float]) -> str:
    """``median [min-max]`` in milliseconds."""
    return (f"{statistics.median(times) * 1e3:.1f} ms "
            f"[{min(times) * 1e3:.1f}-{max(times) * 1e3:.1f}]")


# --- buckets, seen ------------------------------------------------------------------------


def averaging_hook(process_group,
                   bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """What DDP does by default: divide the bucket by the number of ranks, all-reduce it
    in the background, and hand DDP a future of the averaged bucket."""
    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer().div_(group.size())  # one flat tensor: the bucket's gradients
    future = dist.all_reduce(buffer, group=group, async_op=True).get_future()
    return future.then(lambda done: done.value()[0])  # the all-reduced tensor


def recording_hook(state: dict,
                   bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """``averaging_hook``, and a record of the bucket: its index, bytes and parameters, when
    DDP handed it over and when its all-reduce finished."""
    began, buffer = time.time(), bucket.buffer()
    future = averaging_hook(None, bucket)

    def record(done: torch.futures.Future) -> torch.Tensor:
        state["events"].emit(
            state["rank"], "bucket", t=began, t_end=time.time(), **state["labels"],
            index=bucket.index(), bytes=buffer.numel() * buffer.element_size(),
            parameters=[state["names"][id(p)] for p in bucket.parameters()])
        return done.value()

    return future.then(record)


def record_gradients_ready(model: nn.Module, state: dict) -> None:
    """Record the moment backward has finished each layer's weight gradient."""
    for name, parameter in model.named_parameters():
        if name.endswith("weight"):
            def ready(_, name=name):
                state["events"].emit(state["rank"], "gradient ready", **state["labels"],
                                     parameter=name)
            parameter.register_post_accumulate_grad_hook(ready)


def buckets(rank: int, args, device, events: Events) -> None:
    """For each bucket_cap_mb: train a few steps with every bucket recorded; time them."""
    for cap in args.caps:
        torch.manual_seed(0)
        model = Tower(args.width, args.depth).to(device)
        chosen = {} if cap == "default" else {"bucket_cap_mb": cap}
        ddp = wrap(model, device, **chosen)
        state = {"rank": rank, "events": events, "labels": {"cap_mb": cap, "step": 0},
                 "names": {id(p): name for name, p in model.named_parameters()}}
        ddp.register_comm_hook(state, recording_hook)
        record_gradients_ready(model, state)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        times = []
        for step in range(args.steps + 2):  # DDP rebuilds its buckets after step 0
            state["labels"]["step"] = step
            inputs = batch_for(rank, step, args, device)
            synchronize(device)
            with events.span(rank, "backward", **state["labels"]):
                optimizer.zero_grad()
                begin = time.perf_counter()
                ddp(inputs).pow(2).mean().backward()  # returns when every bucket is reduced
            optimizer.step()
            synchronize(device)
            times.append(time.perf_counter() - begin)
        seconds = slowest_rank(times[2:], device)
        events.emit(rank, "bucket cap", cap_mb=cap, seconds=seconds)
        if rank == 0:
            say(rank, f"bucket_cap_mb={cap!s:<8} {spread(seconds)} per step")


# --- overlap: when it helps --------------------------------------------------------------


def backward_piece(weights: torch.Tensor, repeats: int) -> None:
    """Stands for computing one bucket's gradients: matrix products, real CPU work."""
    for _ in range(repeats):
        torch.tanh(weights @ weights)


def blocking_step(gradients: list, weights, repeats: int) -> None:
    """Compute a bucket, all-reduce it and wait, compute the next: nothing overlaps."""
    for gradient in gradients:
        backward_piece(weights, repeats)
        dist.all_reduce(gradient)


def overlapped_step(gradients: list, weights, repeats: int) -> None:
    """Compute a bucket, start its all-reduce and go on computing while it travels; wait
    for all of them at the end, as DDP does before backward() returns."""
    pending = []
    for gradient in gradients:
        backward_piece(weights, repeats)
        pending.append(dist.all_reduce(gradient, async_op=True))
    for work in pending:
        work.wait()


def communication_alone(gradients: list) -> None:
    for gradient in gradients:
        dist.all_reduce(gradient)


def computation_alone(gradients: list, weights, repeats: int) -> None:
    for _ in gradients:
        backward_piece(weights, repeats)


def matching_repeats(gradients: list, weights: torch.Tensor) -> int:
    """How many matrix products per message make the computation take as long as the
    all-reduces of ``gradients``, agreed by every rank: then perfect overlap would halve
    the step. Timed as the step times them, twice: the second pass corrects the first."""
    device, repeats = weights.device, 1
    for _ in range(2):
        communicate = step_seconds(communication_alone, gradients, steps=3, warmup=1,
                                   device=device)
        compute = step_seconds(computation_alone, gradients, weights, repeats, steps=3,
                               warmup=1, device=device)
        ratio = torch.tensor([statistics.median(communicate) / statistics.median(compute)],
                             device=device)
        dist.all_reduce(ratio)  # the ranks' mean ratio: one repeat count for all
        repeats = max(1, round(repeats * ratio.item() / dist.get_world_size()))
    return repeats


def overlap(rank: int, args, device, events: Events) -> None:
    """Blocking against overlapped all-reduces, for small messages (their time is mostly
    waiting) and large ones (mostly copying and adding), each way ``--trials`` times."""
    torch.set_num_threads(1)  # one core of compute per rank: the ranks fill the machine
    weights = torch.randn(args.size, args.size, generator=torch.Generator().manual_seed(0))
    weights = weights.to(device)
    for name, count, numel in [("small", args.small_count, args.small_kib * 256),
                               ("large", args.large_count, args.large_mib * 256 * 1024)]:
        gradients = [torch.ones(numel, device=device) for _ in range(count)]
        repeats = matching_repeats(gradients, weights)
        ways = {
            "compute alone": partial(computation_alone, gradients, weights, repeats),
            "all-reduce alone": partial(communication_alone, gradients),
            "blocking": partial(blocking_step, gradients, weights, repeats),
            "overlapped": partial(overlapped_step, gradients, weights, repeats),
        }
        times = {way: [] for way in ways}
        cpu_share = []
        for trial in range(args.trials + 1):  # the first round warms up
            for way, step in ways.items():
                dist.barrier()
                cpu, wall = time.process_time(), time.perf_counter()
                step()
                synchronize(device)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                if trial:
                    times[way].append(wall)
                    if way == "all-reduce alone":  # every thread of this process
                        cpu_share.append(cpu / wall)
        for way in ways:
            times[way] = slowest_rank(times[way], device)
        events.emit(rank, "overlap", messages=name, count=count, bytes=numel * 4,
                    repeats=repeats, seconds=times, cpu_share=cpu_share)
        if rank == 0:
            say(rank, f"{count} messages of {numel * 4 / 1024:g} KiB, each after "
                      f"{repeats} matrix product(s):")
            for way, seconds in times.items():
                say(rank, f"  {way:<17} {spread(seconds)}")


# --- gradient accumulation with no_sync() -------------------------------------------------


def counting_hook(state: dict,
                  bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's own averaging hook, counting the all-reduces it starts, per micro-batch (the
    number of forward passes so far, counted by ``count_forwards``)."""
    state["all-reduces"] += 1
    state["per micro-batch"][state["forwards"] - 1] += 1
    return default_hooks.allreduce_hook(None, bucket)


def count_forwards(model: nn.Module, state: dict) -> None:
    """Count the forward passes of ``model``: which micro-batch a backward belongs to."""
    def counted(module, inputs):
        state["forwards"] += 1
        state["per micro-batch"].append(0)
    model.register_forward_pre_hook(counted)


def accumulate(ddp: DDP, optimizer, micro_batches: list, use_no_sync: bool) -> None:
    """One optimizer step over k micro-batches; with no_sync(), one round of all-reduces
    (one per bucket), in the last backward."""
    optimizer.zero_grad()
    k = len(micro_batches)
    for i, inputs in enumerate(micro_batches):
        if use_no_sync and i < k - 1:
            with ddp.no_sync():  # the gradients only add up locally
                (ddp(inputs).pow(2).mean() / k).backward()
        else:  # this backward averages everything accumulated so far
            (ddp(inputs).pow(2).mean() / k).backward()
    optimizer.step()


ACCUMULATION = ["all-reduce every micro-batch", "no_sync()", "one batch k times larger"]


def no_sync(rank: int, args, device, events: Events) -> None:
    """For each K of --micro-batches: K micro-batches per step, with and without no_sync(),
    against one batch K times larger (in --dtype: float64 makes rounding too small to flip
    a ReLU, so the three end equal to the last few bits on any machine)."""
    dtype = getattr(torch, args.dtype)
    for k in args.micro_batches:
        micro_batches = [batch_for(rank, i, args, device).to(dtype) for i in range(k)]
        weights = {}
        for name in ACCUMULATION:
            torch.manual_seed(0)
            ddp = wrap(Tower(args.width, args.depth).to(device, dtype), device)
            state = {"all-reduces": 0, "forwards": 0, "per micro-batch": []}
            ddp.register_comm_hook(state, counting_hook)
            count_forwards(ddp.module, state)
            optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
            if name == "one batch k times larger":
                one_step = partial(train_step, ddp, optimizer, torch.cat(micro_batches))
            else:
                one_step = partial(accumulate, ddp, optimizer, micro_batches,
                                   use_no_sync=name == "no_sync()")
            one_step()  # the first step: its weights are compared
            weights[name] = [p.detach().clone() for p in ddp.module.parameters()]
            # count from here, with DDP's buckets rebuilt
            state.update({"all-reduces": 0, "forwards": 0, "per micro-batch": []})
            one_step()
            all_reduces = state["all-reduces"]  # in one optimizer step
            events.emit(rank, "accumulation", variant=name, all_reduces=all_reduces, k=k,
                        per_micro_batch=state["per micro-batch"])
            if rank == 0:
                say(rank, f"K={k}: {name:<30} {all_reduces:3} all-reduce(s) per optimizer "
                          "step")
        reference = weights["one batch k times larger"]
        for name in ACCUMULATION:
            difference = max((mine - theirs).abs().max().item()
                             for mine, theirs in zip(weights[name], reference))
            events.emit(rank, "weights", variant=name, largest_difference=difference, k=k)


# --- hooks that change the traffic --------------------------------------------------------


class CountedTraffic:
    """Add up the bytes of every tensor handed to ``dist.all_reduce`` within the block.

    DDP's communication hooks call ``torch.distributed.all_reduce``; inside the block that
    name stands for a wrapper that counts each tensor's bytes, then calls the real one.
    """

    def __init__(self):
        self.bytes = 0
        self.dtypes = set()  # what the all-reduces carried
        self.all_reduce = dist.all_reduce

    def counted(self, tensor, *args, **kwargs):
        self.bytes += tensor.numel() * tensor.element_size()
        self.dtypes.add(str(tensor.dtype))
        return self.all_reduce(tensor, *args, **kwargs)

    def __enter__(self):
        dist.all_reduce = self.counted
        return self

    def __exit__(self, *exc):
        dist.all_reduce = self.all_reduce


HOOKS = ["allreduce (the default)", "fp16_compress_hook", "bf16_compress_hook",
         "powerSGD_hook, from step 2", "powerSGD_hook, defaults otherwise"]
AUTOCAST = "allreduce, bf16 autocast forward"  # DDP's default hook, a bf16 forward


def register_hook(ddp: DDP, name: str, rank: int = 2) -> None:
    """One of PyTorch's shipped communication hooks, registered as a reader registers it
    (``rank``: PowerSGD's matrix_approximation_rank)."""
    if name.startswith("powerSGD") and torch.cuda.is_available() and not next(
            ddp.parameters()).is_cuda:  # a PyTorch bug, explained in the chapter
        raise RuntimeError("powerSGD_hook fails for CPU gradients where a GPU is visible "
                           "(it calls torch.cuda.synchronize on the CPU): run with "
                           "CUDA_VISIBLE_DEVICES= to hide the GPUs")
    if name == "allreduce (the default)":  # what DDP does without a hook
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    elif name == "fp16_compress_hook":  # None: the default process group
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif name == "bf16_compress_hook":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif name == "powerSGD_hook, from step 2":
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=rank,
            start_powerSGD_iter=2)  # compress from step 2
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    else:  # start_powerSGD_iter=1_000: the first 1,000 steps are plain all-reduces
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                            matrix_approximation_rank=rank)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)


def mnist_step(ddp: DDP, optimizer, images, labels, bf16_autocast: bool) -> float:
    """One step; with ``bf16_autocast``, the forward in bfloat16 where autocast deems it
    safe, while the weights, their gradients and DDP's buckets stay float32."""
    optimizer.zero_grad()
    with torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=bf16_autocast):
        loss = F.cross_entropy(ddp(images), labels)  # autocast keeps the loss float32
    loss.backward()  # outside autocast: each gradient takes its parameter's dtype
    optimizer.step()
    return loss.item()


def train_mnist(ddp: DDP, optimizer, rank: int, args, device, images, labels,
                bf16_autocast: bool = False) -> list:
    """--epochs over the training images, this rank's share of each global batch;
    returns this rank's loss at every step."""
    world_size = dist.get_world_size()
    per_rank = args.batch_size // world_size
    steps, losses = len(images) // args.batch_size, []
    for epoch in range(args.epochs):
        order = torch.randperm(len(images), generator=torch.Generator().manual_seed(epoch))
        for step in range(steps):
            batch = order[step * args.batch_size:][:args.batch_size]
            mine = batch[rank * per_rank:][:per_rank]
            losses.append(mnist_step(ddp, optimizer, images[mine].to(device),
                                     labels[mine].to(device), bf16_autocast))
    return losses


def compression(rank: int, args, device, events: Events) -> None:
    """The same training with each hook (PowerSGD with each --powersgd-ranks), and with
    the default hook and the forward under bf16 autocast: bytes all-reduced per step and
    their dtypes, test accuracy, each step's loss."""
    (images, labels), (test_images, test_labels) = mnist_tensors(args.data_root)
    images, labels = images[:args.train_images], labels[:args.train_images]
    runs = [(name, None) for name in HOOKS[:3]] + [(AUTOCAST, None)] + [
        (HOOKS[3], r) for r in args.powersgd_ranks] + [(HOOKS[4], 2)]
    for name, approximation_rank in runs:
        label = name if approximation_rank is None or name == HOOKS[4] else (
            f"powerSGD_hook, approximation rank {approximation_rank}, from step 2")
        torch.manual_seed(0)
        ddp = wrap(MnistNet().to(device), device)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
        outputs = set()  # the dtypes of the model's outputs, in training
        watch = ddp.module.register_forward_hook(
            lambda module, inputs, output, seen=outputs: seen.add(str(output.dtype)))
        hook = HOOKS[0] if name == AUTOCAST else name  # autocast: DDP's default hook
        try:
            register_hook(ddp, hook, approximation_rank or 2)
            with CountedTraffic() as traffic:
                losses = train_mnist(ddp, optimizer, rank, args, device, images, labels,
                                     bf16_autocast=name == AUTOCAST)
        except RuntimeError as error:  # a backend without this dtype, a CPU with a GPU
            events.emit(rank, "hook", hook=label, error=first_line(error),
                        approximation_rank=approximation_rank)
            if rank == 0:
                say(rank, f"{label:<34} did not run: {first_line(error)}")
            continue
        watch.remove()
        with torch.no_grad():
            predicted = ddp.module(test_images.to(device)).argmax(dim=1)
        accuracy = (predicted == test_labels.to(device)).float().mean().item()
        steps = len(losses)
        events.emit(rank, "hook", hook=label, bytes_per_step=traffic.bytes / steps,
                    accuracy=accuracy, error=None, steps=steps, losses=losses,
                    train_images=len(images), approximation_rank=approximation_rank,
                    all_reduced=sorted(traffic.dtypes), outputs=sorted(outputs),
                    gradients=sorted({str(p.grad.dtype) for p in ddp.parameters()}))
        if rank == 0:
            say(rank, f"{label:<34} {traffic.bytes / steps / 1e3:6.1f} kB all-reduced per "
                      f"step, test accuracy {accuracy:.1%}")


# --- DDP's options, and batch norm --------------------------------------------------------


class TowerWithUnusedLayer(Tower):
    """The tower, and one more layer that forward never calls."""

    def __init__(self, width: int, depth: int):
        super().__init__(width, depth)
        self.unused = nn.Linear(width, width)


OPTIONS = ["defaults", "gradient_as_bucket_view=True", "static_graph=True",
           "find_unused_parameters=True"]


def wrapped(model: nn.Module, option: str, device) -> DDP:
    """DDP around ``model`` with one of its options set."""
    ids = [device.index] if device.type == "cuda" else None  # the rank's GPU, or the CPU
    if option == "gradient_as_bucket_view=True":  # param.grad is a view into its bucket
        return DDP(model, device_ids=ids, gradient_as_bucket_view=True)
    if option == "static_graph=True":  # the same parameters used in every step
        return DDP(model, device_ids=ids, static_graph=True)
    if option == "find_unused_parameters=True":  # look for unused ones after each forward
        return DDP(model, device_ids=ids, find_unused_parameters=True)
    return DDP(model, device_ids=ids)


def options(rank: int, args, device, events: Events) -> None:
    """Whether each option trains the tower and the tower with a layer that takes no part
    in the loss, for a few steps."""
    inputs = batch_for(rank, 0, args, device)
    for option in OPTIONS:
        for model in [Tower(args.width, args.depth),
                      TowerWithUnusedLayer(args.width, args.depth)]:
            torch.manual_seed(0)
            ddp = wrapped(model.to(device), option, device)
            buckets = recording_buckets(ddp)
            optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
            try:
                for _ in range(args.steps):
                    train_step(ddp, optimizer, inputs)
                error = None
            except RuntimeError as raised:  # DDP refuses the unused layer
                error = first_line(raised)
            events.emit(rank, "option", option=option, model=type(model).__name__,
                        error=error, buckets=[buckets[i] for i in sorted(buckets)])
            if rank == 0:
                result = f"refused: {error.split('. ')[0]}" if error else "trained"
                say(rank, f"{option:<29} {type(model).__name__:<21} {result}")
    batch_norm(rank, args, device, events)


def recording_buckets(ddp: DDP) -> dict:
    """The parameters' names in each bucket, by bucket index, as the last step all-reduced
    them (a comm hook that records them, then all-reduces and averages as DDP's own
    does)."""
    names = {id(p): name for name, p in ddp.module.named_parameters()}
    buckets = {}

    def hook(state, bucket):
        buckets[bucket.index()] = [names[id(p)] for p in bucket.parameters()]
        return default_hooks.allreduce_hook(None, bucket)

    ddp.register_comm_hook(None, hook)
    return buckets


def synced_statistics(inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance per feature over every rank's batch, the way SyncBatchNorm gets
    them in each forward: every rank's own mean, variance and count, all-gathered (the
    counts may differ between ranks), then combined."""
    features = inputs.shape[1]
    count = torch.tensor([len(inputs)], dtype=inputs.dtype, device=inputs.device)
    mine = torch.cat([inputs.mean(dim=0), inputs.var(dim=0, unbiased=False), count])
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    means, variances, counts = torch.stack(everyone).split([features, features, 1], dim=1)
    mean = (counts * means).sum(dim=0) / counts.sum()
    # each rank's spread around its own mean, plus how far that mean is from the whole's
    variance = (counts * (variances + (means - mean) ** 2)).sum(dim=0) / counts.sum()
    return mean, variance


def batch_norm(rank: int, args, device, events: Events) -> None:
    """Each rank's batch statistics, its own and synchronised, and SyncBatchNorm itself.
    The statistics are compared in float64: two orders of summation agree to ~1e-14."""
    inputs = batch_for(rank, 0, args, device)[:, :4] + rank  # rank r's data centred on r
    exact = inputs.double()
    mean, variance = synced_statistics(exact)
    everyone = [torch.empty_like(exact) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, exact)
    whole = torch.cat(everyone)  # the global batch, to check against
    events.emit(rank, "batch statistics", own_mean=inputs.mean(dim=0).tolist(),
                synced_mean=mean.tolist(), whole_batch_mean=whole.mean(dim=0).tolist(),
                synced_variance=variance.tolist(),
                whole_batch_variance=whole.var(dim=0, unbiased=False).tolist())
    for layer in [nn.BatchNorm1d(4), nn.SyncBatchNorm(4)]:
        try:
            wrap(nn.Sequential(layer).to(device), device)(inputs)
            error = None
        except ValueError as raised:  # SyncBatchNorm on the CPU
            error = first_line(raised)
        events.emit(rank, "batch norm", layer=type(layer).__name__, error=error,
                    running_mean=layer.running_mean.tolist())
        if rank == 0:
            say(rank, f"{type(layer).__name__:<13} " + (f"error: {error}" if error else
                      f"running_mean {layer.running_mean.tolist()}"))


# --- torch.compile ------------------------------------------------------------------------


class DDPOptimizerLog(logging.Handler):
    """Keeps what torch.compile's DDPOptimizer logs when it splits a graph at buckets."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []
        self.logger = logging.getLogger("torch._dynamo.backends.distributed")

    def emit(self, record) -> None:
        if "DDPOptimizer" in record.getMessage():
            self.lines.append(record.getMessage().strip().split(". ")[0])

    def __enter__(self):
        self.level = self.logger.level
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level)


def compiled(rank: int, args, device, events: Events) -> None:
    """The two ways of combining torch.compile with DDP: how many graphs Dynamo captured,
    and whether DDPOptimizer split them at the buckets."""
    from torch._dynamo.utils import counters  # torch.compile's own tally of its work

    inputs = batch_for(rank, 0, args, device)
    for name in ["torch.compile(DDP(model))", "DDP(torch.compile(model))"]:
        torch.manual_seed(0)
        model = Tower(args.width, args.depth).to(device)
        if name == "torch.compile(DDP(model))":
            ddp = torch.compile(wrap(model, device, bucket_cap_mb=1), backend=args.compiler)
        else:
            ddp = wrap(torch.compile(model, backend=args.compiler), device, bucket_cap_mb=1)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        counters.clear()
        with DDPOptimizerLog() as log:
            for _ in range(args.steps):
                train_step(ddp, optimizer, inputs)
        graphs = counters["stats"]["unique_graphs"]
        breaks = sum(counters["graph_break"].values())
        events.emit(rank, "compile", variant=name, backend=args.compiler, graphs=graphs,
                    graph_breaks=breaks, ddp_optimizer=log.lines)
        if rank == 0:
            say(rank, f"{name}: {graphs} graph(s) captured, {breaks} graph break(s); "
                      + (log.lines[0] if log.lines else "DDPOptimizer said nothing"))
        torch.compiler.reset()  # the compiled code holds the model: let both go


# --- the job ------------------------------------------------------------------------------

DEMOS = {
    "buckets": buckets,
    "overlap": overlap,
    "no-sync": no_sync,
    "compression": compression,
    "options": options,
    "compile": compiled,
}
# Imported by every rank before it joins its group: torch._dynamo imported later (the first
# optimizer or torch.compile imports it) keeps the group alive past destroy_process_group.
PRELOAD = PRELOADS["ddp_internals"]  # (in workers/__init__.py)


def rank_main(rank: int, job: Job, args) -> None:
    share_cores(job.world_size)
    events = Events(args.events)
    with joined(job, rank) as device:
        DEMOS[args.demo](rank, args, device, events)
        synchronize(device)


def add_tower_options(parser, width: int = 1024, depth: int = 8, steps: int = 8,
                      what: str = "timed steps per variant") -> None:
    parser.add_argument("--width", type=positive_int, default=width,
                        help=f"features of each linear layer (default {width})")
    parser.add_argument("--depth", type=positive_int, default=depth,
                        help=f"linear layers (default {depth})")
    parser.add_argument("--batch-size", type=positive_int, default=32,
                        help="inputs per rank and step (default 32)")
    parser.add_argument("--steps", type=positive_int, default=steps,
                        help=f"{what} (default {steps})")


def bucket_cap(text: str):
    """``default`` (bucket_cap_mb not passed at all) or a whole number of MiB."""
    return text if text == "default" else positive_int(text)


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.ddp_internals",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    bucket_demo = demos.add_parser(
        "buckets", help="every bucket's all-reduce recorded, for several bucket_cap_mb")
    overlap_demo = demos.add_parser(
        "overlap", help="blocking against overlapped all-reduces, small and large messages")
    accumulation = demos.add_parser(
        "no-sync", help="gradient accumulation with and without no_sync()")
    hooks = demos.add_parser(
        "compression", help="fp16, bf16 and PowerSGD hooks, and a bf16 autocast forward: "
                            "bytes per step, accuracy")
    option_demo = demos.add_parser(
        "options", help="gradient_as_bucket_view, static_graph, find_unused_parameters; "
                        "batch norm across ranks")
    compile_demo = demos.add_parser(
        "compile", help="torch.compile with DDP, both ways: graphs, DDPOptimizer's split")
    add_tower_options(bucket_demo, width=512)
    bucket_demo.add_argument("--caps", type=bucket_cap, nargs="+", metavar="MB",
                             default=["default", 1, 4, 25],
                             help="bucket_cap_mb values; 'default' passes none "
                                  "(default: default 1 4 25)")
    overlap_demo.add_argument("--small-kib", type=positive_int, default=16,
                              help="KiB per small message (default 16)")
    overlap_demo.add_argument("--small-count", type=positive_int, default=32,
                              help="small messages per step (default 32)")
    overlap_demo.add_argument("--large-mib", type=positive_int, default=8,
                              help="MiB per large message (default 8)")
    overlap_demo.add_argument("--large-count", type=positive_int, default=4,
                              help="large messages per step (default 4)")
    overlap_demo.add_argument("--size", type=positive_int, default=128,
                              help="side of the matrices multiplied as computation "
                                   "(default 128)")
    overlap_demo.add_argument("--trials", type=positive_int, default=5,
                              help="timed steps per way (default 5)")
    add_tower_options(accumulation, width=512, depth=4, steps=3)
    accumulation.add_argument("--micro-batches", type=positive_int, nargs="+", default=[4],
                              metavar="K", help="micro-batches per optimizer step, one or "
                                                "more values (default 4)")
    accumulation.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                              help="of the tower and its inputs; float64 makes the weights "
                                   "agree to rounding on any machine (default float32)")
    hooks.add_argument("--epochs", type=positive_int, default=1,
                       help="epochs on the MNIST training images per hook (default 1)")
    hooks.add_argument("--batch-size", type=positive_int, default=64,
                       help="global batch, split over the ranks (default 64)")
    hooks.add_argument("--lr", type=positive_float, default=0.05,
                       help="learning rate (default 0.05)")
    hooks.add_argument("--train-images", type=positive_int, default=60_000, metavar="N",
                       help="train on the first N of MNIST's 60,000 images (default all)")
    hooks.add_argument("--powersgd-ranks", type=positive_int, nargs="+", default=[2],
                       metavar="R", help="PowerSGD's matrix_approximation_rank, one run "
                                         "each (default 2)")
    hooks.add_argument("--data-root", default=DEFAULT_DATA_ROOT,
                       help="where MNIST is (default: data/ in the clone)")
    add_tower_options(option_demo, width=512, depth=4, steps=3, what="steps per option")
    add_tower_options(compile_demo, width=512, depth=4, steps=2, what="steps per variant")
    compile_demo.add_argument("--compiler", default="inductor",
                              help="torch.compile backend (default inductor)")
    for demo in (bucket_demo, overlap_demo, accumulation, hooks, option_demo, compile_demo):
        add_job_options(demo)
        add_common_options(demo, timeout=60)
    return parser


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    open_events(args.events)
    job = job_from_args(parser, args, least=1)  # one rank is a job too (one GPU, say)
    if args.demo == "compression":
        if args.batch_size % job.world_size:
            parser.error(f"--batch-size {args.batch_size} does not split evenly over "
                         f"{job.world_size} ranks")
        try:
            prepare_mnist(args.data_root)
        except OSError as error:
            fail(f"cannot prepare MNIST under {args.data_root}: {first_line(error)}")
    if args.demo == "compile":
        backends = torch.compiler.list_backends(exclude_tags=())
        if args.compiler not in backends:
            parser.error(f"--compiler {args.compiler} is not a torch.compile backend here; "
                         f"try {', '.join(torch.compiler.list_backends())} or aot_eager")
    return run_ranks(job, rank_main, args, preload=PRELOAD)


if __name__ == "__main__":
    exit_now(main())
