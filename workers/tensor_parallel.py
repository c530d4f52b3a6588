"""Splitting a layer: tensor parallelism. An MLP split by columns then rows with DTensor's
``parallelize_module``, its collectives counted and its results checked against the whole
MLP; what each change of placement (Shard, Replicate, Partial) costs; the bytes a
layer sends as the tensor-parallel degree grows; sequence parallelism; and a 2-D mesh of
FSDP2 and tensor parallelism trained against one process.

    python -m workers.tensor_parallel mlp
    python -m workers.tensor_parallel placements --world-size 4
    python -m workers.tensor_parallel scaling --world-size 4
    python -m workers.tensor_parallel loss
    python -m workers.tensor_parallel sequence
    python -m workers.tensor_parallel mesh-2d --world-size 4
    python -m workers.tensor_parallel at-scale --degrees 2 4 64
    torchrun --standalone --nproc-per-node 2 -m workers.tensor_parallel mlp

gloo on the CPU, nccl with one GPU per rank (bytes on the wire: measured on the CPU only).
"""

import logging
import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from workers import PRELOADS
from workers.job import Job, add_job_options, job_from_args, joined, run_ranks, share_cores
from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    exit_now,
    fail,
    open_events,
    positive_int,
    say,
    say_main,
)
from workers.sharding import written_bytes

PRELOAD = PRELOADS["tensor_parallel"]  # what workers/__init__.py starts the forkserver with

# --- the lesson: an MLP, and the plan that splits it --------------------------------------


class MLP(nn.Module):
    """A transformer's feed-forward block: up to ``hidden`` features, ReLU, back down."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def tensor_parallel(model: nn.Module, mesh) -> nn.Module:
    """``up`` split by its output features (columns of the math's weight), ``down`` by its
    input features (rows): each rank computes its slice of the hidden units and a partial
    sum of the output, and one all-reduce adds the partial sums."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    return parallelize_module(model, mesh, {"up": ColwiseParallel(),
                                            "down": RowwiseParallel()})


class Block(nn.Module):
    """A transformer block's feed-forward half: LayerNorm, the MLP, and the residual sum.
    Its input is (tokens, width): the tokens, the sequence, along dimension 0."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mlp = MLP(width, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


def sequence_parallel(block: Block, mesh) -> Block:
    """Each rank holds 1/t of the tokens outside the MLP (the norm, the residual): the
    MLP's input is all-gathered from the ranks' slices of the sequence, and its output
    reduce-scattered back into them, instead of one all-reduce of the whole."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    return parallelize_module(block, mesh, {
        "norm": SequenceParallel(sequence_dim=0),
        "mlp.up": ColwiseParallel(input_layouts=Shard(0)),
        "mlp.down": RowwiseParallel(output_layouts=Shard(0)),
    })


def two_dimensional(model: nn.Sequential, mesh) -> nn.Sequential:
    """A 2-D mesh: each MLP split over a row of the mesh ("tp"), then FSDP2 shards what
    each row holds across the rows ("dp"), which train on different data."""
    from torch.distributed.fsdp import fully_shard

    for block in model:
        tensor_parallel(block, mesh["tp"])
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return model


# --- measuring: collectives counted, bytes written --------------------------------------


def counts(comm) -> dict[str, int]:
    """CommDebugMode's counts as ``{"all_reduce": 1}``: the collective's name without its
    namespace (``c10d_functional.all_reduce``)."""
    return {str(op).split(".")[-1]: n for op, n in comm.get_comm_counts().items() if n}


def batch(args, device) -> torch.Tensor:
    """The same inputs on every rank of a tensor-parallel group: each sees every token.
    (Seed 2 puts no input to the demos' ReLUs within 1e-6 of the kink at 0, where rounding
    could tip it; seed 1 put one 4e-7 from it.)"""
    generator = torch.Generator().manual_seed(2)
    return torch.randn(args.tokens, args.width, generator=generator).to(device)


