"""Wrong (kept from a blind round, passed before): Lays the ranks out with
``init_device_mesh("cpu", (N // 2, 2))`` and all-reduces over the mesh's second
dimension, an API the contract does not allow."""

import torch
import torch.distributed as dist


def pair_sum(tensor: torch.Tensor) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("pair", "member"))
    dist.all_reduce(tensor, group=mesh.get_group("member"))
