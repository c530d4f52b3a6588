"""Lab hogwild (hogwild): a training loop on parameters in shared memory.

The parent makes one model, nn.Linear(4M, 1) with zero weights and bias, and puts it in
shared memory; M processes run the reader's loop on it at once, without locks. Process r's
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
- Every parameter is stepped (by torch.optim.SGD over model.parameters() or by hand, as
  the contract allows both): every batch holds each sample
  and its negation, so the bias's gradient is exactly 0 and the bias stays 0 while the
  weights race, yet each step updates it in place. Its updates are counted, and every
  torch.optim.SGD made must hold all of the model's parameters.
- In place, no copy, no new tensors: the parent's model, seen after the processes end.
- No momentum, the lr given: the weights one plain SGD gives, and the settings of every
  torch.optim.SGD made (no momentum, no weight decay); the steps and the lr drawn.
- The model's own dtype: float32 at 2 processes, float64 at 4 (model.float() would train
  a private copy), the loss's too: the dtype of every tensor backward() or
  torch.autograd.grad() is called on.
- The model may arrive with a gradient of the parent's, shared (as fork gives it): each
  process hands it the weight's .grad, a shared tensor of 3.0s, and any write into it
  by the process (an in-place zero_grad, a backward before zero_grad) fails.
- Exactly the lr given and F.mse_loss: in the float64 run, rank 0 runs the loop once more,
  alone on a private float64 model, and its block must equal plain SGD's to 1e-12
  (relative): an lr held in float32 moves it by about 1e-8, far inside the shared run's 5%.
- No locks: every lock the reader's lines take (fcntl's, threading's, multiprocessing's)
  is seen through a profile function.
"""

from __future__ import annotations

import sys

from workers.labs.harness import Finding, calls_from, list_of

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
SOLO = 1e-12  # relative, alone in float64: rounding only
NOISE = 1.0  # the targets' noise, against a signal of about 2
ARRIVED = 3.0  # each value of the gradient the model arrives with


def setup(world_size: int, rng) -> dict:
    import torch
    from torch import nn

    # float32 at 2 processes, float64 at 4: the model's own dtype, whatever it is
    dtype = torch.float32 if world_size == min(WORLD_SIZES) else torch.float64
    model = nn.Linear(BLOCK * world_size, 1, dtype=dtype)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    model.share_memory()
    # the gradient the parent left on the weight, in shared memory: what every process
    # that fork made would find there (pickled, a parameter travels without it, so each
    # process is handed it); it is not a process's own, to zero or add to
    arrived = torch.full_like(model.weight, ARRIVED).share_memory_()
    return {"model": model, "arrived": arrived, "seed": rng.randrange(1_000_000),
            "steps": rng.randint(10, 16), "lr": rng.choice([0.05, 0.08, 0.1, 0.12])}


def describe(world_size: int, given: dict) -> str:
    dtype = str(given["model"].weight.dtype).removeprefix("torch.")
    return f", {given['steps']} steps each, lr {given['lr']:g}, {dtype}"


def batches(rank: int, world_size: int, given: dict) -> list:
    """Process ``rank``'s (inputs, targets): zero outside its own block of columns."""
    import torch

    dtype = given["model"].weight.dtype
    generator = torch.Generator().manual_seed(given["seed"] + rank)
    target = torch.randn(BLOCK, generator=generator, dtype=dtype)
    found, mine = [], slice(BLOCK * rank, BLOCK * (rank + 1))
    for _ in range(given["steps"]):
        # four samples and their negations: the residuals cancel exactly in the bias's
        # gradient (0 while the bias is 0), and add up in the weights'
        inputs = torch.zeros(4, BLOCK * world_size, dtype=dtype)
        inputs[:, mine] = torch.randn(4, BLOCK, generator=generator, dtype=dtype)
        noise = NOISE * torch.randn(4, 1, generator=generator, dtype=dtype)
        targets = inputs[:, mine] @ target[:, None] + noise
        found.append((torch.cat([inputs, -inputs]), torch.cat([targets, -targets])))
    # one batch of zeros, whose loss is exactly 0 whatever the weights: a batch like any
    # other, its step (of a zero gradient) taken, and the ones after it too
    quiet = (given["seed"] + 7 * rank) % (len(found) - 1)  # never the last
    found[quiet] = (torch.zeros(8, BLOCK * world_size, dtype=dtype),
                    torch.zeros(8, 1, dtype=dtype))
    return found


