"""Pipelines: a model's layers split over ranks, micro-batches flowing through them. GPipe
written by hand with send/recv and its bubble measured, then torch.distributed.pipelining's
schedules, each checked against one process.

    python -m workers.pipelines gpipe
    python -m workers.pipelines gpipe --world-size 4 --backend gloo --micro-batches 2 8
    python -m workers.pipelines schedules
    python -m workers.pipelines schedules --schedules GPipe 1F1B --micro-batches 8
    torchrun --standalone --nproc-per-node 2 -m workers.pipelines gpipe

``gpipe`` runs one training step per number of micro-batches, several times each, and
records when every rank ran each micro-batch's forward and backward; the page measures the
time each rank sat idle (the bubble) against (stages - 1) / (micro-batches + stages - 1).
``schedules`` runs the same model under each schedule of ``torch.distributed.pipelining``
and records every forward and backward the schedule ran. Both check every stage's
gradients against one process that runs the whole model on the whole batch.
"""

import statistics
import threading
import time
import weakref

import torch
import torch.distributed as dist
from torch import nn

from workers import PRELOADS
from workers.job import Job, add_job_options, job_from_args, joined, run_ranks, share_cores
from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    exit_now,
    open_events,
    positive_int,
    say,
)
from workers.verdicts.pipelines import batches

# --- the model and its stages ------------------------------------------------------------


def tower(width: int, layers: int) -> nn.Sequential:
    """``layers`` square linear layers with a ReLU after each: the model to split."""
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU())
                           for _ in range(layers)])


