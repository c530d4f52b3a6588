"""When the model does not fit: the training state sharded over the ranks. ZeRO's three
stages written by hand, PyTorch's ZeroRedundancyOptimizer and FSDP2's fully_shard, each
measured per rank against DDP; two FSDP2 mistakes, and CPU offloading.

    python -m workers.sharding compare
    python -m workers.sharding compare --world-size 4 --strategies ddp zero3 fsdp2
    python -m workers.sharding compare --world-size 3 --width 7 --dtype float64
    python -m workers.sharding mistakes
    torchrun --standalone --nproc-per-node 2 -m workers.sharding compare

``compare`` trains the same model on the same data once per strategy and records, per
rank, the bytes of parameters, gradients and optimizer state it held, the bytes its
collectives send (counted) and the bytes it wrote to its sockets (measured), its time per
step, its losses and its final weights, which must equal DDP's (in float64; in float32,
rounding can tip a ReLU input across its kink, and it counts those). gloo on the CPU, nccl
with one GPU per rank. (The sharded checkpoint is the checkpoints chapter's.)
"""

import math
import statistics
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

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
from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    exit_now,
    first_line,
    open_events,
    positive_float,
    positive_int,
    say,
)

# PyTorch 2.13 renamed the flat-tensor collectives: all_gather_into_tensor became
# all_gather_single, reduce_scatter_tensor became reduce_scatter_single (the old names warn
# in 2.13 and 2.14 and are quiet aliases from 2.15). Before 2.13 only the old names exist.
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = (getattr(dist, "reduce_scatter_single", None)
                         or dist.reduce_scatter_tensor)

# --- the model, the data, and what a rank holds ------------------------------------------


def tower(width: int, depth: int) -> nn.Sequential:
    """``depth`` square linear layers with a ReLU between them, without biases: each layer's
    parameters are one weight matrix, one tensor to shard."""
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width, bias=False), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def batch_for(rank: int, step: int, args, device,
              dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank r's inputs and targets for one step: different on every rank, the same on
    every run and for every strategy."""
    generator = torch.Generator().manual_seed(1000 * step + rank)
    inputs = torch.randn(args.batch_size, args.width, generator=generator)
    targets = torch.randn(args.batch_size, args.width, generator=generator)
    return inputs.to(device, dtype), targets.to(device, dtype)


def storage_bytes(tensors) -> int:
    """Bytes of memory behind ``tensors``, each storage counted once (a view shares its
    tensor's storage, and costs nothing more)."""
    from torch.distributed.tensor import DTensor

    storages = {}
    for tensor in tensors:
        if isinstance(tensor, DTensor):
            tensor = tensor.to_local()  # the part of it this rank holds
        if tensor is not None:
            storage = tensor.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def held(parameters, optimizer) -> dict[str, int]:
    """What this rank holds now, in bytes: parameters, gradients, optimizer state (Adam's
    two running averages; its step counts, one number per tensor, left out)."""
    optimizer = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer's own Adam
    state = [value for per_parameter in optimizer.state.values()
             for value in per_parameter.values()
             if torch.is_tensor(value) and value.dim() > 0]
    return {"parameters": storage_bytes(parameters),
            "gradients": storage_bytes(p.grad for p in parameters),
            "optimizer state": storage_bytes(state)}


def written_bytes() -> int:
    """Bytes this process has written so far, to files and sockets alike (Linux's
    /proc/self/io): around a step that writes no file, what it sent to the other ranks."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("wchar"))


class CountedCollectives(TorchDispatchMode):
    """Within ``with CountedCollectives() as counted:``, every collective this process
    starts, the ones inside DDP's hook and FSDP2 included (PyTorch dispatches each as a
    ``c10d`` operator), with ``counted.bytes``: what a bandwidth-optimal (ring) algorithm
    sends from this rank for it. Of S bytes, an all-reduce sends 2(N-1)/N S; a
    reduce-scatter, an all-gather or a broadcast (N-1)/N S."""

    def __init__(self):
        super().__init__()
        self.bytes, self.calls, self.unknown = 0.0, 0, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]  # "allreduce_" for c10d.allreduce_.default
        if func.namespace == "c10d" and name != "barrier":
            whole = {"allreduce_": args[0], "broadcast_": args[0],
                     "_reduce_scatter_base_": [args[1]], "_allgather_base_": [args[0]]}
            if name in whole:
                world_size = dist.get_world_size()
                size = sum(t.numel() * t.element_size() for t in whole[name])
                transfers = 2 if name == "allreduce_" else 1
                self.bytes += transfers * (world_size - 1) / world_size * size
                self.calls += 1
            else:
                self.unknown.add(name)
        return func(*args, **(kwargs or {}))


class Strategy:
    """How one strategy trains: ``model``, the ``parameters`` this rank holds, the
    ``optimizer`` over them, and the steps of training that differ between strategies."""

    model: nn.Module
    parameters: list[torch.Tensor]
    optimizer: torch.optim.Optimizer

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(inputs)

    def update(self) -> None:
        self.optimizer.step()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()

    def whole_weights(self) -> list[torch.Tensor]:
        """Every weight whole, as DDP holds them, to compare with DDP's."""
        return [p.detach() for p in self.parameters]


# --- DDP, the baseline, and PyTorch's ZeRO-1 on top of it --------------------------------


class Replicated(Strategy):
    def __init__(self, model: nn.Module, device, lr: float):
        # gradients as views into DDP's buckets: DDP keeps no second copy of them; its C++
        # reducer's all-reduces pass through the dispatcher (c10d::allreduce_), where the
        # counting sees them
        self.model = wrap(model, device, gradient_as_bucket_view=True)
        self.parameters = list(model.parameters())
        self.optimizer = self.build_optimizer(lr)

    def build_optimizer(self, lr: float) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters, lr=lr)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=False)  # the gradients stay views


