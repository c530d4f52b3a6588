"""Lab hogwild (hogwild): a training loop on parameters in shared memory.

The parent makes one model, nn.Linear(4M, 1) with zero weights, and puts it in shared
memory; M processes run the reader's loop on it at once, without locks. Process r's
inputs are zero outside columns 4r..4r+3, so its gradients touch only its own block of
the weights, and that block must end where process r alone would have taken it, as the
parent sees the shared model afterwards. A process that trained a copy, or replaced the
shared tensors with new ones, leaves the parent's model unchanged. (Hogwild tolerates
lost updates: a block may be off by a rare race, so the check allows 5%.)
"""

from __future__ import annotations

from workers.labs.harness import Finding

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
BLOCK, STEPS, LR = 4, 12, 0.1
RELATIVE = 0.05


def setup(world_size: int) -> dict:
    import torch
    from torch import nn

    model = nn.Linear(BLOCK * world_size, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    model.share_memory()
    return {"model": model}


def describe(world_size: int, given: dict) -> str:
    return f", {STEPS} steps each"


def batches(rank: int, world_size: int) -> list:
    """Process ``rank``'s (inputs, targets): zero outside its own block of columns."""
    import torch

    generator = torch.Generator().manual_seed(rank)
    target = torch.randn(BLOCK, generator=generator)
    found, mine = [], slice(BLOCK * rank, BLOCK * (rank + 1))
    for _ in range(STEPS):
        inputs = torch.zeros(8, BLOCK * world_size)
        inputs[:, mine] = torch.randn(8, BLOCK, generator=generator)
        found.append((inputs, inputs[:, mine] @ target[:, None]))
    return found


def alone(rank: int, world_size: int, zero_grad: bool = True):
    """Process ``rank``'s block after its steps on a private model: the reference."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    model = nn.Linear(BLOCK * world_size, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for inputs, targets in batches(rank, world_size):
        if zero_grad:
            optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()
    return model.weight.detach()[0, BLOCK * rank: BLOCK * (rank + 1)].clone()


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    model = given["model"]
    weight = model.weight
    address = weight.data_ptr()
    with calls.reader():
        solution(model, batches(rank, world_size), LR)
    return {"replaced": model.weight is not weight or weight.data_ptr() != address
            or not model.weight.is_shared(),
            "alone": alone(rank, world_size),
            "accumulating": alone(rank, world_size, zero_grad=False)}


def per_rank(rank: int, result: dict, given: dict) -> str:
    def shown(values) -> str:
        return ", ".join(f"{value:.3f}" for value in values)

    block = given["model"].weight.detach()[0, BLOCK * rank: BLOCK * (rank + 1)]
    return f"its block of the shared model {shown(block)} (its steps alone: " \
           f"{shown(result['alone'])})"


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
        error = ((got - want).norm() / want.norm()).item()
        if error > RELATIVE:
            accumulating = result["accumulating"]
            if ((got - accumulating).norm() / accumulating.norm()).item() <= RELATIVE:
                return [Finding(False, f"process {rank}'s weights moved as if gradients "
                                       f"added up from step to step: zero them before "
                                       f"each backward (optimizer.zero_grad())")]
            return [Finding(False, f"process {rank}'s block of the shared weights is "
                                   f"{error:.0%} from where its {STEPS} SGD steps alone "
                                   f"take it")]
    return [Finding(True, f"every process's {STEPS} steps landed in the one shared model "
                          f"(each block within {RELATIVE:.0%} of that process's steps "
                          f"alone), seen by the parent"),
            Finding(True, "no process replaced the shared weight with a private tensor")]