def layers_of(stage: int, stages: int, layers: int) -> slice:
    """The layers stage ``stage`` of ``stages`` holds: an equal share, in order."""
    return slice(stage * layers // stages, (stage + 1) * layers // stages)


def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(outputs, targets)


def batch(args) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch: ``micro_batches`` micro-batches of ``micro_batch_size`` rows."""
    generator = torch.Generator().manual_seed(1)
    rows = args.micro_batch_size * args.micro_batches_now
    return (torch.randn(rows, args.width, generator=generator),
            torch.randn(rows, args.width, generator=generator))


def reference_gradients(model: nn.Sequential, inputs, targets) -> list[torch.Tensor]:
    """One process, the whole model on the whole batch: the gradients to match."""
    model.zero_grad()
    loss_fn(model(inputs), targets).backward()
    return [p.grad.clone() for p in model.parameters()]


# --- GPipe by hand -----------------------------------------------------------------------


def gpipe_step(stage: nn.Module, inputs, targets, micro_batches: int) -> None:
    """One GPipe training step of this rank's ``stage``: every micro-batch forward, then
    every micro-batch backward. Activations come from the rank before and go to the rank
    after; gradients of them go back the other way."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    first, last = rank == 0, rank == world_size - 1
    kept, sending = [], []  # each micro-batch's input and output, kept for its backward
    for x, y in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
        if not first:
            x = torch.empty_like(x).requires_grad_()
            dist.recv(x.data, rank - 1)
        out = stage(x)
        if last:
            out = loss_fn(out, y) / micro_batches  # the whole batch's mean loss
        else:  # isend: go on with the next micro-batch while this one travels
            sending.append(dist.isend(out.detach(), rank + 1))
        kept.append((x, out))
    for x, out in kept:
        grad = None
        if not last:
            grad = torch.empty_like(out)
            dist.recv(grad, rank + 1)
        out.backward(grad)  # the gradients of all micro-batches add up
        if not first:
            sending.append(dist.isend(x.grad, rank - 1))
    for work in sending:  # every send complete (its tensor free to reuse) by the step's end
        work.wait()


# --- instrumentation, beside the lesson: gpipe_step timed from outside --------------------


class _Mark(torch.autograd.Function):
    """The identity forward; its backward calls ``noted()`` when the backward pass reaches
    it. ``anchor`` requires grad, so the mark runs even where ``x`` does not (rank 0)."""

    @staticmethod
    def forward(ctx, noted, x, anchor):
        ctx.noted = noted
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.noted()
        return None, grad, None


class TimedStage(nn.Module):
    """``stage``, timed: each call is a "forward" span; two marks, at its output and at its
    input, note when that micro-batch's backward began and ended."""

    def __init__(self, stage: nn.Module):
        super().__init__()
        self.stage = stage
        self.anchor = torch.zeros((), requires_grad=True)
        self.spans = []  # (kind, micro-batch, start, end)

    def forward(self, x):
        micro_batch = sum(kind == "forward" for kind, *_ in self.spans)
        backward = {}

        def ended():
            self.spans.append(("backward", micro_batch, backward["t"], time.time()))

        start = time.time()
        x = _Mark.apply(ended, x, self.anchor.to(x.device))
        out = self.stage(x)
        self.spans.append(("forward", micro_batch, start, time.time()))
        return _Mark.apply(lambda: backward.setdefault("t", time.time()), out,
                           self.anchor.to(x.device))

    def record(self, events: Events, rank: int, began: float, fields: dict) -> None:
        """Emit the spans, and the time before each block that follows a ``recv`` (before
        a forward on every rank but the first, before a backward on every rank but the
        last) as "waiting"."""
        last = dist.get_world_size() - 1
        previous_end = began
        for kind, micro_batch, start, end in sorted(self.spans, key=lambda s: s[2]):
            if (kind == "forward" and rank > 0) or (kind == "backward" and rank < last):
                events.emit(rank, "waiting", t=previous_end, t_end=start, queued=True,
                            micro_batch=micro_batch, stage=rank, **fields)
            events.emit(rank, kind, t=start, t_end=end, micro_batch=micro_batch, stage=rank,
                        **fields)
            previous_end = end


def measured_bubble(timed: TimedStage, device) -> float:
    """The step's bubble as the page measures it: the share of the step (first forward to
    last backward, over all ranks) that a rank was not computing, averaged over the ranks.
    Collectives outside the timed step; every rank gets the same number."""
    start = torch.tensor(min(s[2] for s in timed.spans), dtype=torch.float64, device=device)
    end = torch.tensor(max(s[3] for s in timed.spans), dtype=torch.float64, device=device)
    dist.all_reduce(start, op=dist.ReduceOp.MIN)
    dist.all_reduce(end, op=dist.ReduceOp.MAX)
    busy = sum(end_ - start_ for _, _, start_, end_ in timed.spans)
    idle = torch.tensor(1 - busy / (end - start).item(), dtype=torch.float64, device=device)
    dist.all_reduce(idle)
    return idle.item() / dist.get_world_size()


def gpipe(rank: int, args, device, events: Events) -> None:
    """GPipe by hand for each number of micro-batches, ``--repeats`` times each."""
    world_size = dist.get_world_size()
    torch.manual_seed(0)
    model = tower(args.width, args.layers).to(device)
    mine = layers_of(rank, world_size, args.layers)
    stage = model[mine]
    for micro_batches in args.micro_batches:
        args.micro_batches_now = micro_batches
        inputs, targets = (tensor.to(device) for tensor in batch(args))
        bubbles = []
        for repeat in range(args.repeats):
            stage.zero_grad()
            timed = TimedStage(stage)
            dist.barrier()  # every rank starts the step together
            began = time.time()
            gpipe_step(timed, inputs, targets, micro_batches)
            timed.record(events, rank, began, {"micro_batches": micro_batches,
                                               "repeat": repeat})
            bubbles.append(measured_bubble(timed, device))
        ours = [p.grad.clone() for p in stage.parameters()]
        expected = reference_gradients(model, inputs, targets)[2 * mine.start:2 * mine.stop]
        difference = max((a - b).abs().max().item() for a, b in zip(ours, expected))
        events.emit(rank, "checked", micro_batches=micro_batches, difference=difference)
        say(rank, f"layers {mine.start}-{mine.stop - 1}, {batches(micro_batches)} x "
                  f"{args.repeats}: largest difference from one process {difference:.1e}")
        if rank == 0:
            formula = (world_size - 1) / (micro_batches + world_size - 1)
            median = statistics.median(bubbles)
            say(rank, f"{batches(micro_batches)}: bubble {median:.2f} (median of "
                      f"{len(bubbles)}; min {min(bubbles):.2f}, max {max(bubbles):.2f}), "
                      f"formula (S - 1)/(M + S - 1) = {formula:.2f}")


# --- torch.distributed.pipelining --------------------------------------------------------

SCHEDULES = ("GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble")


def schedule_class(name: str):
    from torch.distributed import pipelining

    return getattr(pipelining, f"Schedule{name}")


def stages_per_rank(name: str) -> int:
    """Interleaved schedules give each rank several stages (here two); the others one."""
    return 2 if name.startswith("Interleaved") else 1


def build_schedule(name: str, model: nn.Sequential, args, device, stage_class=None):
    """This rank's stages of ``model`` and the schedule that runs them: rank r holds stages
    r, r + N, r + 2N, ... of ``N x stages_per_rank`` (looping through the ranks)."""
    from torch.distributed.pipelining import PipelineStage

    stage_class = stage_class or PipelineStage
    rank, world_size = dist.get_rank(), dist.get_world_size()
    count = world_size * stages_per_rank(name)
    stages = [stage_class(model[layers_of(index, count, args.layers)], index, count, device)
              for index in range(rank, count, world_size)]
    schedule = schedule_class(name)
    if stages_per_rank(name) == 1:
        return stages, schedule(stages[0], n_microbatches=args.micro_batches_now,
                                loss_fn=loss_fn)
    return stages, schedule(stages, n_microbatches=args.micro_batches_now, loss_fn=loss_fn)


def train_step(schedule, stages, inputs, targets) -> list[torch.Tensor]:
    """One step: the first stage feeds the inputs, the last gets the targets; every rank
    calls step(), which runs this rank's part of the schedule. The rank of the last stage
    gets each micro-batch's loss back in ``losses``; the others get an empty list."""
    first = any(stage.is_first for stage in stages)
    last = any(stage.is_last for stage in stages)
    losses = []
    schedule.step(*([inputs] if first else []), target=targets if last else None,
                  losses=losses if last else None)
    return losses


def recorded_stage_class(rank: int, events: Events, fields: dict):
    """A PipelineStage that records each forward and backward it runs (instrumentation,
    beside the lesson code): the schedule calls these three methods for its actions."""
    from torch.distributed.pipelining import PipelineStage

    class RecordedStage(PipelineStage):
        def forward_one_chunk(self, chunk, *args, **kwargs):
            with events.span(rank, "forward", micro_batch=chunk, stage=self.stage_index,
                             **fields):
                return super().forward_one_chunk(chunk, *args, **kwargs)

        def backward_one_chunk(self, chunk, *args, **kwargs):
            full = kwargs.get("full_backward", args[1] if len(args) > 1 else True)
            kind = "backward" if full else "backward (inputs)"
            with events.span(rank, kind, micro_batch=chunk, stage=self.stage_index,
                             **fields):
                return super().backward_one_chunk(chunk, *args, **kwargs)

        def backward_weight_one_chunk(self, chunk, *args, **kwargs):
            with events.span(rank, "backward (weights)", micro_batch=chunk,
                             stage=self.stage_index, **fields):
                return super().backward_weight_one_chunk(chunk, *args, **kwargs)

    return RecordedStage


class SavedTensors:
    """The bytes of the tensors autograd keeps for a backward, parameters left out, counted
    from ``start``: how many it saved, how many it holds now, and the most it held
    (instrumentation beside the lesson code, through
    ``torch.autograd.graph.saved_tensors_hooks``). A tensor saved twice (a layer's output
    is the next layer's input) counts once; it stops counting when autograd has dropped
    every save of it, after the backward that used it."""

    def __init__(self, parameters):
        self.parameters = {p.untyped_storage().data_ptr() for p in parameters}
        self.saved: dict[tuple, list[int]] = {}  # tensor: [bytes, times saved]
        self.total = self.now = self.most = 0
        self.lock = threading.Lock()
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def start(self) -> None:
        """Count from here: what earlier steps left saved is not this step's."""
        with self.lock:
            self.saved.clear()
            self.total = self.now = self.most = 0

    def pack(self, tensor):
        if tensor.untyped_storage().data_ptr() in self.parameters \
                or tensor.device.type == "meta":
            return tensor
        key = (tensor.data_ptr(), tensor.nbytes)  # a micro-batch: a view of the batch
        with self.lock:
            entry = self.saved.setdefault(key, [tensor.nbytes, 0])
            if entry[1] == 0:
                self.total += entry[0]
                self.now += entry[0]
                self.most = max(self.most, self.now)
            entry[1] += 1
        held = Held(tensor)
        weakref.finalize(held, self.release, key, entry)
        return held

    @staticmethod
    def unpack(held):
        return held.tensor if isinstance(held, Held) else held

    def release(self, key: tuple, entry: list[int]) -> None:
        with self.lock:
            if self.saved.get(key) is not entry:  # saved before start: not counted
                return
            entry[1] -= 1
            if entry[1] == 0:
                self.now -= entry[0]
                del self.saved[key]


class Held:
    def __init__(self, tensor):
        self.tensor = tensor


def schedules(rank: int, args, device, events: Events) -> None:
    """Each schedule: ``--repeats`` recorded training steps, then the gradients checked."""
    args.micro_batches_now = args.micro_batches
    inputs, targets = (tensor.to(device) for tensor in batch(args))
    torch.manual_seed(0)
    model = tower(args.width, args.layers).to(device)
    expected = dict(zip(model.parameters(), reference_gradients(model, inputs, targets)))
    with torch.no_grad():
        whole_loss = loss_fn(model(inputs), targets).item()  # one process, the whole batch
    for name in args.schedules:
        fields = {"schedule": name}  # the recorded stages add these to every event
        stage_class = recorded_stage_class(rank, events, fields)
        stages, schedule = build_schedule(name, model, args, device, stage_class)
        meter = SavedTensors(model.parameters())
        for repeat in range(args.repeats):
            fields["repeat"] = repeat
            model.zero_grad()
            dist.barrier()
            meter.start()
            with meter.hooks, events.span(rank, "step", **fields):
                losses = train_step(schedule, stages, inputs, targets)
            if losses:  # the last stage's rank: the step's loss, the micro-batches' mean
                events.emit(rank, "loss", micro_batches=len(losses), whole_batch=whole_loss,
                            mean=torch.stack(losses).mean().item(), **fields)
            events.emit(rank, "saved tensors", saved=meter.total, most=meter.most,
                        **fields)
        held = [p for stage in stages for p in stage.submod.parameters()]
        difference = max((p.grad - expected[p]).abs().max().item() for p in held)
        events.emit(rank, "checked", schedule=name, difference=difference,
                    stages=[stage.stage_index for stage in stages])
        say(rank, f"{name}: stages {[stage.stage_index for stage in stages]}, "
                  f"largest difference from one process {difference:.1e}")


# --- the job -----------------------------------------------------------------------------

PRELOAD = PRELOADS["pipelines"]  # what workers/__init__.py starts the forkserver with


def rank_main(rank: int, job: Job, args) -> None:
    share_cores(job.world_size)
    events = Events(args.events)
    with joined(job, rank) as device:
        if args.demo == "gpipe":
            gpipe(rank, args, device, events)
        else:
            schedules(rank, args, device, events)


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.pipelines",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    by_hand = demos.add_parser("gpipe", help="GPipe by hand with send/recv: the bubble")
    library = demos.add_parser("schedules",
                               help="torch.distributed.pipelining's schedules, recorded")
    by_hand.add_argument("--micro-batches", type=positive_int, nargs="+",
                         default=[1, 2, 4, 8], metavar="M",
                         help="numbers of micro-batches to run (default 1 2 4 8)")
    library.add_argument("--micro-batches", type=positive_int, default=4,
                         metavar="M", help="micro-batches per step (default 4)")
    library.add_argument("--schedules", nargs="+", choices=SCHEDULES,
                         default=list(SCHEDULES), metavar="NAME",
                         help=f"which (default all: {' '.join(SCHEDULES)})")
    for demo in (by_hand, library):
        demo.add_argument("--layers", type=positive_int, default=8,
                          help="linear layers of the model (default 8)")
        demo.add_argument("--width", type=positive_int, default=512,
                          help="features of each layer (default 512)")
        demo.add_argument("--micro-batch-size", type=positive_int, default=128,
                          help="rows of each micro-batch (default 128)")
        demo.add_argument("--repeats", type=positive_int, default=3,
                          help="training steps recorded for each setting (default 3)")
        add_job_options(demo)
        add_common_options(demo, timeout=60)
    return parser


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    open_events(args.events)
    job = job_from_args(parser, args, least=2)
    stages = job.world_size * max(stages_per_rank(name) for name in
                                  getattr(args, "schedules", ["GPipe"]))
    if stages > args.layers:
        parser.error(f"{stages} stages need at least {stages} layers, got --layers "
                     f"{args.layers}")
    if args.demo == "schedules" and args.micro_batches < job.world_size:
        parser.error(f"a schedule needs at least as many micro-batches as ranks "
                     f"({job.world_size}), got {args.micro_batches}")
    interleaved = args.demo == "schedules" and any(stages_per_rank(name) > 1
                                                   for name in args.schedules)
    # PyTorch's interleaved schedules split the micro-batches into this many equal rounds
    # and raise when they are built otherwise: checked here, before any rank starts
    rounds = max(1, args.micro_batches // job.world_size) if interleaved else 1
    if interleaved and args.micro_batches % rounds:
        parser.error(f"the interleaved schedules need a number of micro-batches that is a "
                     f"multiple of max(1, micro-batches // ranks) = {rounds}, got "
                     f"{args.micro_batches}")
    return run_ranks(job, rank_main, args, preload=PRELOAD)


if __name__ == "__main__":
    exit_now(main())