class ZeroRedundancy(Replicated):
    def build_optimizer(self, lr: float) -> torch.optim.Optimizer:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        # each rank's Adam owns whole parameters, about 1/N of them; after its step, each
        # rank broadcasts the parameters it owns to the others
        return ZeroRedundancyOptimizer(self.parameters, optimizer_class=torch.optim.Adam,
                                       lr=lr)


# --- ZeRO stages 1 and 2, by hand --------------------------------------------------------


def padded(flat: torch.Tensor, parts: int) -> torch.Tensor:
    """``flat`` with zeros at its end, so that it splits into ``parts`` equal parts."""
    return F.pad(flat, (0, -len(flat) % parts))


class ShardedOptimizer(Strategy):
    def __init__(self, model: nn.Module, stage: int, lr: float):
        self.model, self.stage = model, stage
        rank, world_size = dist.get_rank(), dist.get_world_size()
        self.buffers, self.parts = [], []
        for parameter in model.parameters():
            # the weight moves into a flat buffer padded to N equal parts ...
            buffer = padded(parameter.detach().flatten(), world_size)
            parameter.data = buffer[:parameter.numel()].view_as(parameter)
            # ... and this rank's part is a view into it: no copy of the weights
            part = buffer.chunk(world_size)[rank]
            self.buffers.append(buffer)
            self.parts.append(part.requires_grad_())
            if stage == 2:  # scatter each gradient the moment backward has produced it
                parameter.register_post_accumulate_grad_hook(self.scatter_gradient)
        self.parameters = list(model.parameters()) + self.parts
        self.optimizer = torch.optim.Adam(self.parts, lr=lr)  # 1/N of Adam's state

    def scatter_gradient(self, parameter: nn.Parameter) -> None:
        """Sum this gradient over the ranks, keeping only this rank's part, averaged."""
        index = next(i for i, p in enumerate(self.model.parameters()) if p is parameter)
        part = self.parts[index]
        part.grad = torch.empty_like(part)
        world_size = dist.get_world_size()
        reduce_scatter_single(part.grad, padded(parameter.grad.flatten(), world_size))
        part.grad /= world_size
        parameter.grad = None  # the whole gradient is no longer needed

    def update(self) -> None:
        if self.stage == 1:  # every whole gradient was kept until now
            for parameter in self.model.parameters():
                self.scatter_gradient(parameter)
        self.optimizer.step()  # on this rank's parts only
        for buffer, part in zip(self.buffers, self.parts):
            all_gather_single(buffer, part.detach().clone())  # every rank, every part

    def whole_weights(self) -> list[torch.Tensor]:
        return [p.detach() for p in self.model.parameters()]


