"""Wrong: hands the bucket to PyTorch's own fp16_compress_hook instead of writing one."""

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook


def fp16_average_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    return fp16_compress_hook(dist.group.WORLD, bucket)
