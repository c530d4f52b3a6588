"""Wrong: starts the all-reduce asynchronously, then waits for it inside the hook before
returning its future: backward stalls on every bucket all the same."""

import torch
import torch.distributed as dist


def fp16_average_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    compressed = buffer.to(torch.float16).div_(dist.get_world_size())
    work = dist.all_reduce(compressed, async_op=True)
    work.wait()
    return work.get_future().then(lambda future: buffer.copy_(future.value()[0]))