# --- ZeRO stage 3, by hand: parameters sharded too ---------------------------------------


class GatheredLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inputs, part, layer):
        ctx.save_for_backward(inputs)  # and not the whole weight: it is freed on return
        ctx.layer = layer
        return inputs @ layer.gather().T

    @staticmethod
    def backward(ctx, grad_output):
        [inputs] = ctx.saved_tensors
        weight = ctx.layer.gather()  # the second all-gather of this weight
        grad_weight = grad_output.flatten(0, -2).T @ inputs.flatten(0, -2)
        # the input's gradient, and the weight's scattered straight back into parts
        return grad_output @ weight, ctx.layer.scatter(grad_weight), None


class ShardedLinear(nn.Module):
    def __init__(self, layer: nn.Linear):
        super().__init__()
        rank, world_size = dist.get_rank(), dist.get_world_size()
        self.shape = layer.weight.shape
        whole = padded(layer.weight.detach().flatten(), world_size)
        # the layer's only parameter: this rank's 1/N part of the weight
        self.part = nn.Parameter(whole.chunk(world_size)[rank].clone())

    def gather(self) -> torch.Tensor:
        """The whole weight, from every rank's part."""
        part = self.part.detach()
        whole = part.new_empty(len(part) * dist.get_world_size())
        all_gather_single(whole, part)
        return whole[:self.shape.numel()].view(self.shape)

    def scatter(self, grad_weight: torch.Tensor) -> torch.Tensor:
        world_size = dist.get_world_size()
        grad_part = torch.empty_like(self.part)
        reduce_scatter_single(grad_part, padded(grad_weight.flatten(), world_size))
        return grad_part / world_size

    def forward(self, inputs):  # the part goes in so that autograd gives it its gradient
        return GatheredLinear.apply(inputs, self.part, self)


class ShardedParameters(Strategy):
    """ZeRO stage 3: the model's linear layers replaced by sharded ones."""

    def __init__(self, model: nn.Sequential, lr: float):
        self.model = nn.Sequential(*[ShardedLinear(layer) if isinstance(layer, nn.Linear)
                                     else layer for layer in model])
        self.parameters = list(self.model.parameters())
        self.optimizer = torch.optim.Adam(self.parameters, lr=lr)

    def whole_weights(self) -> list[torch.Tensor]:
        return [layer.gather() for layer in self.model if isinstance(layer, ShardedLinear)]


# --- FSDP2: the same, from PyTorch -------------------------------------------------------


def shard(model: nn.Sequential, mesh, each_layer: bool = True,
          reshard_after_forward: bool = True) -> None:
    """fully_shard on each linear layer (a group that is gathered alone), then on the root,
    which takes every parameter not yet in a group."""
    from torch.distributed.fsdp import fully_shard

    if each_layer:
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh)


class FullyShardedModel(Strategy):
    def __init__(self, model: nn.Module, device, lr: float, reshard_after_forward: bool):
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        shard(model, mesh, reshard_after_forward=reshard_after_forward)
        self.model = model
        self.parameters = list(model.parameters())  # DTensors now: the optimizer after
        self.optimizer = torch.optim.Adam(self.parameters, lr=lr)

    def whole_weights(self) -> list[torch.Tensor]:
        return [p.full_tensor() for p in self.parameters]


# --- one strategy trained and measured ---------------------------------------------------

STRATEGIES = {
    "ddp": "DDP",
    "zero1": "ZeRO-1",
    "zero-redundancy": "ZeroRedundancyOptimizer",
    "zero2": "ZeRO-2",
    "zero3": "ZeRO-3",
    "fsdp2": "FSDP2",
    "fsdp2-keep": "FSDP2 with reshard_after_forward=False",
}


def build(strategy: str, model: nn.Module, device, lr: float) -> Strategy:
    if strategy == "ddp":
        return Replicated(model, device, lr)
    if strategy == "zero-redundancy":
        return ZeroRedundancy(model, device, lr)
    if strategy in ("zero1", "zero2"):
        return ShardedOptimizer(model, int(strategy[-1]), lr)
    if strategy == "zero3":
        return ShardedParameters(model, lr)
    return FullyShardedModel(model, device, lr, reshard_after_forward=strategy == "fsdp2")


