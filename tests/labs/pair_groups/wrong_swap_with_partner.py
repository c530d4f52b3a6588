"""Wrong: no group at all: each rank swaps its tensor with its partner and adds. The sums
are right; the lesson (a group per pair) is skipped."""

import torch
import torch.distributed as dist


def pair_sum(tensor: torch.Tensor) -> None:
    partner = dist.get_rank() ^ 1
    theirs = torch.empty_like(tensor)
    sending = dist.isend(tensor, dst=partner)
    dist.irecv(theirs, src=partner).wait()
    sending.wait()
    tensor.add_(theirs)
