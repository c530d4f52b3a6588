"""An MLP split over the ranks: layer 1 by columns, layer 2 by rows, one all-reduce."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


class SumOverRanks(torch.autograd.Function):
    @staticmethod
    def forward(ctx, partial):  # the one all-reduce of the forward pass
        dist.all_reduce(total := partial.clone())
        return total

    @staticmethod
    def backward(ctx, grad):  # each partial sum moves the output one for one
        return grad


def main(rank: int, world_size: int) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)  # the same whole weights and inputs on every rank
    w1 = torch.randn(64, 16, requires_grad=True)  # hidden x in, as nn.Linear
    w2 = torch.randn(16, 64, requires_grad=True)  # out x hidden
    x = torch.randn(8, 16)
    (torch.relu(x @ w1.T) @ w2.T).square().mean().backward()  # the whole MLP
    mine = slice(rank * 64 // world_size, (rank + 1) * 64 // world_size)
    w1_mine = w1.detach()[mine].clone().requires_grad_()  # my hidden units' rows
    w2_mine = w2.detach()[:, mine].clone().requires_grad_()  # and their columns
    out = SumOverRanks.apply(torch.relu(x @ w1_mine.T) @ w2_mine.T)
    out.square().mean().backward()
    torch.testing.assert_close(  # float32: within 1e-5 + 1.3e-6 x the value
        (out, w1_mine.grad, w2_mine.grad),
        (torch.relu(x @ w1.T) @ w2.T, w1.grad[mine], w2.grad[:, mine]))
    print(f"[rank {rank}] units {mine.start}:{mine.stop} match the whole MLP", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if "RANK" in os.environ:  # started by torchrun
        main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    else:
        mp.spawn(main, args=(2,), nprocs=2)
