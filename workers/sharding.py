"""When the model does not fit: the training state sharded over the ranks. ZeRO's three
stages written by hand, FSDP2's fully_shard, and a sharded checkpoint, each measured per
rank against DDP.

    python -m workers.sharding compare
    python -m workers.sharding compare --world-size 4 --strategies ddp zero3 fsdp2
    python -m workers.sharding save --world-size 4 --checkpoint /tmp/sharded
    python -m workers.sharding load --world-size 2 --checkpoint /tmp/sharded
    python -m workers.sharding offload
    torchrun --standalone --nproc-per-node 2 -m workers.sharding compare

``compare`` trains the same model on the same data once per strategy and records, per
rank, the bytes of parameters, gradients and optimizer state it held, the bytes it sent,
its time per step and its losses and final weights, which must equal DDP's. gloo on the
CPU, nccl with one GPU per rank.
"""

import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from workers import PRELOADS
from workers.collectives import all_gather_single, reduce_scatter_single
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
    fail,
    first_line,
    open_events,
    positive_float,
    positive_int,
    say,
)

# --- the model, the data, and what a rank holds ------------------------------------------


def tower(width: int, depth: int) -> nn.Sequential:
    """``depth`` square linear layers with a ReLU between them, without biases: each layer's
    parameters are one weight matrix, one tensor to shard."""
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width, bias=False), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def batch_for(rank: int, step: int, args, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank r's inputs and targets for one step: different on every rank, the same on
    every run and for every strategy."""
    generator = torch.Generator().manual_seed(1000 * step + rank)
    inputs = torch.randn(args.batch_size, args.width, generator=generator)
    targets = torch.randn(args.batch_size, args.width, generator=generator)
    return inputs.to(device), targets.to(device)


def local(tensor: torch.Tensor) -> torch.Tensor:
    """The part of a tensor this process holds: a DTensor's local shard, else itself."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def storage_bytes(tensors) -> int:
    """Bytes of memory behind ``tensors``, each storage counted once (a view shares its
    tensor's storage, and costs nothing more)."""
    storages = {}
    for tensor in tensors:
        if tensor is not None:
            storage = local(tensor).untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def held(parameters, optimizer) -> dict[str, int]:
    """What this rank holds now, in bytes: parameters, gradients, optimizer state (Adam's
    two running averages; its step counts, one number per tensor, left out)."""
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


class Traffic:
    """The collectives a strategy calls, with the bytes each sends from this rank counted
    as a bandwidth-optimal (ring) algorithm sends them: an all-reduce of S bytes sends
    2(N-1)/N S; a reduce-scatter of S bytes, or an all-gather into S bytes, (N-1)/N S."""

    def __init__(self):
        self.counted = 0.0

    def share(self, tensor: torch.Tensor) -> float:
        world_size = dist.get_world_size()
        return (world_size - 1) / world_size * tensor.numel() * tensor.element_size()

    def all_reduce(self, tensor: torch.Tensor) -> dist.Work:
        self.counted += 2 * self.share(tensor)
        return dist.all_reduce(tensor, async_op=True)  # for DDP's hook, which must not wait

    def reduce_scatter(self, shard: torch.Tensor, whole: torch.Tensor) -> None:
        self.counted += self.share(whole)
        reduce_scatter_single(shard, whole)

    def all_gather(self, whole: torch.Tensor, shard: torch.Tensor) -> None:
        self.counted += self.share(whole)
        all_gather_single(whole, shard)


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


# --- DDP, the baseline: every rank holds everything --------------------------------------


def counted_all_reduce(traffic: Traffic,
                       bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's own averaging, each bucket counted."""
    buffer = bucket.buffer().div_(dist.get_world_size())
    return traffic.all_reduce(buffer).get_future().then(lambda done: done.value()[0])


class Replicated(Strategy):
    """DDP: a whole copy of the model, its gradients and its optimizer state on every rank;
    the gradients all-reduced. Gradients are views into DDP's buckets, so that DDP keeps
    no second copy of them (``gradient_as_bucket_view``, the DDP-internals chapter)."""

    def __init__(self, model: nn.Module, device, traffic: Traffic, lr: float):
        self.model = wrap(model, device, gradient_as_bucket_view=True)
        self.model.register_comm_hook(traffic, counted_all_reduce)
        self.parameters = list(model.parameters())
        self.optimizer = torch.optim.Adam(self.parameters, lr=lr)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=False)  # the gradients stay views


# --- ZeRO stages 1 and 2, by hand --------------------------------------------------------


def padded(flat: torch.Tensor, parts: int) -> torch.Tensor:
    """``flat`` with zeros at its end, so that it splits into ``parts`` equal parts."""
    return F.pad(flat, (0, -len(flat) % parts))


class ShardedOptimizer(Strategy):
    """ZeRO stages 1 and 2: every rank holds the whole parameters, but its optimizer only
    a 1/N part of each, and updates only that part; an all-gather then gives every rank
    every part. Each parameter lives in a flat buffer padded to N equal parts, and this
    rank's part is a view into it.

    Stage 1 reduce-scatters the gradients after backward: every whole gradient exists
    until then. Stage 2 reduce-scatters each gradient the moment backward has produced it,
    and frees it: a whole gradient exists only for a moment, one at a time.
    """

    def __init__(self, model: nn.Module, stage: int, traffic: Traffic, lr: float):
        self.model, self.stage, self.traffic = model, stage, traffic
        rank, world_size = dist.get_rank(), dist.get_world_size()
        self.buffers, self.parts = [], []
        for parameter in model.parameters():
            buffer = padded(parameter.detach().flatten(), world_size)
            parameter.data = buffer[:parameter.numel()].view_as(parameter)
            part = buffer.chunk(world_size)[rank]  # a view: no copy of the weights
            self.buffers.append(buffer)
            self.parts.append(part.requires_grad_())
            if stage == 2:
                parameter.register_post_accumulate_grad_hook(self.scatter_gradient)
        self.parameters = list(model.parameters()) + self.parts
        self.optimizer = torch.optim.Adam(self.parts, lr=lr)

    def scatter_gradient(self, parameter: nn.Parameter) -> None:
        """Sum this gradient over the ranks, keeping only this rank's part, averaged."""
        index = next(i for i, p in enumerate(self.model.parameters()) if p is parameter)
        part = self.parts[index]
        part.grad = torch.empty_like(part)
        world_size = dist.get_world_size()
        self.traffic.reduce_scatter(part.grad, padded(parameter.grad.flatten(), world_size))
        part.grad /= world_size
        parameter.grad = None  # the whole gradient is no longer needed

    def update(self) -> None:
        if self.stage == 1:
            for parameter in self.model.parameters():
                self.scatter_gradient(parameter)
        self.optimizer.step()  # on this rank's parts only
        for buffer, part in zip(self.buffers, self.parts):
            self.traffic.all_gather(buffer, part.detach().clone())

    def whole_weights(self) -> list[torch.Tensor]:
        return [p.detach() for p in self.model.parameters()]


# --- ZeRO stage 3, by hand: parameters sharded too ---------------------------------------


class GatheredLinear(torch.autograd.Function):
    """``inputs @ weight.T`` from this rank's part of the weight: the whole weight is
    gathered for the forward, freed, and gathered again for the backward, whose weight
    gradient is reduce-scattered straight back into parts."""

    @staticmethod
    def forward(ctx, inputs, part, layer):
        ctx.save_for_backward(inputs)  # and not the whole weight
        ctx.layer = layer
        return inputs @ layer.gather().T

    @staticmethod
    def backward(ctx, grad_output):
        [inputs] = ctx.saved_tensors
        weight = ctx.layer.gather()  # the second all-gather of this weight
        grad_weight = grad_output.flatten(0, -2).T @ inputs.flatten(0, -2)
        return grad_output @ weight, ctx.layer.scatter(grad_weight), None


class ShardedLinear(nn.Module):
    """ZeRO stage 3: a linear layer whose only parameter is this rank's 1/N part of the
    weight, so its gradient and optimizer state are 1/N too."""

    def __init__(self, layer: nn.Linear, traffic: Traffic):
        super().__init__()
        rank, world_size = dist.get_rank(), dist.get_world_size()
        self.shape, self.traffic = layer.weight.shape, traffic
        whole = padded(layer.weight.detach().flatten(), world_size)
        self.part = nn.Parameter(whole.chunk(world_size)[rank].clone())

    def gather(self) -> torch.Tensor:
        """The whole weight, from every rank's part."""
        part = self.part.detach()
        whole = part.new_empty(len(part) * dist.get_world_size())
        self.traffic.all_gather(whole, part)
        return whole[:self.shape.numel()].view(self.shape)

    def scatter(self, grad_weight: torch.Tensor) -> torch.Tensor:
        world_size = dist.get_world_size()
        grad_part = torch.empty_like(self.part)
        self.traffic.reduce_scatter(grad_part, padded(grad_weight.flatten(), world_size))
        return grad_part / world_size

    def forward(self, inputs):  # the part goes in so that autograd gives it its gradient
        return GatheredLinear.apply(inputs, self.part, self)


class ShardedParameters(Strategy):
    """ZeRO stage 3: the model's linear layers replaced by sharded ones."""

    def __init__(self, model: nn.Sequential, traffic: Traffic, lr: float):
        self.model = nn.Sequential(*[ShardedLinear(layer, traffic)
                                     if isinstance(layer, nn.Linear) else layer
                                     for layer in model])
        self.parameters = list(self.model.parameters())
        self.optimizer = torch.optim.Adam(self.parameters, lr=lr)

    def whole_weights(self) -> list[torch.Tensor]:
        return [layer.gather() for layer in self.model if isinstance(layer, ShardedLinear)]


# --- FSDP2: the same, from PyTorch -------------------------------------------------------


class FullyShardedModel(Strategy):
    """FSDP2: ``fully_shard`` on each layer, then on the whole model. Each parameter
    becomes a DTensor sharded over the ranks' mesh; FSDP2 all-gathers a layer before its
    forward and backward and reduce-scatters its gradients, as ZeRO-3 does.
    ``reshard_after_forward=False`` keeps each layer whole from its forward to its
    backward: one all-gather fewer, the whole parameters held in between."""

    def __init__(self, model: nn.Module, device, lr: float, reshard_after_forward: bool):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
        self.model = fully_shard(model, mesh=mesh)
        self.parameters = list(model.parameters())  # the sharded DTensors, kept throughout
        self.optimizer = torch.optim.Adam(self.parameters, lr=lr)

    def whole_weights(self) -> list[torch.Tensor]:
        return [p.full_tensor() for p in self.parameters]


# --- one strategy trained and measured ---------------------------------------------------

STRATEGIES = {
    "ddp": "DDP",
    "zero1": "ZeRO-1",
    "zero2": "ZeRO-2",
    "zero3": "ZeRO-3",
    "fsdp2": "FSDP2",
    "fsdp2-keep": "FSDP2, reshard_after_forward=False",
}


def build(strategy: str, model: nn.Module, device, traffic: Traffic, lr: float) -> Strategy:
    if strategy == "ddp":
        return Replicated(model, device, traffic, lr)
    if strategy in ("zero1", "zero2"):
        return ShardedOptimizer(model, int(strategy[-1]), traffic, lr)
    if strategy == "zero3":
        return ShardedParameters(model, traffic, lr)
    return FullyShardedModel(model, device, lr, reshard_after_forward=strategy == "fsdp2")


def train(strategy: str, rank: int, args, device) -> dict:
    """``--steps`` steps of one strategy. Per step: the bytes held after forward, after
    backward and after the update, the bytes sent, the time, and the loss."""
    torch.manual_seed(0)  # every strategy starts from the same weights
    model = tower(args.width, args.depth).to(device)
    traffic = Traffic()
    trained = build(strategy, model, device, traffic, args.lr)
    record = {"held": [], "parameters after forward": 0, "counted": [], "written": [],
              "seconds": [], "losses": []}
    for step in range(args.steps):
        inputs, targets = batch_for(rank, step, args, device)
        counted, written = traffic.counted, written_bytes()
        synchronize(device)
        begin = time.perf_counter()
        loss = F.mse_loss(trained.forward(inputs), targets)
        # FSDP2 swaps a module's parameters for whole ones while it keeps them gathered
        after_forward = storage_bytes(trained.parameters + list(trained.model.parameters()))
        loss.backward()
        after_backward = held(trained.parameters, trained.optimizer)
        trained.update()
        synchronize(device)
        record["seconds"].append(time.perf_counter() - begin)
        record["written"].append(written_bytes() - written)
        record["counted"].append(traffic.counted - counted)
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
    measured, and its losses and final weights compared with DDP's."""
    reference = None
    for strategy in ["ddp"] + [s for s in args.strategies if s != "ddp"]:
        record = train(strategy, rank, args, device)
        if reference is None:
            reference = record
        difference = max((mine - theirs).abs().max().item()
                         for mine, theirs in zip(record["weights"], reference["weights"]))
        peak = {kind: max(h[kind] for h in record["held"]) for kind in record["held"][0]}
        sent = statistics.median(record["written"][1:] or record["written"])
        seconds = statistics.median(record["seconds"][1:] or record["seconds"])
        events.emit(rank, "strategy", strategy=strategy, name=STRATEGIES[strategy],
                    world_size=dist.get_world_size(), **peak,
                    parameters_after_forward=record["parameters after forward"],
                    counted_bytes=None if strategy.startswith("fsdp2")  # inside PyTorch
                    else record["counted"][-1],
                    written_bytes=sent if device.type == "cpu" else None,
                    seconds=seconds, losses=record["losses"],
                    largest_weight_difference=difference)
        if rank == 0:
            wire = f" {sent / 2**20:5.2f} MiB sent," if device.type == "cpu" else ""
            say(rank, f"{STRATEGIES[strategy]:<34} {sum(peak.values()) / 2**20:6.2f} MiB "
                      f"held,{wire} {seconds * 1000:5.1f} ms per step, weights "
                      f"{difference:.0e} from DDP's")


# --- a sharded checkpoint: saved by N ranks, loaded by M ---------------------------------


def sharded_for_checkpoint(args, device) -> FullyShardedModel:
    """The FSDP2 model and its optimizer, for saving and loading."""
    torch.manual_seed(0)
    return FullyShardedModel(tower(args.width, args.depth).to(device), device, args.lr,
                             reshard_after_forward=True)


def whole_state(trained) -> dict:
    """The whole model and optimizer state, gathered, on rank 0 (empty elsewhere)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state, optimizer_state = get_state_dict(trained.model, trained.optimizer,
                                                  options=options)
    return {"model": model_state, "optimizer": optimizer_state}


def save(rank: int, args, device, events: Events) -> None:
    """Train a few steps, then save the sharded state: each rank writes its own shards."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    trained = sharded_for_checkpoint(args, device)
    for step in range(args.steps):
        inputs, targets = batch_for(rank, step, args, device)
        F.mse_loss(trained.forward(inputs), targets).backward()
        trained.update()
        trained.zero_grad()
    model_state, optimizer_state = get_state_dict(trained.model, trained.optimizer)
    begin = time.perf_counter()
    dcp.save({"model": model_state, "optimizer": optimizer_state},
             checkpoint_id=args.checkpoint)
    seconds = time.perf_counter() - begin
    whole = whole_state(trained)  # a plain copy of everything, to check a load against
    if rank == 0:
        torch.save(whole, os.path.join(args.checkpoint, WHOLE_COPY))
        say(rank, f"saved by {dist.get_world_size()} ranks in {seconds:.2f} s: "
                  f"{', '.join(sorted(os.listdir(args.checkpoint)))}")
    events.emit(rank, "saved", world_size=dist.get_world_size(), seconds=seconds,
                local_bytes=storage_bytes(trained.parameters))


WHOLE_COPY = "whole_state_for_checking.pt"  # not part of the checkpoint: save's own check


def load(rank: int, args, device, events: Events) -> None:
    """Load the checkpoint into this job's ranks, however many saved it; check every
    weight and optimizer value against the whole copy the saving job wrote."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    trained = sharded_for_checkpoint(args, device)
    model_state, optimizer_state = get_state_dict(trained.model, trained.optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=args.checkpoint)  # each rank reads the parts it needs
    set_state_dict(trained.model, trained.optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"])
    loaded = whole_state(trained)
    if rank == 0:
        saved = torch.load(os.path.join(args.checkpoint, WHOLE_COPY))
        pairs = list(zip(flat_tensors(loaded), flat_tensors(saved), strict=True))
        different = sum(not torch.equal(mine, theirs) for mine, theirs in pairs)
        events.emit(rank, "loaded", world_size=dist.get_world_size(), tensors=len(pairs),
                    different=different)
        say(rank, f"loaded into {dist.get_world_size()} ranks: {len(pairs)} tensors, "
                  f"{different} different from the saved ones")
        if different:
            raise RuntimeError(f"{different} of {len(pairs)} tensors changed between save "
                               "and load")
    events.emit(rank, "shard", world_size=dist.get_world_size(),
                local_bytes=storage_bytes(trained.parameters))


def flat_tensors(state: dict) -> list[torch.Tensor]:
    """Every tensor of a nested state dict, in the order of its sorted keys."""
    tensors = []
    for key in sorted(state, key=str):
        value = state[key]
        if isinstance(value, dict):
            tensors += flat_tensors(value)
        elif torch.is_tensor(value):
            tensors.append(value)
    return tensors


# --- a feature that needs a GPU ----------------------------------------------------------


def offload(rank: int, args, device, events: Events) -> None:
    """FSDP2 with CPUOffloadPolicy: the sharded parameters, gradients and optimizer state
    kept in CPU memory, copied to the GPU for each layer's compute."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    torch.manual_seed(0)
    model = tower(args.width, args.depth).to(device)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    try:
        fully_shard(model, mesh=mesh, offload_policy=CPUOffloadPolicy())
        inputs, targets = batch_for(rank, 0, args, device)
        F.mse_loss(model(inputs), targets).backward()
        where, error = str(next(model.parameters()).device), None
    except RuntimeError as raised:
        where, error = None, first_line(raised)
    events.emit(rank, "offload", device=str(device), parameters_on=where, error=error)
    if rank == 0:
        say(rank, f"error: {error}" if error else
                  f"compute on {device}, sharded parameters kept on {where}")


# --- the job -----------------------------------------------------------------------------

DEMOS = {"compare": compare, "save": save, "load": load, "offload": offload}
PRELOAD = PRELOADS["sharding"]  # (in workers/__init__.py)


def rank_main(rank: int, job: Job, args) -> None:
    share_cores(job.world_size)
    events = Events(args.events)
    with joined(job, rank) as device:
        DEMOS[args.demo](rank, args, device, events)
        synchronize(device)


def add_model_options(parser, steps: int) -> None:
    parser.add_argument("--width", type=positive_int, default=512,
                        help="features of each linear layer (default 512)")
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
        "compare", help="DDP, ZeRO-1/2/3 by hand and FSDP2: bytes held and sent, weights")
    saving = demos.add_parser("save", help="train, then save a sharded checkpoint")
    loading = demos.add_parser(
        "load", help="load a sharded checkpoint into any number of ranks, and check it")
    offloading = demos.add_parser("offload", help="FSDP2 with CPUOffloadPolicy")
    add_model_options(comparison, steps=5)
    comparison.add_argument("--strategies", nargs="+", choices=list(STRATEGIES),
                            default=list(STRATEGIES), metavar="STRATEGY",
                            help=f"what to train, DDP always first (default all: "
                                 f"{' '.join(STRATEGIES)})")
    add_model_options(saving, steps=3)
    add_model_options(loading, steps=3)
    add_model_options(offloading, steps=1)
    for checkpointing in (saving, loading):
        checkpointing.add_argument("--checkpoint", required=True, metavar="DIR",
                                   help="the checkpoint's folder")
    for demo in (comparison, saving, loading, offloading):
        add_job_options(demo)
        add_common_options(demo, timeout=60)
    return parser


