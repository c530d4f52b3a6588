"""The reference solution of the comm_hook lab: it must pass."""

import torch
import torch.distributed as dist


def fp16_average_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    compressed = buffer.to(torch.float16).div_(dist.get_world_size())
    work = dist.all_reduce(compressed, async_op=True)

    def decompress(future: torch.futures.Future) -> torch.Tensor:
        return buffer.copy_(future.value()[0])  # back to float32, in the bucket's buffer

    return work.get_future().then(decompress)
