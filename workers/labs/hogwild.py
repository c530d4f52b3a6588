"""Lab hogwild (hogwild): a training loop on parameters in shared memory.

The parent makes one model, nn.Linear(4M, 1) with zero weights, and puts it in shared
memory; M processes run the reader's loop on it at once, without locks. Process r's
inputs are zero outside columns 4r..4r+3, so its gradients touch only its own block of
the weights, and that block must end where process r alone would have taken it, as the
parent sees the shared model afterwards. A process that trained a copy, or replaced the
shared tensors with new ones, leaves the parent's model unchanged. (Hogwild tolerates
lost updates: a block may be off by a rare race, so the check allows 5%.) The targets
carry noise, and every input is random (from the seed), as are the number of steps and
the learning rate; the checker also sees each forward pass (a hook on the model) and
counts the updates of the weight, so a process that skips a batch, takes them in another
order, or steps other than once per batch is named however close its weights land.

The contract (labs/hogwild.py), clause by clause, and what checks each:

- Every step of every process lands in the shared parameters: each process's block of
  the weights against one process trained alone on its batches (5% allowed for races).
- One SGD step per pair, in order: a forward hook sees each batch, the weight's updates
  are counted.
- In place, no copy, no new tensors: the parent's model, seen after the processes end.
- No momentum, the lr given: the weights one plain SGD gives; the steps and the lr drawn.
"""

from __future__ import annotations

from workers.labs.harness import Finding, list_of

CHAPTER = "hogwild"
FUNCTION = "hogwild_train"
ASKS = "a Hogwild loop: every process's SGD steps land in the one shared model"
REREAD = ('"A complete program" and "The parameters really are shared" in the Hogwild '
          'chapter')
PASSED = "trains the shared model: every process's steps landed"
WORLD_SIZES = (2, 4)  # processes; the page runs 2 and 3
GROUP = False  # processes sharing memory, not a process group
UNITS = "processes"
PRELOAD = ("torch._dynamo",)
TIMEOUT = 10.0
BLOCK = 4
RELATIVE = 0.05
NOISE = 1.0  # the targets' noise, against a signal of about 2


