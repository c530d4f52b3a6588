"""Splitting a layer: tensor parallelism. An MLP split by columns then rows with DTensor's
``parallelize_module``, its collectives counted and its results checked against the whole
MLP; what each change of placement (Shard, Replicate, Partial) costs; and the bytes a
layer sends as the tensor-parallel degree grows.

    python -m workers.tensor_parallel mlp
    python -m workers.tensor_parallel placements --world-size 4
    python -m workers.tensor_parallel scaling --world-size 4
    python -m workers.tensor_parallel loss
    torchrun --standalone --nproc-per-node 2 -m workers.tensor_parallel mlp

gloo on the CPU, nccl with one GPU per rank (bytes on the wire: measured on the CPU only).
"""

import sys

import torch
import torch.distributed as dist
from torch import nn

from workers import PRELOADS
from workers.job import Job, add_job_options, job_from_args, joined, run_ranks, share_cores
from workers.ranks import (
    Events,
    Parser,
    add_common_options,
    fail,
    open_events,
    positive_int,
    say,
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


# --- measuring: collectives counted, bytes written --------------------------------------


def counts(comm) -> dict[str, int]:
    """CommDebugMode's counts as ``{"all_reduce": 1}``: the collective's name without its
    namespace (``c10d_functional.all_reduce``)."""
    return {str(op).split(".")[-1]: n for op, n in comm.get_comm_counts().items() if n}


def batch(args, device) -> torch.Tensor:
    """The same inputs on every rank of a tensor-parallel group: each sees every token."""
    generator = torch.Generator().manual_seed(1)
    return torch.randn(args.tokens, args.width, generator=generator).to(device)


def largest_difference(pairs) -> float:
    return max((mine - theirs).abs().max().item() for mine, theirs in pairs)


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
                placements=placements, output_is_dtensor=isinstance(out, DTensor))
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


# --- the job ----------------------------------------------------------------------------

DEMOS = {"mlp": mlp, "placements": placements, "scaling": scaling,
         "loss": vocabulary_loss}


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
    for demo, width, tokens in ((split, 256, 64), (moves, 512, 512), (grows, 256, 64),
                                (losses, 64, 256)):
        demo.add_argument("--width", type=positive_int, default=width,
                          help=f"features in and out of the MLP (default {width})")
        demo.add_argument("--hidden", type=positive_int,
                          help="hidden features (default 4 x width)")
        demo.add_argument("--tokens", type=positive_int, default=tokens,
                          help=f"tokens in the batch (default {tokens})")
        add_job_options(demo)
        add_common_options(demo, timeout=60)
    return parser


def check_sizes(args, world_size: int) -> None:
    """One line for a split that cannot be made evenly: a degree that does not divide the
    world size, or the features it splits."""
    args.hidden = args.hidden or 4 * args.width
    if args.demo == "scaling":
        args.degrees = args.degrees or [t for t in range(1, world_size + 1)
                                        if world_size % t == 0]
        for degree in args.degrees:
            if world_size % degree:
                fail(f"a tensor-parallel degree of {degree} does not divide the world "
                     f"size {world_size}")
    degrees = args.degrees if args.demo == "scaling" else [world_size]
    split = {"mlp": ("hidden", args.hidden), "scaling": ("hidden", args.hidden),
             "placements": ("width", args.width),
             "loss": ("vocabulary", getattr(args, "vocabulary", 0))}[args.demo]
    for degree in degrees:
        if split[1] % degree or (args.demo == "placements" and args.tokens % degree):
            what = {"placements": "--tokens and --width", "loss": "--vocabulary"}.get(
                args.demo, "--hidden")
            fail(f"a tensor-parallel degree of {degree} does not divide the {split[1]} "
                 f"features to split ({what}): choose sizes it divides")


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    open_events(args.events)
    job = job_from_args(parser, args, least=1)
    check_sizes(args, job.world_size)
    return run_ranks(job, rank_main, args, preload=PRELOAD)


if __name__ == "__main__":
    sys.exit(main())
