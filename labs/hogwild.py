"""Lab: a Hogwild training loop (chapter: Hogwild, shared memory and CPU oversubscription).

Check it with:  python -m workers.labs check hogwild
"""

import torch
from torch import nn


def hogwild_train(model: nn.Module, batches: list, lr: float) -> None:
    """Train the shared ``model`` on ``batches`` with plain SGD, in this process.

    Several processes run this function at the same time, each with its own ``batches``,
    all on the same ``model``: its parameters live in shared memory (the parent called
    ``model.share_memory()``), so every process and the parent see one set of weights.
    Arguments: ``model``, the shared model; ``batches``, a list of ``(inputs, targets)``
    pairs; ``lr``, the learning rate.

    Afterwards: every step of this process has been applied to the shared parameters,
    one SGD step per pair, in order: zero the gradients, ``F.mse_loss(model(inputs),
    targets)``, backward, then plain SGD on every parameter, ``p -= lr * p.grad`` (no
    momentum, no weight decay): ``torch.optim.SGD(model.parameters(), lr=lr)`` makes that
    step, and so does a loop over the parameters under ``torch.no_grad()``. No locks:
    Hogwild lets the processes' steps race. The model may arrive with a ``.grad`` of the
    parent's, shared like its weights (as ``fork`` gives it): it is not this process's to
    write into, so before each backward drop it rather than zero it in place:
    ``optimizer.zero_grad()`` (its default ``set_to_none=True`` drops it), or ``p.grad =
    None`` for each parameter.

    May call: torch.optim.SGD, torch.nn.functional, and torch tensor operations. Do not
    copy the model (it would train the copy) and do not replace its parameters with new
    tensors (p.data = ..., a new nn.Parameter): update them in place.
    """
    raise NotImplementedError("write hogwild_train, then run: "
                              "python -m workers.labs check hogwild")
