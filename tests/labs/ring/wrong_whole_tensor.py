"""Wrong: the whole tensor goes round the ring. The sum is right; the traffic is N/2 times
a ring's."""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    passing = tensor.clone()
    incoming = torch.empty_like(tensor)
    for _ in range(n - 1):
        sending = dist.isend(passing, dst=(rank + 1) % n)
        dist.recv(incoming, src=(rank - 1) % n)
        sending.wait()
        tensor.add_(incoming)
        passing.copy_(incoming)