def largest_difference(pairs) -> float:
    return max((mine - theirs).abs().max().item() for mine, theirs in pairs)


def nearest_the_kink(model: nn.Module) -> list[float]:
    """Hooks on each MLP of ``model`` that keep, in the one-element list returned, how near
    any input to its ReLU (``up``'s output) came to the kink at 0: one within rounding of it
    can pass its gradient when the sums run in one order and not in another."""
    nearest = [float("inf")]

    def measure(module, inputs, output):
        nearest[0] = min(nearest[0], output.detach().abs().min().item())

    for module in model.modules():
        if isinstance(module, MLP):
            module.up.register_forward_hook(measure)
    return nearest


def mlp(rank: int, args, device, events: Events) -> None:
    """The MLP split over all ranks, against the whole MLP every rank also holds."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.debug import CommDebugMode

    torch.manual_seed(0)
    whole = MLP(args.width, args.hidden).to(device)
    split = MLP(args.width, args.hidden).to(device)
    split.load_state_dict(whole.state_dict())
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    split = tensor_parallel(split, mesh)
    x = batch(args, device).requires_grad_()  # as if a layer before this one made it
    x_whole = x.detach().clone().requires_grad_()
    with CommDebugMode() as forward:
        out = split(x)
    with CommDebugMode() as backward:
        out.square().mean().backward()
    nearest = nearest_the_kink(whole)
    expected = whole(x_whole)
    expected.square().mean().backward()
    output_difference = (out - expected).abs().max().item()
    gradient_difference = largest_difference(
        [(p.grad.full_tensor(), q.grad) for p, q in zip(split.parameters(),
                                                        whole.parameters())]
        + [(x.grad, x_whole.grad)])
    shapes = {name: list(p.to_local().shape) for name, p in split.named_parameters()}
    placements = {name: repr(p.placements[0]) for name, p in split.named_parameters()}
    events.emit(rank, "mlp", world_size=dist.get_world_size(), forward=counts(forward),
                backward=counts(backward), output_difference=output_difference,
                gradient_difference=gradient_difference, local_shapes=shapes,
                placements=placements, output_is_dtensor=isinstance(out, DTensor),
                smallest_relu_input=nearest[0])
    say(rank, f"up.weight {placements['up.weight']} {shapes['up.weight']}, down.weight "
              f"{placements['down.weight']} {shapes['down.weight']}; forward "
              f"{counts(forward)}, backward {counts(backward)}; output "
              f"{output_difference:.0e} and gradients {gradient_difference:.0e} from "
              "the whole MLP's")


# --- placements and what a change of placement costs -----------------------------------


def changes():
    """(name, placement before, after): every kind of change ``redistribute`` makes."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    return [("Shard(0) → Replicate", Shard(0), Replicate()),
            ("Partial → Replicate", Partial(), Replicate()),
            ("Partial → Shard(0)", Partial(), Shard(0)),
            ("Shard(0) → Shard(1)", Shard(0), Shard(1)),
            ("Replicate → Shard(0)", Replicate(), Shard(0))]


def placed(whole: torch.Tensor, placement, mesh):
    """``whole`` as a DTensor with ``placement``. Partial: each rank holds a term of a sum,
    here rank r > 0 the number r in every element and rank 0 the rest of ``whole``."""
    from torch.distributed.tensor import DTensor, Partial, distribute_tensor

    if isinstance(placement, Partial):
        rank, world_size = dist.get_rank(), dist.get_world_size()
        term = torch.full_like(whole, rank) if rank else whole - sum(range(world_size))
        return DTensor.from_local(term, mesh, [placement])
    return distribute_tensor(whole, mesh, [placement])