def alone(rank: int, world_size: int, given: dict, zero_grad: bool = True):
    """Process ``rank``'s block after its steps on a private model: the reference."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    model = nn.Linear(BLOCK * world_size, 1, dtype=given["model"].weight.dtype)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
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
    weight, bias = model.weight, model.bias
    address, bias_address = weight.data_ptr(), bias.data_ptr()
    names = {id(parameter): name for name, parameter in model.named_parameters()}
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
    version, bias_version = weight._version, bias._version
    arrived = weight.grad = given["arrived"]  # shared, as under fork
    written = arrived._version  # this process's own writes into it move it on
    optimizers, left_out = [], []  # each SGD's settings; the parameters it does not hold
    sgd_init = torch.optim.SGD.__init__

    def recorded_init(optimizer, *args, **kwargs):  # the settings of every SGD it makes
        sgd_init(optimizer, *args, **kwargs)
        held = {id(parameter) for group in optimizer.param_groups
                for parameter in group["params"]}
        optimizers.append({key: value for key, value in optimizer.defaults.items()
                           if key in ("lr", "momentum", "dampening", "weight_decay",
                                      "nesterov", "maximize")})
        left_out.append([name for key, name in names.items() if key not in held])

    torch.optim.SGD.__init__ = recorded_init
    losses = set()  # the dtypes of the losses differentiated: the model's own, or not
    backward, grad = torch.Tensor.backward, torch.autograd.grad

    def recorded_backward(loss, *args, **kwargs):
        losses.add(str(loss.dtype).removeprefix("torch."))
        return backward(loss, *args, **kwargs)

    def recorded_grad(outputs, *args, **kwargs):
        for output in (outputs if isinstance(outputs, (list, tuple)) else [outputs]):
            losses.add(str(output.dtype).removeprefix("torch."))
        return grad(outputs, *args, **kwargs)

    torch.Tensor.backward, torch.autograd.grad = recorded_backward, recorded_grad
    locks = []
    sys.setprofile(calls_from(solution.__code__.co_filename, locks, lock_taken))
    try:
        with calls.reader():
            solution(model, mine, given["lr"])
    finally:
        sys.setprofile(None)
        torch.optim.SGD.__init__ = sgd_init
        torch.Tensor.backward, torch.autograd.grad = backward, grad
    hook.remove()
    replaced = [name for name, before, at in (("weight", weight, address),
                                              ("bias", bias, bias_address))
                if getattr(model, name) is not before or before.data_ptr() != at
                or not getattr(model, name).is_shared()]
    return {"replaced": replaced,
            "left_out": next((names for names in left_out if names), []),
            "losses": sorted(losses),
            "bias_updates": bias._version - bias_version,
            "grad_written": arrived._version != written, "optimizers": optimizers,
            "locks": locks,
            "used": used, "updates": weight._version - version,
            "alone": alone(rank, world_size, given),
            "accumulating": alone(rank, world_size, given, zero_grad=False),
            # in the float64 run, where a float32 step is a mistake the page names first
            "solo": solo(rank, world_size, solution, given)
            if rank == 0 and weight.dtype == torch.float64 else None}


def solo(rank: int, world_size: int, solution, given: dict) -> float | None:
    """The reader's loop once more, alone on a private float64 model (no race, no shared
    memory): how far, relatively, its weights end from plain SGD's there. The shared run
    allows 5% for races; alone, plain SGD is exact to float64's rounding, so an lr or a
    loss that is only nearly the contract's shows. None where the loop fails alone."""
    import torch
    from torch import nn

    double = {**given, "model": nn.Linear(BLOCK * world_size, 1, dtype=torch.float64)}
    model = double["model"]
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    try:
        solution(model, batches(rank, world_size, double), given["lr"])
    except Exception:  # noqa: BLE001 (the shared run already judged what it raises)
        return None
    want = alone(rank, world_size, double)
    got = model.weight.detach()[0, BLOCK * rank: BLOCK * (rank + 1)]
    return ((got - want).norm() / want.norm()).item() if want.norm() > 0 else 0.0


SYNCHRONIZING = ("Lock", "RLock", "_RLock", "Condition", "Semaphore", "BoundedSemaphore",
                 "Event", "Barrier", "SemLock")


def lock_taken(frame, event, arg) -> str:
    """For ``calls_from``: a lock the reader's line takes, by name: fcntl's file locks, and
    the lock objects of threading, multiprocessing and torch.multiprocessing (their C
    methods, or their Python ones); '' for any other call."""
    if event == "c_call":
        owner = type(getattr(arg, "__self__", None)).__module__
        module = getattr(arg, "__module__", None)
        if module == "fcntl" or owner in ("_thread", "_multiprocessing"):
            return f"{module or owner}.{getattr(arg, '__qualname__', '?')}"
    elif frame.f_globals.get("__name__") in ("threading", "multiprocessing.synchronize") \
            and frame.f_code.co_qualname.split(".")[0] in SYNCHRONIZING:
        return f"{frame.f_globals['__name__']}.{frame.f_code.co_qualname}"
    return ""


def plain_sgd(lr: float) -> dict:
    return {"lr": lr, "momentum": 0, "dampening": 0, "weight_decay": 0, "nesterov": False,
            "maximize": False}


