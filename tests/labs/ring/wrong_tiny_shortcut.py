"""Wrong (kept from a blind round, passed before): For tensors of at most one element per
rank (length 0 or N) it skips the chunking and passes the whole tensor round the ring
N-1 times: the sum is right, but those sizes get N-1 whole-tensor messages instead of
2(N-1) of 1/N; right on longer tensors."""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % n, (rank - 1) % n
    if tensor.numel() <= n:  # "chunks of one element are not worth the bookkeeping"
        passing = tensor.clone()
        for _ in range(n - 1):
            arriving = torch.empty_like(passing)
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, passing, right),
                                            dist.P2POp(dist.irecv, arriving, left)])
            for w in works:
                w.wait()
            tensor.add_(arriving)
            passing = arriving
        return
    chunks = tensor.chunk(n)
    incoming = torch.empty_like(chunks[0])
    for step in range(n - 1):
        send = dist.isend(chunks[(rank - step) % n], right)
        recv = dist.irecv(incoming, left)
        send.wait()
        recv.wait()
        chunks[(rank - step - 1) % n].add_(incoming)
    for step in range(n - 1):
        send = dist.isend(chunks[(rank - step + 1) % n], right)
        recv = dist.irecv(incoming, left)
        send.wait()
        recv.wait()
        chunks[(rank - step) % n].copy_(incoming)
