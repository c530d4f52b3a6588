"""Wrong: sums the bucket over the ranks and forgets to divide by the world size."""

import torch
import torch.distributed as dist


def fp16_average_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    compressed = buffer.to(torch.float16)
    work = dist.all_reduce(compressed, async_op=True)
    return work.get_future().then(lambda future: buffer.copy_(future.value()[0]))
