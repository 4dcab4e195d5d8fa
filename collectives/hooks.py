"""The DDP communication hook: gradients all-reduced (compressed) and averaged, for
``model.register_comm_hook(None, collectives.allreduce_hook)``."""
from __future__ import annotations

import torch
import torch.distributed as dist

from .calls import all_reduce


def allreduce_hook(state, bucket):
    """DDP communication hook: compressed all-reduce, averaged.
    ``model.register_comm_hook(None, collectives.allreduce_hook)``."""
    group = state
    buf = bucket.buffer()
    fut: torch.futures.Future = torch.futures.Future()
    try:
        all_reduce(buf, group=group)
        buf.div_(dist.get_world_size(group))
        fut.set_result(buf)
    except Exception as e:     # noqa: BLE001 - handed to DDP
        fut.set_exception(e)
    return fut
