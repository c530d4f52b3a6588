"""Lab zero1 (sharding): a ZeRO-1 optimizer step: Adam state sharded over the ranks.

Every rank trains the same small float64 tower on its own data with the reader's step;
rank 0 also trains it in one process on every rank's data with a whole Adam, which is
what DDP computes. After three steps the weights must equal that to 1e-10 on every rank,
and the Adam state (exp_avg and exp_avg_sq) the ranks hold must add up to one copy, split
evenly: each rank 1/N of it, give or take the padding (a split by whole parameters can
leave most of it on one rank, and fails). The checker finds the optimizers in each
rank's memory (the garbage collector's list of objects): instrumentation, not lesson
code. PyTorch's ZeroRedundancyOptimizer is what the lab builds by hand, and fails. The
tower's width, the learning rate, the weights and the data are random, from the seed.

The contract (labs/zero1.py), clause by clause, and what checks each:

- After each step the weights are DDP's with Adam: compared with one process on every
  rank's data, float64.
- The Adam state is sharded: each rank holds at most its 1/N of every parameter (padded),
  exactly; together no more than one copy and its padding (a small parameter kept whole
  on every rank fails: at 3 ranks the last bias has 2 values); none on any rank fails
  too.
- An even split, not whole parameters dealt round the ranks: the share each rank holds.
- No value's state kept twice: every non-zero first moment (exp_avg) of every rank's
  optimizers, compared across ranks; after three steps on random data each weight's is a
  number of its own, so parts that overlap (a last part slid back inside the tensor to
  avoid padding) hold some twice, where padding's are zeros.
- The How is one way: any split that meets the above passes (parts that differ by one
  value, another assignment of parts to ranks).
- One torch.optim.Adam, made once: the optimizers the reader's code makes, and when.
- Only the collectives named (their list forms too), the same on every rank; not
  ZeroRedundancyOptimizer.
- World sizes 2 and 3, widths and learning rates drawn from the seed.
- The caller clears the gradients before each backward (parameter.grad = None).
- Any gradient, zeros included: one step where one rank's inputs are zeros and its loss
  is weighed 0, so every gradient of that rank is all zeros; the collectives are every
  rank's. And a later step where every rank's loss weighs 0: the whole gradient is
  zeros, and Adam still steps (its moments carry the weights on).
"""

from __future__ import annotations

from workers.labs.harness import FAMILIES, Finding, forbidden_finding, wait_findings

CHAPTER = "sharding"
FUNCTION = "zero1_optimizer"
ASKS = "a ZeRO-1 step: weights equal DDP's with Adam, Adam state 1/N per rank"
REREAD = '"ZeRO by hand, and the book\'s worker" in the sharding chapter'
PASSED = "is ZeRO-1: DDP's weights, 1/N of the Adam state per rank"
WORLD_SIZES = (2, 3)  # the page runs 2 and 4 ranks
GROUP = True
PRELOAD = ("torch._dynamo",)
TIMEOUT = 10.0
STEPS = 3
TOLERANCE = 1e-10
ALLOWED = (*FAMILIES["reduce_scatter"], *FAMILIES["all_gather"], *FAMILIES["all_reduce"],
           "broadcast")


def setup(world_size: int, rng) -> dict:
    # one step where one rank's inputs are zeros and its loss weighs 0: every gradient of
    # that rank is all zeros there, and the collectives must still be every rank's
    zeros = rng.randrange(STEPS - 1)  # before the step where every rank's loss weighs 0
    return {"seed": rng.randrange(1_000_000), "width": rng.randint(9, 17),
            "lr": rng.choice([0.005, 0.01, 0.02]),
            "zeros": [zeros, rng.randrange(world_size)],
            "silent": rng.randrange(zeros + 1, STEPS),  # every rank's loss weighs 0
            # at 3 ranks the last bias has 2 values, fewer than the ranks: its padded parts
            # are 1 a rank, and kept whole on every rank its state is more than one copy
            "out": 2 if world_size == 3 else 4}


def describe(world_size: int, given: dict) -> str:
    return f", {STEPS} Adam steps"