def placements(rank: int, args, device, events: Events) -> None:
    """Each change of placement, its collectives counted and its bytes measured; the
    value after the change checked against the whole tensor."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    whole = torch.arange(args.tokens * args.width, dtype=torch.float32,
                         device=device).reshape(args.tokens, args.width)
    for name, before, after in changes():
        tensor = placed(whole, before, mesh)
        dist.barrier()
        written = written_bytes()
        with CommDebugMode() as comm:
            moved = tensor.redistribute(mesh, [after])
            local = moved.to_local()
        written = written_bytes() - written
        difference = (moved.full_tensor() - whole).abs().max().item()
        events.emit(rank, "placement", name=name, collectives=counts(comm),
                    written_bytes=written if device.type == "cpu" else None,
                    whole_bytes=whole.numel() * whole.element_size(),
                    local_shape=list(local.shape), difference=difference)
        if rank == 0:
            say(rank, f"{name:<21} {str(counts(comm) or 'no collective'):<22} "
                      f"{written / 2**10:7.1f} KiB sent, local {list(local.shape)}, "
                      f"value {difference:.0e} from the whole tensor's")


# --- bytes per layer against the tensor-parallel degree ---------------------------------


def scaling(rank: int, args, device, events: Events) -> None:
    """For each tensor-parallel degree t that divides the world size: the ranks in groups
    of t (a 2-D mesh, data-parallel × tensor-parallel), a stack of split MLPs trained one
    step, and the bytes each rank wrote, per layer."""
    from torch.distributed.device_mesh import init_device_mesh

    world_size = dist.get_world_size()
    for degree in args.degrees:
        mesh = init_device_mesh(device.type, (world_size // degree, degree),
                                mesh_dim_names=("dp", "tp"))
        torch.manual_seed(0)
        layers = nn.Sequential(*[tensor_parallel(MLP(args.width, args.hidden).to(device),
                                                 mesh["tp"]) for _ in range(args.layers)])
        x = batch(args, device).requires_grad_()
        dist.barrier()
        written = written_bytes()
        layers(x).square().mean().backward()
        written = written_bytes() - written
        events.emit(rank, "scaling", degree=degree, layers=args.layers,
                    written_bytes=written if device.type == "cpu" else None,
                    activation_bytes=x.numel() * x.element_size(),
                    local_parameters=sum(p.to_local().numel() for p in layers.parameters()))
        if rank == 0:
            say(rank, f"degree {degree}: {written / args.layers / 2**10:7.1f} KiB sent per "
                      f"layer and rank, forward and backward")


# --- the loss over a vocabulary split by columns ----------------------------------------


def vocabulary_loss(rank: int, args, device, events: Events) -> None:
    """An output head split by vocabulary (columns) and its cross-entropy two ways: the
    logits gathered whole on every rank first, or computed where they lie with
    ``loss_parallel``. Loss and gradient checked against one process; bytes measured."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        loss_parallel,
        parallelize_module,
    )

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    generator = torch.Generator().manual_seed(2)
    targets = torch.randint(0, args.vocabulary, (args.tokens,), generator=generator)
    torch.manual_seed(0)
    whole = nn.Linear(args.width, args.vocabulary, bias=False).to(device)
    x = batch(args, device)
    nn.functional.cross_entropy(whole(x), targets).backward()
    for way, plan in [("gathered", ColwiseParallel(output_layouts=Replicate())),
                      ("loss_parallel", ColwiseParallel(output_layouts=Shard(-1),
                                                        use_local_output=False))]:
        head = nn.Linear(args.width, args.vocabulary, bias=False).to(device)
        head.load_state_dict(whole.state_dict())
        head = parallelize_module(head, mesh, plan)
        dist.barrier()
        written = written_bytes()
        with CommDebugMode() as comm:
            if way == "gathered":
                loss = nn.functional.cross_entropy(head(x), targets)
                loss.backward()
            else:
                with loss_parallel():
                    loss = nn.functional.cross_entropy(head(x), targets)
                    loss.backward()
        written = written_bytes() - written
        loss = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
        difference = (head.weight.grad.full_tensor() - whole.weight.grad).abs().max().item()
        events.emit(rank, "loss", way=way, collectives=counts(comm),
                    written_bytes=written if device.type == "cpu" else None,
                    logits_bytes=args.tokens * args.vocabulary * 4,
                    loss_difference=abs(loss.item() - nn.functional.cross_entropy(
                        whole(x), targets).item()), gradient_difference=difference)
        if rank == 0:
            say(rank, f"{way:<13} {written / 2**10:8.1f} KiB sent, {counts(comm)}; "
                      f"gradient {difference:.0e} from one process's")


