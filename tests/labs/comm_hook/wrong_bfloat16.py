"""Wrong: bfloat16 where the lab asks for float16: as many bytes, fewer digits."""

import torch
import torch.distributed as dist


def fp16_average_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(dist.get_world_size())
    work = dist.all_reduce(compressed, async_op=True)
    return work.get_future().then(lambda future: buffer.copy_(future.value()[0]))