def tower(given: dict):
    import torch
    from torch import nn

    torch.manual_seed(given["seed"])
    width = given["width"]
    return nn.Sequential(nn.Linear(8, width), nn.Tanh(), nn.Linear(width, width),
                         nn.Tanh(), nn.Linear(width, given.get("out", 4))).double()


def inputs(given: dict, rank: int, step: int):
    import torch

    if [step, rank] == given.get("zeros"):
        return torch.zeros(6, 8, dtype=torch.float64)
    generator = torch.Generator().manual_seed(given["seed"] + 1000 * step + rank)
    return torch.randn(6, 8, generator=generator, dtype=torch.float64)


def weight(given: dict, rank: int, step: int) -> float:
    """A rank's loss as it is, but 0 at "zeros" (every gradient of that rank all zeros)
    and at every rank's step "silent" (the whole gradient zeros)."""
    return 0.0 if [step, rank] == given.get("zeros") or step == given.get("silent") \
        else 1.0


def optimizers() -> list:
    import gc

    import torch

    return [o for o in gc.get_objects() if issubclass(type(o), torch.optim.Optimizer)]


def adam_state_values() -> int:
    """How many numbers the optimizers in this process hold as state (steps not counted)."""
    import torch

    return sum(value.numel() for optimizer in optimizers()
               for state in optimizer.state.values()
               for key, value in state.items()
               if isinstance(value, torch.Tensor) and key != "step")


def single(world_size: int, given: dict, scale: float = 1.0, skip_silent: bool = False,
           lagging: bool = False, busy_only: bool = False):
    """One process, every rank's inputs at once, a whole Adam: DDP's computation.
    ``scale``: the gradients times this (N: summed over ranks instead of averaged);
    ``skip_silent``: no Adam step where the whole gradient is zeros (a mistake's);
    ``lagging``: Adam steps a copy of its own, copied into the model before each step
    rather than after it (a mistake's: the model is a step behind its optimizer);
    ``busy_only``: the sum divided by the number of ranks whose gradient is not all zeros
    (a mistake's), not by N."""
    import torch

    model = tower(given)
    stepped = tower(given) if lagging else model
    optimizer = torch.optim.Adam(stepped.parameters(), lr=given["lr"])
    for step in range(STEPS):
        optimizer.zero_grad()
        model.zero_grad()
        # DDP's mean over the ranks of each rank's loss, one rank's weighed 0 at "zeros"
        loss = sum(model(inputs(given, rank, step)).pow(2).mean() *
                   weight(given, rank, step) for rank in range(world_size)) / world_size
        if busy_only and step == given["zeros"][0] and step != given.get("silent"):
            loss = loss * world_size / (world_size - 1)
        (loss * scale).backward()
        if lagging:
            with torch.no_grad():
                for own, shown in zip(stepped.parameters(), model.parameters()):
                    own.grad = shown.grad.clone()
                    shown.copy_(own)  # gathered before the step
        if not (skip_silent and step == given.get("silent")):
            optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def first_moments(optimizers_made: list) -> list[float]:
    """Every non-zero ``exp_avg`` value the reader's optimizers hold: after three steps on
    random data each weight's is its own number, so two ranks holding the same one keep
    one value's state twice (padding's are zeros, left out)."""
    import torch

    return sorted(value for optimizer in optimizers_made
                  for state in optimizer.state.values()
                  if isinstance(state.get("exp_avg"), torch.Tensor)
                  for value in state["exp_avg"].detach().reshape(-1).tolist() if value != 0)