def train(strategy: str, rank: int, args, device, dtype=torch.float32) -> dict:
    """``--steps`` steps of one strategy. Per step: the bytes held after forward, after
    backward and after the update, the bytes sent, the time, and the loss."""
    torch.manual_seed(0)  # every strategy starts from the same weights
    model = tower(args.width, args.depth).to(device, dtype)
    trained = build(strategy, model, device, args.lr)
    record = {"held": [], "parameters after forward": 0, "counted": [], "written": [],
              "seconds": [], "losses": [], "smallest ReLU input": math.inf,
              "ReLU inputs": []}

    def near_the_kink(module, inputs):  # how close an input came to the ReLU's kink at 0
        record["ReLU inputs"].append(inputs[0].detach().clone())  # to compare with DDP's
        sizes = inputs[0].detach().abs()
        sizes = sizes[sizes > 0]  # exact zeros come from rows a previous ReLU zeroed whole
        if len(sizes):
            smallest = sizes.min().item()
            record["smallest ReLU input"] = min(record["smallest ReLU input"], smallest)

    for module in trained.model.modules():
        if isinstance(module, nn.ReLU):
            module.register_forward_pre_hook(near_the_kink)
    for step in range(args.steps):
        inputs, targets = batch_for(rank, step, args, device, dtype)
        written = written_bytes()
        synchronize(device)
        begin = time.perf_counter()
        counted = CountedCollectives()  # the first step only: it costs time on every op
        with counted if step == 0 else nullcontext():
            loss = F.mse_loss(trained.forward(inputs), targets)
            # FSDP2 swaps a module's parameters for whole ones while they are gathered
            after_forward = storage_bytes(trained.parameters
                                          + list(trained.model.parameters()))
            loss.backward()
            after_backward = held(trained.parameters, trained.optimizer)
            trained.update()
        synchronize(device)
        record["seconds"].append(time.perf_counter() - begin)
        record["written"].append(written_bytes() - written)
        record["counted"].append(counted.bytes)
        assert not counted.unknown, f"collectives not counted: {counted.unknown}"
        record["held"] += [after_backward, held(trained.parameters, trained.optimizer)]
        record["parameters after forward"] = max(record["parameters after forward"],
                                                 after_forward)
        trained.zero_grad()
        average = loss.detach().clone()
        dist.all_reduce(average)  # the loss over every rank's batch, after the step
        record["losses"].append(average.item() / dist.get_world_size())
    record["weights"] = [w.detach().clone() for w in trained.whole_weights()]
    return record


def compare(rank: int, args, device, events: Events) -> None:
    """Every strategy of ``--strategies`` trained from the same weights on the same data,
    in each ``--dtype``, measured, and its losses and final weights compared with DDP's."""
    for dtype in args.dtype:
        reference = None
        for strategy in ["ddp"] + [s for s in args.strategies if s != "ddp"]:
            record = train(strategy, rank, args, device, getattr(torch, dtype))
            reference = reference or record
            name = STRATEGIES[strategy] + (f", {dtype}" if len(args.dtype) > 1 else "")
            report(rank, strategy, name, dtype, record, reference, device, events)


def tipped(record: dict, reference: dict, steps: int) -> tuple[int, dict | None]:
    """The ReLU inputs of ``record`` on the other side of the kink at 0 from the same
    input in ``reference`` (DDP's run): one passes its gradient, the other not. How many,
    over every step, and the first of them: its step, and the input in both runs."""
    calls = list(zip(record["ReLU inputs"], reference["ReLU inputs"], strict=True))
    count, first = 0, None
    for call, (mine, theirs) in enumerate(calls):
        other_side = (mine > 0) != (theirs > 0)
        if other_side.any():
            count += int(other_side.sum())
            if first is None:  # of this call's, the one DDP's run computed nearest to 0
                at = theirs.abs().masked_fill(~other_side, math.inf).argmin()
                first = {"step": call // (len(calls) // steps) + 1,
                         "ddp_input": theirs.flatten()[at].item(),
                         "input": mine.flatten()[at].item()}
    return count, first


