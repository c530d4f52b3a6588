"""Lab average_gradients (ddp_mnist): averaging gradients by hand, proved by one process.

Every rank trains the chapter's MnistNet, in float64, with a scale on its logits that
is a parameter of the model itself (not of a layer), on its share of each global batch
and calls the reader's average_gradients after backward; rank 0 also trains the same
model in one process on the whole batches. Data parallelism is the same computation:
the gradients after the call must be the whole batch's, and the weights after three
steps of SGD with momentum must equal the one process's to 1e-9. Each batch is random
images of MNIST's shape (the proof needs no real digits, and loads none), and so are the
initial weights, from the job's seed. The function may only all-reduce (SUM or AVG),
however it reaches all_reduce: a reduce to rank 0 and a broadcast also average, and fail.

The contract (labs/average_gradients.py), clause by clause, and what checks each:

- Every parameter's .grad holds the mean over the ranks, on every rank: the gradients of
  the first step against one process on the whole batch, and the weights after training;
  every parameter of model.parameters(), the one the model holds itself (model.scale) too,
  which a loop over the model's layers misses.
- Whatever the gradients' values: in one step one rank's images are zeros, so some of its
  gradients are zeros and must still be all-reduced (a job that dies from mismatched
  all_reduce sizes says so).
- Every parameter, whatever its layout: at 3 ranks the model is channels_last, so its
  convolutions' weights and gradients are not contiguous in the default order (reshape
  or contiguous() copies them, and a result written into the copy is lost).
- all_reduce only, with SUM or AVG: other collectives and ops fail.
- async_op=True is waited for before the tensor is touched: every Work followed (gloo's
  AVG, which divides when the sum arrives, is told apart from a change by the reader).
- The weights and the optimizer left alone: the weights are compared with one process's.
"""

from __future__ import annotations

from workers.labs.harness import Finding, forbidden_finding, list_of, wait_findings

CHAPTER = "ddp_mnist"
FUNCTION = "average_gradients"
ASKS = "average_gradients after backward: N ranks train exactly like one (float64)"
REREAD = '"Part 1: averaging gradients by hand" in the data-parallel MNIST chapter'
PASSED = "averages the gradients: the ranks train exactly as one process"
WORLD_SIZES = (2, 3)  # the page runs 2 ranks
GROUP = True
PRELOAD = ("torch._dynamo", "workers.mnist")
TIMEOUT = 10.0
BATCH = 12  # images per global batch: every world size here divides it
STEPS = 3
TOLERANCE = 1e-9