def twice_kept(results: dict) -> tuple | None:
    """Two ranks whose optimizers hold the same first moment (to 1e-12 of it): ``(rank,
    rank, value)``, or None."""
    held = sorted((value, rank) for rank, result in results.items()
                  for value in result["moments"])
    for (a, rank_a), (b, rank_b) in zip(held, held[1:]):
        if rank_a != rank_b and abs(a - b) <= 1e-12 * max(abs(a), abs(b)):
            return min(rank_a, rank_b), max(rank_a, rank_b), a
    return None


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    import torch

    model = tower(given)
    before = adam_state_values()
    made = []  # each optimizer the reader's code makes, and in which call
    theirs = []  # and the optimizers themselves, to read their state
    optimizer_init = torch.optim.Optimizer.__init__

    def noted_init(optimizer, *args, **kwargs):
        made.append((type(optimizer).__name__, phase[0]))
        theirs.append(optimizer)
        return optimizer_init(optimizer, *args, **kwargs)

    phase = ["zero1_optimizer"]
    shared = []  # Adam steps whose .grad tensors share memory: the last write wins
    adam_step = torch.optim.Adam.step

    def looked_step(optimizer, *args, **kwargs):
        shared.extend(sharing_grads(optimizer)[:1])
        return adam_step(optimizer, *args, **kwargs)

    torch.optim.Optimizer.__init__ = noted_init
    torch.optim.Adam.step = looked_step
    try:
        with calls.reader():
            step = solution(model, given["lr"])
        if not callable(step):
            raise TypeError(f"zero1_optimizer returned {type(step).__name__}, not a "
                            f"function step()")
        for s in range(STEPS):
            for parameter in model.parameters():
                parameter.grad = None
            loss = model(inputs(given, rank, s)).pow(2).mean() * weight(given, rank, s)
            loss.backward()
            phase[0] = "step()"
            with calls.reader():
                step()
    finally:
        torch.optim.Optimizer.__init__ = optimizer_init
        torch.optim.Adam.step = adam_step
    dtypes = sorted({str(value.dtype).removeprefix("torch.") for optimizer in optimizers()
                     for state in optimizer.state.values() for key, value in state.items()
                     if isinstance(value, torch.Tensor) and key != "step"})
    result = {"made": made, "state_dtypes": dtypes, "shared": shared[:1],
              "weights": [p.detach().clone() for p in model.parameters()],
              "state": adam_state_values() - before,
              "values": sum(p.numel() for p in model.parameters()),
              "tensors": len(list(model.parameters())),
              "numels": [p.numel() for p in model.parameters()],
              "optimizers": sorted({type(o).__name__ for o in optimizers()}),
              "moments": first_moments(theirs)}
    if rank == 0:
        result["single"] = single(world_size, given)
        result["summed"] = single(world_size, given, scale=world_size)
        result["halved"] = single(world_size, given, scale=1 / world_size)
        result["skipped"] = single(world_size, given, skip_silent=True)
        result["behind"] = single(world_size, given, lagging=True)
        result["busy_only"] = single(world_size, given, busy_only=True)
        result["initial"] = [p.detach().clone() for p in tower(given).parameters()]
    return result


def per_rank(rank: int, result: dict, given: dict) -> str:
    return f"Adam state {result['state']} numbers"


def largest_difference(weights, others) -> float:
    return max((a - b).abs().max().item() for a, b in zip(weights, others))


def sharing_grads(optimizer) -> list:
    """Two parameters of the optimizer whose .grad tensors overlap in memory, as (i, j)."""
    spans = []
    for index, parameter in enumerate(p for group in optimizer.param_groups
                                      for p in group["params"]):
        grad = parameter.grad
        if grad is None or grad.numel() == 0:
            continue
        start = grad.data_ptr()
        end = start + grad.element_size() * (1 + sum((size - 1) * abs(stride) for size,
                                                     stride in zip(grad.shape,
                                                                   grad.stride())))
        for other, (first, last) in spans:
            if start < last and first < end:
                return [(other, index)]
        spans.append((index, (start, end)))
    return []


def never_moved(first: dict, n: int) -> str:
    """Values that kept their first weights where DDP's moved: in no rank's part."""
    for index, (now, was, ddp) in enumerate(zip(first["weights"], first["initial"],
                                                 first["single"])):
        kept = ((now == was) & (ddp != was)).flatten()
        if kept.any():
            where = kept.nonzero().flatten().tolist()
            numel = now.numel()
            tail = where == list(range(numel - len(where), numel))
            return (f"{len(where)} of parameter {index}'s {numel} values "
                    f"({f'its last {len(where)}' if tail else f'at {where[:4]}'}) "
                    f"never moved from their first weights: they are in no rank's part"
                    + (f" ({numel} // {n} values a part leaves {numel % n} out): pad to a "
                       f"multiple of N, or give some parts one value more"
                       if tail and numel % n else ""))
    return ""