def setup(world_size: int, rng) -> dict:
    import torch
    from torch import nn

    model = nn.Linear(BLOCK * world_size, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    model.share_memory()
    return {"model": model, "seed": rng.randrange(1_000_000), "steps": rng.randint(10, 16),
            "lr": rng.choice([0.05, 0.08, 0.1, 0.12])}


def describe(world_size: int, given: dict) -> str:
    return f", {given['steps']} steps each, lr {given['lr']:g}"


def batches(rank: int, world_size: int, given: dict) -> list:
    """Process ``rank``'s (inputs, targets): zero outside its own block of columns."""
    import torch

    generator = torch.Generator().manual_seed(given["seed"] + rank)
    target = torch.randn(BLOCK, generator=generator)
    found, mine = [], slice(BLOCK * rank, BLOCK * (rank + 1))
    for _ in range(given["steps"]):
        inputs = torch.zeros(8, BLOCK * world_size)
        inputs[:, mine] = torch.randn(8, BLOCK, generator=generator)
        noise = NOISE * torch.randn(8, 1, generator=generator)
        found.append((inputs, inputs[:, mine] @ target[:, None] + noise))
    # one batch of zeros, whose loss is exactly 0 whatever the weights: a batch like any
    # other, its step (of a zero gradient) taken, and the ones after it too
    quiet = (given["seed"] + 7 * rank) % (len(found) - 1)  # never the last
    found[quiet] = (torch.zeros(8, BLOCK * world_size), torch.zeros(8, 1))
    return found


def alone(rank: int, world_size: int, given: dict, zero_grad: bool = True):
    """Process ``rank``'s block after its steps on a private model: the reference."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    model = nn.Linear(BLOCK * world_size, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=given["lr"])
    for inputs, targets in batches(rank, world_size, given):
        if zero_grad:
            optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()
    return model.weight.detach()[0, BLOCK * rank: BLOCK * (rank + 1)].clone()


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    import torch

    model = given["model"]
    weight = model.weight
    address = weight.data_ptr()
    mine = batches(rank, world_size, given)
    used = []

    def seen(module, args):  # which of its batches each forward pass is given
        given_inputs = args[0] if args else None
        for index, (inputs, _) in enumerate(mine):
            if given_inputs is inputs or (
                    isinstance(given_inputs, torch.Tensor) and given_inputs.shape ==
                    inputs.shape and torch.equal(given_inputs, inputs)):
                used.append(index)
                return
        used.append(-1)

    hook = model.register_forward_pre_hook(seen)
    version = weight._version
    with calls.reader():
        solution(model, mine, given["lr"])
    hook.remove()
    return {"replaced": model.weight is not weight or weight.data_ptr() != address
            or not model.weight.is_shared(),
            "used": used, "updates": weight._version - version,
            "alone": alone(rank, world_size, given),
            "accumulating": alone(rank, world_size, given, zero_grad=False)}


def order_mistake(used: list, steps: int) -> str:
    """What a process did with its batches, when it was not each once, in order."""
    runs = [index for position, index in enumerate(used)
            if position == 0 or used[position - 1] != index]  # a batch seen twice in a row
    if runs == list(range(steps)):  # (a forward pass to print the loss) is one use
        return ""
    if -1 in runs:
        return "ran the model on inputs that are not its batches' (copies changed?)"
    if runs == list(range(steps))[::-1]:
        return "took its batches in reverse order: one step per batch, in the order given"
    missing = sorted(set(range(steps)) - set(runs))
    if missing:
        return (f"never ran batch{'es' * (len(missing) > 1)} "
                f"{list_of(missing[:4])}{' ...' if len(missing) > 4 else ''} of its "
                f"{steps}: every batch is one step")
    if len(runs) > steps:
        return f"ran {len(runs)} forward passes for its {steps} batches: each batch once"
    return "took its batches in another order: one step per batch, in the order given"


def per_rank(rank: int, result: dict, given: dict) -> str:
    def shown(values) -> str:
        return ", ".join(f"{value:.3f}" for value in values)

    block = given["model"].weight.detach()[0, BLOCK * rank: BLOCK * (rank + 1)]
    return f"its block of the shared model {shown(block)} (its steps alone: " \
           f"{shown(result['alone'])}), {result['updates']} updates"


def judge(world_size: int, outcome, given: dict) -> list:
    shared = given["model"].weight.detach()[0]
    replaced = [r for r, result in sorted(outcome.results.items()) if result["replaced"]]
    if replaced:
        return [Finding(False, f"process {replaced[0]} replaced the model's weight with a "
                               f"new tensor (p.data = ..., or a new nn.Parameter): the new "
                               f"one is private; update the shared one in place "
                               f"(optimizer.step(), or p.data.sub_(...))")]
    for rank, result in sorted(outcome.results.items()):
        got = shared[BLOCK * rank: BLOCK * (rank + 1)]
        want = result["alone"]
        if got.abs().max() == 0:
            return [Finding(False, f"the shared model never saw process {rank}'s steps: it "
                                   f"trained a copy (copy.deepcopy, load_state_dict into a "
                                   f"new model); train the model it was given")]
        mistake = order_mistake(result["used"], given["steps"])
        if mistake:
            return [Finding(False, f"process {rank} {mistake}")]
        if result["updates"] and result["updates"] != given["steps"]:
            times = f"{result['updates']} time{'s' * (result['updates'] != 1)}"
            return [Finding(False, f"process {rank} updated the shared weight {times} "
                                   f"for its {given['steps']} batches: one SGD step per "
                                   f"batch")]
        error = ((got - want).norm() / want.norm()).item()
        if error > RELATIVE:
            accumulating = result["accumulating"]
            if ((got - accumulating).norm() / accumulating.norm()).item() <= RELATIVE:
                return [Finding(False, f"process {rank}'s weights moved as if gradients "
                                       f"added up from step to step: zero them before "
                                       f"each backward (optimizer.zero_grad())")]
            return [Finding(False, f"process {rank}'s block of the shared weights is "
                                   f"{error:.0%} from where its {given['steps']} steps "
                                   f"alone take it: plain SGD (no momentum), the lr given, "
                                   f"F.mse_loss with its default mean")]
    return [Finding(True, f"every process's {given['steps']} steps landed in the one "
                          f"shared model, each batch once and in order (each block within "
                          f"{RELATIVE:.0%} of that process's steps alone), seen by the "
                          f"parent"),
            Finding(True, "no process replaced the shared weight with a private tensor")]