def setup(world_size: int, rng) -> dict:
    # in one step one rank's images are all zeros: its first layer's weight gets a
    # gradient of zeros there, and still takes part in the average (not in the first
    # step, whose gradients are compared one by one: there a zero would make a rank's own
    # gradient equal to the sum)
    step, rank = rng.randrange(1, STEPS), rng.randrange(world_size)
    return {"seed": rng.randrange(1_000_000),
            "zeros": [step, rank * BATCH // world_size, (rank + 1) * BATCH // world_size],
            "channels_last": world_size == 3}


def describe(world_size: int, given: dict) -> str:
    layout = ", the model channels_last" if given["channels_last"] else ""
    return f", {BATCH // world_size} images per rank and step{layout}"


def batch(seed: int, step: int, zeros=None):
    import torch

    generator = torch.Generator().manual_seed(seed + step)
    images = torch.randn(BATCH, 1, 28, 28, generator=generator, dtype=torch.float64)
    if zeros and step == zeros[0]:
        images[zeros[1]:zeros[2]] = 0
    return images, torch.randint(0, 10, (BATCH,), generator=generator)


def train(rank: int, world_size: int, seed: int, between=None, zeros=None,
          channels_last: bool = False):
    """The chapter's training loop on rank ``rank``'s share of each batch; ``between``
    runs after backward (the reader's function, on the ranks). Returns the gradients of
    the first step, before and after ``between``, and the final weights."""
    import torch
    import torch.nn.functional as F

    from workers.mnist import MnistNet

    torch.manual_seed(seed)  # the same initial weights on every rank
    model = MnistNet().double()
    # and a parameter of the model's own, not of a layer: a scale on each logit
    model.scale = torch.nn.Parameter(torch.ones(10, dtype=torch.float64))
    if channels_last:  # the convolutions' weights, and their gradients, in NHWC order
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    share = slice(rank * BATCH // world_size, (rank + 1) * BATCH // world_size)
    first = {}
    for step in range(STEPS):
        images, labels = batch(seed, step, zeros)
        optimizer.zero_grad()
        F.cross_entropy(model(images[share]) * model.scale, labels[share]).backward()
        if step == 0:
            first["own"] = [p.grad.clone() for p in model.parameters()]
        if between is not None:
            between(model)
        if step == 0:
            first["after"] = [p.grad.clone() for p in model.parameters()]
        optimizer.step()
    names = [name for name, _ in model.named_parameters()]
    return names, first, [p.detach().clone() for p in model.parameters()]


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    moved = []  # the parameters whose weights the function changed, bit for bit

    def averaged(model):
        before = [p.detach().clone() for p in model.parameters()]
        with calls.reader():
            solution(model)
        moved.extend(name for (name, p), b in zip(model.named_parameters(), before)
                     if not p.detach().equal(b) and name not in moved)

    names, first, weights = train(rank, world_size, given["seed"], averaged,
                                  given["zeros"], given["channels_last"])
    result = {"names": names, "own": first["own"], "after": first["after"],
              "weights": weights, "moved": moved}
    if rank == 0:  # one process, the whole batch: what the ranks must equal
        _, single, single_weights = train(0, 1, given["seed"], zeros=given["zeros"],
                                          channels_last=given["channels_last"])
        result["single_gradients"], result["single_weights"] = single["own"], single_weights
    return result


def close(a, b) -> bool:
    import torch

    return torch.allclose(a, b, rtol=TOLERANCE, atol=TOLERANCE)


def judge(world_size: int, outcome, given: dict) -> list:
    n = world_size
    calls = outcome.all_calls()
    if {"reduce", "broadcast"} <= {call["name"] for call in calls}:
        return [Finding(False, "called reduce and broadcast: the mean reaches every rank, "
                               "through rank 0, which receives and sends N-1 whole copies; "
                               "this lab averages with all_reduce only")]
    forbidden = forbidden_finding(outcome, ("all_reduce",), "this lab averages with "
                                  "dist.all_reduce only (ReduceOp.SUM, then / world size, "
                                  "or ReduceOp.AVG)")
    if forbidden:
        return [forbidden]
    odd = next((call for call in calls if call["op"] not in (None, "SUM", "AVG")), None)
    if odd:
        return [Finding(False, f"an all_reduce used ReduceOp.{odd['op']}: the mean is a "
                               f"sum divided by the world size (ReduceOp.SUM, then / N, or "
                               f"ReduceOp.AVG)")]
    waits = [finding for finding in wait_findings(outcome) if not finding.held]
    if waits:
        return waits
    single = outcome.results[0]
    kinds = {}
    for rank, result in sorted(outcome.results.items()):
        for name, got, own, want in zip(result["names"], result["after"], result["own"],
                                        single["single_gradients"]):
            if close(got, want):
                kind = "mean"
            elif close(got, want * n):
                kind = "sum"
            elif close(got, want / n):
                kind = "twice"
            elif close(got, own):
                kind = "own"
            elif rounded(got, want):  # float32's digits only
                kind = "rounded"
            elif close(got, want * scale(got, want)):
                kind = f"times {scale(got, want):.3g}"
            else:
                kind = "wrong"
            kinds.setdefault(kind, []).append(f"{name} (rank {rank})")
    if set(kinds) != {"mean"}:
        strided = {name for name, own in zip(single["names"], single["own"])
                   if not own.is_contiguous()}  # channels_last convolutions' gradients
        return [Finding(False, gradient_mistake(kinds, n, strided))]
    for rank, result in sorted(outcome.results.items()):
        if result["moved"]:
            return [Finding(False, f"rank {rank}'s weights changed inside "
                                   f"average_gradients ({list_of(result['moved'][:3])}): "
                                   f"it averages each .grad and leaves the weights to the "
                                   f"optimizer (even an average of equal weights can move "
                                   f"their last bit)")]
    findings = [Finding(True, "after average_gradients, every gradient is the whole "
                              "batch's, as one process computes it")]
    worst = max((w - s).abs().max().item()
                for result in outcome.results.values()
                for w, s in zip(result["weights"], single["single_weights"]))
    if worst > TOLERANCE:
        findings.append(Finding(False, f"after {STEPS} steps the weights differ from one "
                                       f"process's by {worst:.1e}: does the function do "
                                       f"more than average the gradients?"))
    else:
        findings.append(Finding(True, f"after {STEPS} steps of SGD with momentum, every "
                                      f"rank's weights equal one process's to {worst:.0e} "
                                      f"(float64)"))
    return findings


def rounded(a, b) -> bool:
    """Equal to float32's precision, where not to float64's (``close``)."""
    import torch

    return torch.allclose(a, b, rtol=1e-5, atol=1e-7)


def scale(got, want) -> float:
    """The number that ``want`` times best gives ``got``."""
    norm = (want * want).sum().item()
    return (got * want).sum().item() / norm if norm else 0.0


def gradient_mistake(kinds: dict, n: int, strided: set = frozenset()) -> str:
    every = {item.split(" (")[0] for items in kinds.values() for item in items}

    def names(kind):
        found = sorted({item.split(" (")[0] for item in kinds[kind]})
        return "every parameter" if set(found) == every else "the gradients of " + \
            list_of(found[:4]) + (" ..." if len(found) > 4 else "")

    if "sum" in kinds:
        return (f"{names('sum')}: the sum over the {n} ranks, not the mean: divide by the "
                f"world size (all_reduce sums)")
    if "twice" in kinds:
        return (f"{names('twice')}: the mean divided by {n} again: averaged twice "
                f"(ReduceOp.AVG already divides, or / world_size twice)")
    if "own" in kinds and strided and \
            {item.split(" (")[0] for item in kinds["own"]} <= strided:
        return (f"{names('own')}: not averaged, still this rank's own gradient (a "
                f"channels_last gradient is not contiguous: reshape(-1) or contiguous() "
                f"gives a copy, and a mean written into the copy never reaches the .grad; "
                f"all-reduce the .grad itself, or copy the mean back into it)")
    if "own" in kinds:
        whole = names("own") == "every parameter"
        return (f"{names('own')}: not averaged, still this rank's own gradient" +
                (" (the all_reduce must write into each parameter's .grad itself: not into "
                 "its .data, nor into a copy)" if whole else
                 " (average every parameter, biases too)"))
    if "rounded" in kinds:
        return (f"{names('rounded')}: the mean to float32's precision only, not to the "
                f"float64 gradients' own: average each .grad in its own dtype (a float32 "
                f"buffer or copy rounds it)")
    scaled = next((kind for kind in kinds if kind.startswith("times ")), None)
    if scaled:
        return (f"{names(scaled)}: the mean {scaled}: divide the sum by the world size, "
                f"{n} here (dist.get_world_size(), not a number written in)")
    return f"{names('wrong')}: not the mean over the ranks"


def explain(world_size: int, outcome, given: dict) -> list:
    """A job that ended early: did the ranks make different all_reduce calls (one rank
    skipping a gradient, a zero one say), so that gloo met tensors of different sizes?"""
    import re

    made = {rank: [int(m.group(1)) for line in lines
                   for m in [re.match(r"enter \d+ all_reduce\((\d+) bytes", line)] if m]
            for rank, lines in outcome.logs.items()}
    if len(made) < 2:
        return []
    for index in range(max(len(sizes) for sizes in made.values())):
        here = {rank: sizes[index] if index < len(sizes) else None
                for rank, sizes in sorted(made.items())}
        if len(set(here.values())) > 1:
            said = ", ".join(f"rank {rank} {size} bytes" if size is not None else
                             f"rank {rank} none" for rank, size in here.items())
            zeros = (f" (in step {given['zeros'][0] + 1} one rank's images were all "
                     f"zeros, so some of its gradients were zeros too)")
            return [f"the ranks' all_reduce number {index + 1} differed ({said}): every "
                    f"rank must all-reduce every gradient, in the same order, whatever "
                    f"its values{zeros}"]
    return []