def which_parameters(first: dict) -> str:
    """Which parameters differ, where some equal DDP's: the mistake is in their path."""
    off = [index for index, (now, ddp) in enumerate(zip(first["weights"], first["single"]))
           if (now - ddp).abs().max().item() > TOLERANCE]
    if len(off) == len(first["weights"]):
        return ""
    return (f"; parameters {off} differ, the others equal DDP's: Adam saw the wrong "
            f"gradient for those (a .grad that another parameter's gradient overwrote, "
            f"as a buffer they share does?)")


def judge(world_size: int, outcome, given: dict) -> list:
    n = world_size
    results = outcome.results
    first = results[0]
    library = sorted({name for r in results.values() for name in r["optimizers"]
                      if name == "ZeroRedundancyOptimizer"})
    if library:
        return [Finding(False, "used PyTorch's ZeroRedundancyOptimizer: this lab builds "
                               "ZeRO-1 by hand (a torch.optim.Adam over this rank's part, "
                               "reduce-scatter the gradients, all-gather the updated "
                               "parts)")]
    forbidden = forbidden_finding(outcome, ALLOWED, "ZeRO-1 needs a reduce-scatter and an "
                                  "all-gather (or all_reduce and broadcast), nothing else")
    if forbidden:
        return [forbidden]
    if not any(call["name"] in (*FAMILIES["reduce_scatter"], *FAMILIES["all_reduce"])
               for call in outcome.all_calls()):
        return [Finding(False, "no rank summed the gradients over the ranks: each stepped "
                               "its part with its own gradient; reduce-scatter them (or "
                               "all_reduce them), then divide by the world size")]
    waits = [finding for finding in wait_findings(outcome) if not finding.held]
    if waits:
        return waits
    apart = max(largest_difference(r["weights"], first["weights"])
                for r in results.values())
    if apart > 0:
        return [Finding(False, f"after a step the ranks' weights differ by up to "
                               f"{apart:.1e}: each rank updated only its own shard; "
                               f"all-gather the updated shards so every rank has them all")]
    findings = []
    off = largest_difference(first["weights"], first["single"])
    other = sorted({name for r in results.values() for name, _ in r["made"]} - {"Adam"})
    renewed = {rank: sum(when == "step()" for _, when in r["made"])
               for rank, r in results.items()}
    dtype = str(first["weights"][0].dtype).removeprefix("torch.")
    aliased = {rank: r["shared"][0] for rank, r in results.items() if r["shared"]}
    if off > TOLERANCE and aliased:
        rank, (i, j) = min(aliased.items())
        return [Finding(False, f"the weights are {off:.1e} from DDP's: when rank {rank}'s "
                               f"Adam stepped, the .grad of its parts {i} and {j} shared "
                               f"memory (views of one buffer), so one part's gradient "
                               f"overwrote the other's: give each part a gradient of its "
                               f"own")]
    if off > TOLERANCE and other:
        return [Finding(False, f"the weights are {off:.1e} from DDP's: the code made "
                               f"torch.optim.{other[0]}, where this lab asks for "
                               f"torch.optim.Adam (AdamW's default weight decay alone "
                               f"moves the weights)")]
    if off > TOLERANCE and any(renewed.values()):
        rank = min(r for r, count in renewed.items() if count)
        return [Finding(False, f"the weights are {off:.1e} from DDP's: rank {rank} made "
                               f"{renewed[rank]} optimizer(s) inside step(), so Adam's "
                               f"moments started again: make one Adam, once, in "
                               f"zero1_optimizer")]
    if off > TOLERANCE and first["state_dtypes"] and dtype not in first["state_dtypes"]:
        return [Finding(False, f"the weights are {off:.1e} from DDP's: Adam's state is "
                               f"{first['state_dtypes'][0]} on a {dtype} model: make the "
                               f"parts in the parameters' dtype (torch.zeros and "
                               f"torch.empty make float32 unless told)")]
    if off > TOLERANCE:
        if largest_difference(first["weights"], first["behind"]) <= TOLERANCE and \
                largest_difference(first["weights"], first["skipped"]) > TOLERANCE:
            return [Finding(False, f"the weights are {off:.1e} from DDP's: they are one "
                                   f"Adam step behind its parts: all-gather the parts "
                                   f"after Adam's step, not before it")]
        if largest_difference(first["weights"], first["summed"]) <= TOLERANCE:
            text = (f"the weights are {off:.1e} from DDP's: they match Adam on gradients "
                    f"summed over the ranks, not averaged: divide by the world size (Adam "
                    f"hides most of the factor, not all of it)")
        elif largest_difference(first["weights"], first["halved"]) <= TOLERANCE:
            text = (f"the weights are {off:.1e} from DDP's: they match Adam on the mean "
                    f"divided by the world size again: divide once (ReduceOp.AVG already "
                    f"divides)")
        elif largest_difference(first["weights"], first["busy_only"]) <= TOLERANCE:
            text = (f"the weights are {off:.1e} from DDP's: they match Adam on the "
                    f"gradients' sum divided by the number of ranks whose gradient was not "
                    f"all zeros, at step {given['zeros'][0] + 1} where one rank's was: "
                    f"DDP divides by the world size, every step, zeros included")
        elif stuck := never_moved(first, n):
            text = (f"the weights are {off:.1e} from DDP's: {stuck}")
        elif largest_difference(first["weights"], first["skipped"]) <= TOLERANCE:
            text = (f"the weights are {off:.1e} from DDP's: they match Adam that skips "
                    f"step {given['silent'] + 1}, where every rank's gradient was all "
                    f"zeros; Adam steps there too (its moments still move the weights)")
        else:
            text = (f"after {STEPS} steps the weights are {off:.1e} from DDP's with Adam "
                    f"(one process, every rank's data){which_parameters(first)}")
        return [Finding(False, text)]
    findings.append(Finding(True, f"after {STEPS} Adam steps every rank's weights equal "
                                  f"DDP's to {off:.0e} (float64)"))
    whole = 2 * first["values"]  # exp_avg and exp_avg_sq for every value
    held = {rank: result["state"] for rank, result in results.items()}
    # exactly what padding each parameter to N equal parts gives, on one rank and on all:
    # no allowance beyond it, where a small parameter kept whole on every rank would hide
    fair = 2 * sum(-(-numel // n) for numel in first["numels"])
    padding = n * fair - whole
    if max(held.values()) >= whole:
        rank = max(held, key=held.get)
        findings.append(Finding(False, f"rank {rank} holds {held[rank]} numbers of Adam "
                                       f"state, the whole {whole} (2 per weight): ZeRO-1 "
                                       f"keeps about 1/N on each rank, {whole // n}"))
    elif sum(held.values()) == 0:
        findings.append(Finding(False, "no rank holds Adam state: build a torch.optim.Adam "
                                       "over this rank's shard"))
    elif sum(held.values()) > whole + padding:
        findings.append(Finding(False, f"the ranks hold {sum(held.values())} numbers of "
                                       f"Adam state together, more than one copy "
                                       f"({whole}, {whole + padding} with each "
                                       f"parameter's padding): a value's state lives on "
                                       f"one rank, a small parameter's too"))
    elif max(held.values()) > fair:
        rank = max(held, key=held.get)
        share = held[rank] / sum(held.values())
        findings.append(Finding(False, f"rank {rank} holds {share:.0%} of the Adam state "
                                       f"({held[rank]} of {sum(held.values())} numbers), "
                                       f"not 1/N: cut each parameter's values (or all of "
                                       f"them, flattened) into N equal parts, not whole "
                                       f"parameters among the ranks"))
    elif twice := twice_kept(results):
        rank_a, rank_b, value = twice
        findings.append(Finding(False, f"ranks {rank_a} and {rank_b} both hold Adam state "
                                       f"for the same weight (exp_avg {value:.6g} on "
                                       f"each): no value's state is kept twice; parts "
                                       f"that overlap share values, padding does not"))
    else:
        shares = ", ".join(f"{held[r]}" for r in sorted(held))
        findings.append(Finding(True, f"Adam state per rank: {shares} numbers, of "
                                      f"{whole} for the whole model (1/N: "
                                      f"{whole / n:.0f})"))
    return findings
