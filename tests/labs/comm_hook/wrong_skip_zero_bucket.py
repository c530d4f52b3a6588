"""Wrong (kept from a blind round, passed before): Returns an already completed future,
without an all-reduce, when this rank's bucket is all zeros: a rank-local decision, so
when one rank's share zeroes a bucket (dead ReLUs) and another's does not, the ranks'
all-reduces pair different buckets (mixed gradients, a size error or a hang) and that
rank keeps zeros."""

import torch
import torch.distributed as dist


def fp16_average_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    if not buffer.any():  # nothing to average: skip the traffic
        done = torch.futures.Future()
        done.set_result(buffer)
        return done
    half = buffer.to(torch.float16).div_(dist.get_world_size())
    future = dist.all_reduce(half, async_op=True).get_future()
    return future.then(lambda fut: fut.value()[0].to(buffer.dtype))