def order_mistake(used: list, steps: int) -> str:
    """What a process did with its batches, when it was not each once, in order."""
    runs = [index for position, index in enumerate(used)
            if position == 0 or used[position - 1] != index]  # a batch seen twice in a row
    if runs == list(range(steps)):  # (a forward pass to print the loss) is one use
        return ""
    if -1 in runs:
        return ("ran the model on inputs that are none of its batches: one forward per "
                "batch as given, not batches joined, cut or changed")
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
    replaced = [(r, result["replaced"][0]) for r, result in sorted(outcome.results.items())
                if result["replaced"]]
    if replaced:
        return [Finding(False, f"process {replaced[0][0]} replaced the model's "
                               f"{replaced[0][1]} with a "
                               f"new tensor (p.data = ..., or a new nn.Parameter): the new "
                               f"one is private; update the shared one in place "
                               f"(optimizer.step(), or p.data.sub_(...))")]
    for rank, result in sorted(outcome.results.items()):
        if result["locks"]:
            return [Finding(False, f"process {rank} took a lock, {result['locks'][0]}: "
                                   f"Hogwild takes none; the processes' steps race, and "
                                   f"that is the method")]
    for rank, result in sorted(outcome.results.items()):
        got = shared[BLOCK * rank: BLOCK * (rank + 1)]
        want = result["alone"]
        if got.abs().max() == 0 and result["used"]:  # it ran the model it was given
            mistake = order_mistake(result["used"], given["steps"])
            if mistake:  # e.g. it stopped at its first batch
                return [Finding(False, f"process {rank} {mistake}")]
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
        mistake = step_mistake(rank, result, given)
        if mistake:
            return [Finding(False, mistake)]
        if result["grad_written"]:
            return [Finding(False, f"process {rank} wrote into the .grad the model "
                                   f"arrived with, which the parent and every other "
                                   f"process share (as fork gives it): drop it before "
                                   f"each backward with optimizer.zero_grad(), whose "
                                   f"default set_to_none=True drops that tensor, or with "
                                   f"p.grad = None, so each "
                                   f"process computes a .grad of its own (zeroing it in "
                                   f"place, or a backward before zero_grad(), writes the "
                                   f"shared one)")]
        error = ((got - want).norm() / want.norm()).item()
        if error > RELATIVE:
            accumulating = result["accumulating"]
            if ((got - accumulating).norm() / accumulating.norm()).item() <= RELATIVE:
                return [Finding(False, f"process {rank}'s weights moved as if gradients "
                                       f"added up from step to step: zero them before "
                                       f"each backward (optimizer.zero_grad(), or "
                                       f"p.grad = None)")]
            return [Finding(False, f"process {rank}'s block of the shared weights is "
                                   f"{error:.0%} from where its {given['steps']} steps "
                                   f"alone take it: plain SGD (no momentum), the lr given, "
                                   f"F.mse_loss with its default mean")]
    off = outcome.results[0].get("solo")
    if off is not None and off > SOLO:
        return [Finding(False, f"run alone on a private float64 model, process 0's loop "
                               f"ends {off:.1e} (relative) from plain SGD's, where the two "
                               f"agree to float64's rounding: its step is not exactly "
                               f"p -= lr * p.grad with F.mse_loss (an lr held in float32, "
                               f"a scaled loss, a clipped gradient?)")]
    return [Finding(True, f"every process's {given['steps']} steps landed in the one "
                          f"shared model, each batch once and in order (each block within "
                          f"{RELATIVE:.0%} of that process's steps alone), seen by the "
                          f"parent"),
            Finding(True, "no process replaced a shared parameter with a private tensor, "
                          "and every step updated the bias too")]


def step_mistake(rank: int, result: dict, given: dict) -> str:
    """What is wrong with how a process stepped: the loss's dtype, the parameters its
    SGD holds or its steps update, the SGD's settings; '' when nothing is."""
    dtype = str(given["model"].weight.dtype).removeprefix("torch.")
    other = [name for name in result["losses"] if name != dtype]
    if other:
        return (f"process {rank} computed its loss in {other[0]} on a {dtype} model (a "
                f"cast such as model(inputs).float()): F.mse_loss(model(inputs), targets), "
                f"in the model's own dtype")
    if result["left_out"]:
        return (f"process {rank} made an SGD without the model's "
                f"{list_of(result['left_out'])}, which is never stepped: "
                f"torch.optim.SGD(model.parameters(), lr=lr) steps every parameter")
    if result["updates"] and result["bias_updates"] != result["updates"]:
        return (f"process {rank} updated the weight {result['updates']} times and the "
                f"bias {result['bias_updates']}: every step updates every parameter of "
                f"the model (model.parameters())")
    odd = next((settings for settings in result["optimizers"]
                if settings != plain_sgd(given["lr"])), None)
    if odd:
        said = ", ".join(f"{key}={value!r}" for key, value in odd.items()
                         if value != plain_sgd(given["lr"])[key])
        return (f"process {rank} made an SGD with {said}: this lab asks for plain SGD, "
                f"torch.optim.SGD(model.parameters(), lr=lr), no momentum, no weight "
                f"decay")
    return ""
