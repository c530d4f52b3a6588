"""Wrong (kept from a blind round, failed before with a message that named no mistake):
breaks "divide it by the world size": it divides by a literal 2 instead of
dist.get_world_size(), so on 3 ranks the bucket comes back as 3/2 of the mean.
"""

import torch
import torch.distributed as dist


def fp16_average_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    compressed = buffer.to(torch.float16).div_(2)
    work = dist.all_reduce(compressed, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0].to(buffer.dtype))