def report(rank, strategy, name, dtype, record, reference, device, events) -> None:
    """One strategy's record as an event, and as a line of rank 0's."""
    difference = max((mine - theirs).abs().max().item()
                     for mine, theirs in zip(record["weights"], reference["weights"]))
    tipped_over, first_tipped = tipped(record, reference, len(record["losses"]))
    peak = {kind: max(h[kind] for h in record["held"]) for kind in record["held"][0]}
    sent = statistics.median(record["written"][1:] or record["written"])
    seconds = [round(s, 5) for s in record["seconds"][1:] or record["seconds"]]
    events.emit(rank, "strategy", strategy=strategy, name=STRATEGIES[strategy],
                world_size=dist.get_world_size(), dtype=dtype, **peak,
                parameters_after_forward=record["parameters after forward"],
                counted_bytes=record["counted"][0],
                written_bytes=sent if device.type == "cpu" else None,
                seconds=seconds, losses=record["losses"],
                smallest_relu_input=record["smallest ReLU input"],
                relu_inputs_tipped=tipped_over, first_tipped=first_tipped,
                largest_weight_difference=difference)
    if rank == 0:
        wire = f" {sent / 2**20:5.2f} MiB sent," if device.type == "cpu" else ""
        say(rank, f"{name:<34} {sum(peak.values()) / 2**20:6.2f} MiB held,{wire} "
                  f"{statistics.median(seconds) * 1000:5.1f} ms per step, weights "
                  f"{difference:.0e} from DDP's"
                  + (f" ({tipped_over} ReLU inputs across the kink from DDP's)"
                     if tipped_over else ""))


# --- two FSDP2 mistakes ------------------------------------------------------------------


def optimizer_too_early(model: nn.Sequential, mesh, lr: float) -> torch.optim.Optimizer:
    """The mistake: an optimizer built before fully_shard, which replaces every parameter
    with a new, sharded one. The optimizer keeps the old ones: whole, and never trained."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    shard(model, mesh)
    return optimizer


def largest_gathered(model: nn.Sequential, sharded: list[torch.Tensor]) -> list[int]:
    """Hooks that record, before each layer's forward, the bytes of parameters this rank
    holds: its shards and the whole parameters gathered at that moment."""
    peak = [0]

    def measure(*_):
        peak[0] = max(peak[0], storage_bytes(sharded + list(model.parameters())))

    for layer in model:
        if isinstance(layer, nn.Linear):
            layer.register_forward_pre_hook(measure)
    return peak


def mistakes(rank: int, args, device, events: Events) -> None:
    """The optimizer built before fully_shard, then fully_shard on the root alone: the
    weights after a few steps, and the parameters held at once during forward. Then CPU
    offloading, which needs a GPU."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    whole = args.depth * args.width * args.width * 4
    for early in (True, False):
        torch.manual_seed(0)
        model = tower(args.width, args.depth).to(device)
        if early:
            optimizer = optimizer_too_early(model, mesh, args.lr)
        else:
            shard(model, mesh)
            optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        before = [p.full_tensor().clone() for p in model.parameters()]  # one rank: a view
        for step in range(args.steps):
            inputs, targets = batch_for(rank, step, args, device)
            F.mse_loss(model(inputs), targets).backward()
            optimizer.step()
            optimizer.zero_grad()
        moved = max((p.full_tensor() - b).abs().max().item()
                    for p, b in zip(model.parameters(), before))
        kept = storage_bytes(p for group in optimizer.param_groups for p in group["params"])
        events.emit(rank, "optimizer", too_early=early, largest_change=moved,
                    optimizer_holds=kept, whole=whole)
        if rank == 0:
            say(rank, f"optimizer {'before' if early else 'after'} fully_shard: weights "
                      f"moved by at most {moved:.1e} in {args.steps} steps; the optimizer "
                      f"holds {kept / 2**20:.2f} MiB of parameters")
    for each_layer in (True, False):
        torch.manual_seed(0)
        model = tower(args.width, args.depth).to(device)
        shard(model, mesh, each_layer=each_layer)
        peak = largest_gathered(model, list(model.parameters()))
        inputs, targets = batch_for(rank, 0, args, device)
        F.mse_loss(model(inputs), targets).backward()
        events.emit(rank, "wrapping", each_layer=each_layer, peak=peak[0], whole=whole)
        if rank == 0:
            wrapped = "each layer and the root" if each_layer else "the root alone"
            say(rank, f"fully_shard on {wrapped}: {peak[0] / 2**20:.2f} MiB of parameters "
                      f"held during forward (the whole model: {whole / 2**20:.2f} MiB)")
    offload(rank, args, device, mesh, events)


