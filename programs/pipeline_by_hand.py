"""A pipeline: a model split over ranks, trained with send/recv in GPipe's order."""
import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

LAYERS, WIDTH, BATCH, MICRO_BATCHES = 4, 32, 16, 4


def stage_main(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)  # every rank builds the same whole model and data...
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    inputs, whole = torch.randn(BATCH, WIDTH), copy.deepcopy(model)  # (whole: the check)
    mine = slice(rank * LAYERS // world_size, (rank + 1) * LAYERS // world_size)
    stage, first, last, kept = model[mine], rank == 0, rank == world_size - 1, []
    for x in inputs.chunk(MICRO_BATCHES):  # GPipe: every micro-batch forward first...
        if not first:  # ...through this rank's layers only, from what the stage before sent
            dist.recv(x := torch.empty(x.shape), rank - 1)
        out = stage(x.requires_grad_(not first))
        if not last:
            dist.send(out.detach(), rank + 1)
        kept.append((x, out.square().mean() / MICRO_BATCHES if last else out))
    for x, out in kept:  # ...then every micro-batch backward, in the same order
        if not last:  # the gradient of this stage's output, from the stage after
            dist.recv(grad := torch.empty(out.shape), rank + 1)
        out.backward(None if last else grad)  # gradients add up over the micro-batches
        if not first:
            dist.send(x.grad, rank - 1)
    whole(inputs).square().mean().backward()  # one process, the whole batch at once
    same = all(torch.allclose(p.grad, q.grad, atol=1e-6)
               for p, q in zip(stage.parameters(), whole[mine].parameters()))
    print(f"[rank {rank}] gradients equal one process's: {same}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = int(os.environ.get("WORLD_SIZE", 2))  # torchrun's, or the 2 spawned below
    if world_size > LAYERS:  # a rank without layers would have no stage to run
        sys.exit(f"{world_size} ranks but {LAYERS} layers: every rank needs one at least")
    if "RANK" in os.environ:  # started by torchrun
        stage_main(int(os.environ["RANK"]), world_size)
    else:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        mp.spawn(stage_main, args=(2,), nprocs=2)