# --- sequence parallelism: the same bytes, 1/t of the activations -----------------------


class SavedBytes(torch.autograd.graph.saved_tensors_hooks):
    """Within ``with SavedBytes() as saved:``, the bytes autograd keeps for backward on
    this rank (``saved.bytes``): each storage counted once, a DTensor by its local part."""

    def __init__(self):
        self.storages: dict[int, int] = {}
        super().__init__(self.pack, lambda tensor: tensor)

    def pack(self, tensor):
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        if hasattr(local, "trigger_wait"):  # a collective's output, still arriving
            local = local.trigger_wait()
        storage = local.untyped_storage()
        self.storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    def __enter__(self):
        super().__enter__()
        return self

    @property
    def bytes(self) -> int:
        return sum(self.storages.values())


def sequence(rank: int, args, device, events: Events) -> None:
    """The block split two ways on all ranks, tensor parallel alone and with sequence
    parallelism: collectives counted, bytes sent, activations kept for backward, and the
    outputs and gradients checked against the whole block."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.debug import CommDebugMode

    world_size = dist.get_world_size()
    mesh = init_device_mesh(device.type, (world_size,))
    torch.manual_seed(0)
    whole = Block(args.width, args.hidden).to(device)
    with torch.no_grad():  # a norm that is not the identity, so its gradients count
        whole.norm.weight.uniform_(0.5, 1.5)
        whole.norm.bias.uniform_(-0.5, 0.5)
    x_whole = batch(args, device).requires_grad_()
    nearest = nearest_the_kink(whole)
    expected = whole(x_whole)
    expected.square().mean().backward()
    share = args.tokens // world_size
    mine = slice(rank * share, (rank + 1) * share)
    for way in ["tensor parallel", "sequence parallel"]:
        block = Block(args.width, args.hidden).to(device)
        block.load_state_dict(whole.state_dict())
        if way == "tensor parallel":
            block.mlp = tensor_parallel(block.mlp, mesh)
            x = x_whole.detach().clone().requires_grad_()  # every token on every rank
        else:
            block = sequence_parallel(block, mesh)
            x = x_whole.detach()[mine].clone().requires_grad_()  # this rank's tokens
        dist.barrier()
        written = written_bytes()
        with CommDebugMode() as forward, SavedBytes() as saved:
            out = block(x)
        with CommDebugMode() as backward:
            # the mean over every token: a sum of each rank's terms, over all the tokens
            (out.square().sum() / expected.numel()).backward()
        written = written_bytes() - written
        if way == "sequence parallel":
            out = DTensor.from_local(out, mesh, [Shard(0)]).full_tensor()
            x_grad = DTensor.from_local(x.grad, mesh, [Shard(0)]).full_tensor()
        else:
            x_grad = x.grad
        gradients = [(p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad,
                      q.grad) for p, q in zip(block.parameters(), whole.parameters())]
        gradients_difference = largest_difference(gradients + [(x_grad, x_whole.grad)])
        events.emit(rank, "sequence", way=way, world_size=world_size,
                    forward=counts(forward), backward=counts(backward),
                    written_bytes=written if device.type == "cpu" else None,
                    activation_bytes=x_whole.numel() * x_whole.element_size(),
                    saved_bytes=saved.bytes, input_shape=list(x.shape),
                    norm_gradient=repr(block.norm.weight.grad.placements[0])
                    if isinstance(block.norm.weight.grad, DTensor) else "a plain tensor",
                    output_difference=(out - expected).abs().max().item(),
                    gradient_difference=gradients_difference,
                    smallest_relu_input=nearest[0])
        if rank == 0:
            say(rank, f"{way}: {written / 2**10:.1f} KiB sent, {saved.bytes / 2**10:.1f} "
                      f"KiB kept for backward; gradients {gradients_difference:.0e} from "
                      "the whole block's")


# --- a 2-D mesh: FSDP2 across the rows, tensor parallel along them -----------------------


def mesh_2d(rank: int, args, device, events: Events) -> None:
    """Two MLPs on a (dp, tp) mesh trained a few SGD steps, each row of the mesh on its own
    slice of the batch; after every step each weight is compared with one process that
    trains the whole model on the whole batch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode

    # torch 2.15's FSDP2 warns that a block whose output is a view (here a local tensor
    # taken from the DTensor RowwiseParallel makes) must not meet an in-place op after it;
    # none does in this model, and the weights are checked against one process below.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view")
    # Gathering a weight whole from a 2-D mesh (the check below) takes two all-gathers, and
    # DTensor warns of it on every rank at every gather: true, and no matter once a step.
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    world_size = dist.get_world_size()
    rows = world_size // args.tp
    mesh = init_device_mesh(device.type, (rows, args.tp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    whole = nn.Sequential(*[MLP(args.width, args.hidden) for _ in range(2)]).to(device)
    model = nn.Sequential(*[MLP(args.width, args.hidden) for _ in range(2)]).to(device)
    model.load_state_dict(whole.state_dict())
    model = two_dimensional(model, mesh)
    mine_of_up = model[0].up.weight.to_local()  # which rows of the whole weight are here
    first_row = next(i for i in range(args.hidden) if torch.equal(
        whole[0].up.weight[i:i + len(mine_of_up)], mine_of_up))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    reference = torch.optim.SGD(whole.parameters(), lr=args.lr)
    nearest = nearest_the_kink(whole)
    generator = torch.Generator().manual_seed(3)
    share = args.tokens // rows  # this row's slice of every batch
    mine = slice(mesh.get_local_rank("dp") * share, (mesh.get_local_rank("dp") + 1) * share)
    for step in range(1, args.steps + 1):
        x = torch.randn(args.tokens, args.width, generator=generator).to(device)
        target = torch.randn(args.tokens, args.width, generator=generator).to(device)
        with CommDebugMode() as comm:
            loss = (model(x[mine]) - target[mine]).square().mean()
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        (whole(x) - target).square().mean().backward()
        reference.step()
        reference.zero_grad()
        difference = largest_difference([(p.full_tensor(), q) for p, q in
                                         zip(model.parameters(), whole.parameters())])
        events.emit(rank, "mesh_2d", step=step, rows=rows, tp=args.tp,
                    collectives=counts(comm), weight_difference=difference,
                    smallest_relu_input=nearest[0],
                    dp_rank=mesh.get_local_rank("dp"), tp_rank=mesh.get_local_rank("tp"))
        if rank == 0:
            say(rank, f"step {step}: weights {difference:.0e} from one process's")
    first = model[0].up.weight
    events.emit(rank, "mesh_2d_placements", mesh=[rows, args.tp],
                placements=[repr(p) for p in first.placements],
                local_shape=list(first.to_local().shape), whole_shape=list(first.shape),
                first_row=first_row, dp_rank=mesh.get_local_rank("dp"),
                tp_rank=mesh.get_local_rank("tp"),
                local_parameters=sum(p.to_local().numel() for p in model.parameters()),
                whole_parameters=sum(p.numel() for p in whole.parameters()))
    say(rank, f"(dp {mesh.get_local_rank('dp')}, tp {mesh.get_local_rank('tp')}) holds "
              f"rows {first_row} to {first_row + len(mine_of_up) - 1} of up.weight's "
              f"{len(first)}")


# --- the same split at 64 ranks, in one process -----------------------------------------


def rank_0_of(degree: int, args):
    """Be rank 0 of ``degree`` ranks on the fake backend, run ``scaling``'s split MLPs
    forward and backward, and count the collectives of that step."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode

    dist.init_process_group("fake", rank=0, world_size=degree)  # no other rank needed
    mesh = init_device_mesh("cpu", (degree,))
    torch.manual_seed(0)
    layers = nn.Sequential(*[tensor_parallel(MLP(args.width, args.hidden), mesh)
                             for _ in range(args.layers)])
    x = batch(args, torch.device("cpu")).requires_grad_()
    with CommDebugMode() as comm:  # collectives return at once, sending nothing
        layers(x).square().mean().backward()
    dist.destroy_process_group()
    return layers, x, comm


def at_scale(args, events: Events) -> None:
    """For each degree t, this process is rank 0 of a job of t ranks (``rank_0_of``), and
    notes what the step handed to collectives: every call, shape and count is the real
    job's, for any t."""
    for degree in args.degrees:
        with HandedToCollectives() as handed:
            layers, x, comm = rank_0_of(degree, args)
        events.emit("main", "at_scale", degree=degree, layers=args.layers,
                    collectives=counts(comm), handed_bytes=handed.bytes,
                    activation_bytes=x.numel() * x.element_size(),
                    local_parameters=sum(p.to_local().numel() for p in layers.parameters()))
        say_main(f"degree {degree:2}: {sum(counts(comm).values())} collectives, "
                 f"{handed.bytes / 2**10:.0f} KiB handed to them")


class HandedToCollectives(TorchDispatchMode):
    """Within the block, ``bytes``: the sizes of the tensors this process hands to DTensor's
    collectives (on the fake backend, nothing leaves it; what a real rank would send follows
    from the algorithm, a ring all-reduce's 2(t-1)/t of each)."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    COLLECTIVES = {"all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor",
                   "all_to_all_single", "broadcast"}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "_c10d_functional" and \
                func.__name__.split(".")[0] in self.COLLECTIVES:
            self.bytes += args[0].numel() * args[0].element_size()
        return func(*args, **(kwargs or {}))


# --- the job ----------------------------------------------------------------------------

DEMOS = {"mlp": mlp, "placements": placements, "scaling": scaling,
         "loss": vocabulary_loss, "sequence": sequence, "mesh-2d": mesh_2d}


def rank_main(rank: int, job: Job, args) -> None:
    share_cores(job.world_size)
    events = Events(args.events)
    with joined(job, rank) as device:
        DEMOS[args.demo](rank, args, device, events)


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.tensor_parallel",
                    description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    split = demos.add_parser("mlp", help="an MLP split with parallelize_module, checked")
    moves = demos.add_parser("placements", help="what each redistribute costs")
    grows = demos.add_parser("scaling", help="bytes per layer against the degree")
    grows.add_argument("--degrees", type=positive_int, nargs="+", metavar="T",
                       help="tensor-parallel degrees, each dividing the world size "
                            "(default: every one)")
    grows.add_argument("--layers", type=positive_int, default=4,
                       help="MLP blocks stacked (default 4)")
    losses = demos.add_parser("loss", help="a vocabulary-split head: loss_parallel, bytes")
    losses.add_argument("--vocabulary", type=positive_int, default=8192,
                        help="output classes, split over the ranks (default 8192)")
    simulated = demos.add_parser(
        "at-scale", help="one rank of up to 64 on the fake backend, in this process")
    simulated.add_argument("--degrees", type=positive_int, nargs="+", metavar="T",
                           default=[1, 2, 4, 8, 16, 32, 64],
                           help="tensor-parallel degrees to play rank 0 of "
                                "(default 1 2 4 8 16 32 64)")
    simulated.add_argument("--layers", type=positive_int, default=4,
                           help="MLP blocks stacked (default 4)")
    sequential = demos.add_parser(
        "sequence", help="sequence parallelism against tensor parallelism alone")
    two_d = demos.add_parser("mesh-2d", help="FSDP2 x tensor parallel on a 2-D mesh, "
                                             "trained and checked against one process")
    two_d.add_argument("--tp", type=positive_int, default=2,
                       help="ranks in a row of the mesh, the tensor-parallel degree "
                            "(default 2); the rows are FSDP2's data-parallel ranks")
    two_d.add_argument("--steps", type=positive_int, default=3,
                       help="SGD steps (default 3)")
    two_d.add_argument("--lr", type=float, default=0.1, help="learning rate (default 0.1)")
    for demo, width, tokens in ((split, 256, 64), (moves, 512, 512), (grows, 256, 64),
                                (losses, 64, 256), (sequential, 256, 256),
                                (two_d, 64, 32)):
        demo.add_argument("--width", type=positive_int, default=width,
                          help=f"features in and out of the MLP (default {width})")
        demo.add_argument("--hidden", type=positive_int,
                          help="hidden features (default 4 x width)")
        demo.add_argument("--tokens", type=positive_int, default=tokens,
                          help=f"tokens in the batch (default {tokens})")
        add_job_options(demo)
        add_common_options(demo, timeout=60)
    simulated.add_argument("--width", type=positive_int, default=256,
                           help="features in and out of the MLP (default 256)")
    simulated.add_argument("--hidden", type=positive_int,
                           help="hidden features (default 4 x width)")
    simulated.add_argument("--tokens", type=positive_int, default=64,
                           help="tokens in the batch (default 64)")
    add_common_options(simulated, timeout=60)
    return parser


def check_sizes(args, world_size: int) -> None:
    """One line for a split that cannot be made evenly: a degree that does not divide the
    world size, or the tokens or the features it splits."""
    args.hidden = args.hidden or 4 * args.width
    if args.demo == "scaling":
        args.degrees = args.degrees or [t for t in range(1, world_size + 1)
                                        if world_size % t == 0]
        for degree in args.degrees:
            if world_size % degree:
                fail(f"a tensor-parallel degree of {degree} does not divide the world "
                     f"size {world_size}")
    if args.demo == "mesh-2d":
        if world_size % args.tp:
            fail(f"a tensor-parallel degree of {args.tp} does not divide the world size "
                 f"{world_size}: the mesh has rows of --tp ranks")
        if args.tokens % (world_size // args.tp):
            fail(f"the {world_size // args.tp} rows of the mesh cannot share {args.tokens} "
                 "tokens evenly: choose --tokens they divide")
    degrees = {"scaling": getattr(args, "degrees", None),
               "at-scale": getattr(args, "degrees", None),
               "mesh-2d": [getattr(args, "tp", 1)]}.get(args.demo) or [world_size]
    split = {"placements": ("width", args.width),
             "loss": ("vocabulary", getattr(args, "vocabulary", 0))}.get(
                 args.demo, ("hidden", args.hidden))
    for degree in degrees:
        if args.demo in ("placements", "sequence") and args.tokens % degree:
            fail(f"a tensor-parallel degree of {degree} does not divide the {args.tokens} "
                 "tokens to split (--tokens): choose sizes it divides")
        if split[1] % degree:
            what = {"placements": "--width", "loss": "--vocabulary"}.get(args.demo,
                                                                         "--hidden")
            fail(f"a tensor-parallel degree of {degree} does not divide the {split[1]} "
                 f"features to split ({what}): choose sizes it divides")


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    events = open_events(args.events)
    if args.demo == "at-scale":  # no ranks to start: this process plays each job's rank 0
        check_sizes(args, max(args.degrees))
        at_scale(args, events)
        return 0
    job = job_from_args(parser, args, least=1)
    check_sizes(args, job.world_size)
    return run_ranks(job, rank_main, args, preload=PRELOAD)


if __name__ == "__main__":
    exit_now(main())
