"""Right, written another way: divides in float32 before the cast (one rounding), returns a
new float32 tensor from the callback; the functions come from the module that defines
them."""

import torch
from torch.distributed import GradBucket
from torch.distributed.distributed_c10d import all_reduce, get_world_size


def fp16_average_hook(state, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    n = get_world_size()
    work = all_reduce((bucket.buffer() / n).half(), async_op=True)
    return work.get_future().then(lambda future: future.value()[0].float())