# --- a feature that needs a GPU ----------------------------------------------------------


def offload(rank: int, args, device, mesh, events: Events) -> None:
    """FSDP2 with CPUOffloadPolicy: the sharded parameters, gradients and optimizer state
    kept in CPU memory, copied to the GPU for each layer's compute; by default in pinned
    memory, which needs CUDA. Then with pin_memory=False."""
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    for pin_memory in (True, False):
        torch.manual_seed(0)
        model = tower(args.width, args.depth).to(device)
        try:
            policy = CPUOffloadPolicy(pin_memory=pin_memory)
            fully_shard(model, mesh=mesh, offload_policy=policy)
            inputs, targets = batch_for(rank, 0, args, device)
            F.mse_loss(model(inputs), targets).backward()
            where, error = str(next(model.parameters()).device), None
        except RuntimeError as raised:
            where, error = None, first_line(raised)
        events.emit(rank, "offload", device=str(device), pin_memory=pin_memory,
                    parameters_on=where, error=error)
        if rank == 0:
            say(rank, f"CPUOffloadPolicy(pin_memory={pin_memory}): "
                      + (f"error: {error}" if error else
                      f"compute on {device}, sharded parameters kept on {where}"))


# --- the job -----------------------------------------------------------------------------

DEMOS = {"compare": compare, "mistakes": mistakes}
PRELOAD = PRELOADS["sharding"]  # (in workers/__init__.py)


def rank_main(rank: int, job: Job, args) -> None:
    share_cores(job.world_size)
    events = Events(args.events)
    with joined(job, rank) as device:
        DEMOS[args.demo](rank, args, device, events)
        synchronize(device)


def add_model_options(parser, steps: int, width: int = 512) -> None:
    parser.add_argument("--width", type=positive_int, default=width,
                        help=f"features of each linear layer (default {width})")
    parser.add_argument("--depth", type=positive_int, default=4,
                        help="linear layers (default 4)")
    parser.add_argument("--batch-size", type=positive_int, default=32,
                        help="inputs per rank and step (default 32)")
    parser.add_argument("--steps", type=positive_int, default=steps,
                        help=f"training steps (default {steps})")
    parser.add_argument("--lr", type=positive_float, default=1e-3,
                        help="Adam's learning rate (default 0.001)")


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.sharding",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    comparison = demos.add_parser(
        "compare", help="DDP, ZeRO-1/2/3 by hand, ZeroRedundancyOptimizer and FSDP2: bytes "
                        "held and sent, weights")
    wrong = demos.add_parser(
        "mistakes", help="FSDP2: the optimizer built before fully_shard, the root alone, "
                         "CPUOffloadPolicy")
    add_model_options(comparison, steps=5)
    comparison.add_argument("--strategies", nargs="+", choices=list(STRATEGIES),
                            default=list(STRATEGIES), metavar="STRATEGY",
                            help=f"what to train, DDP always first (default all: "
                                 f"{' '.join(STRATEGIES)})")
    comparison.add_argument("--dtype", nargs="+", choices=["float32", "float64"],
                            default=["float32"], help="of the weights and the data: every "
                            "strategy once for each (default float32)")
    add_model_options(wrong, steps=3, width=256)
    for demo in (comparison, wrong):
        add_job_options(demo)
        add_common_options(demo, timeout=60)
    return parser


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    open_events(args.events)
    job = job_from_args(parser, args, least=1)  # one rank is a job too (one GPU, say)
    return run_ranks(job, rank_main, args, preload=PRELOAD)


if __name__ == "__main__":
    exit_now(main())
