"""Right, written another way: divides after the all-reduce, in the callback, and returns a
new float32 tensor; the functions come from the module that defines them."""

import torch
from torch.distributed import GradBucket
from torch.distributed.distributed_c10d import all_reduce, get_world_size


def fp16_average_hook(state, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    n = get_world_size()
    work = all_reduce(bucket.buffer().half(), async_op=True)
    return work.get_future().then(lambda future: future.value()[0].float() / n)