def check_checkpoint_folder(args) -> None:
    """Before any rank starts: save needs a folder it can write, load a saved checkpoint."""
    folder = args.checkpoint
    if args.demo == "save":
        try:
            os.makedirs(folder, exist_ok=True)
            probe = os.path.join(folder, ".writable")
            open(probe, "w").close()
            os.remove(probe)
        except OSError as error:
            fail(f"cannot write the checkpoint folder {folder}: {error.strerror}")
    elif not os.path.exists(os.path.join(folder, ".metadata")):
        fail(f"no checkpoint in {folder}: save one first "
             f"(python -m workers.sharding save --checkpoint {folder})")
    elif not os.path.exists(os.path.join(folder, WHOLE_COPY)):
        fail(f"{folder} was not saved by this worker's save demo, whose copy load checks")
    else:
        from torch.distributed.checkpoint import FileSystemReader

        saved = FileSystemReader(folder).read_metadata().state_dict_metadata
        layers = [key for key in saved if key.startswith("model.")]
        shape = tuple(saved[layers[0]].size)
        if len(layers) != args.depth or shape != (args.width, args.width):
            fail(f"{folder} holds {len(layers)} layers of {shape[0]} features: load it "
                 f"with --depth {len(layers)} --width {shape[0]}")


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    open_events(args.events)
    job = job_from_args(parser, args, least=1)  # one rank is a job too (one GPU, say)
    if args.demo in ("save", "load"):
        check_checkpoint_folder(args)
    return run_ranks(job, rank_main, args, preload=PRELOAD)


if __name__ == "__main__":
    sys.exit(main())
