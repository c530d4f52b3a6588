"""Wrong: a hand-written step updates the weight only; the bias is never stepped."""

import torch


def hogwild_train(model, batches, lr):
    import torch.nn.functional as F
    for inputs, targets in batches:
        for p in model.parameters():
            p.grad = None
        F.mse_loss(model(inputs), targets).backward()
        with torch.no_grad():
            model.weight.sub_(lr * model.weight.grad)
