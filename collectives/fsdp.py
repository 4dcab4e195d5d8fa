"""FSDP2 with zipccl's compressed collectives: custom all-gather (parameters) and reduce-scatter
(gradients) for torch's ``fully_shard`` modules.

    from torch.distributed.fsdp import fully_shard
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    collectives.fsdp.use_zipccl(model)           # every FSDP module of the model, compress=True

FSDP2 hands its flat all-gather input/output and reduce-scatter input/output to these objects
(``FSDPModule.set_custom_all_gather`` / ``set_custom_reduce_scatter``); they run
:func:`collectives.all_gather_into_tensor` and :func:`collectives.reduce_scatter_tensor` (the
pipelined ring, compressed bytes forwarded in the all-gather).  FSDP's averaging (``ReduceOp.AVG``) is
the ring's sum divided by the world size, as FSDP itself does where the backend cannot average.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

from .calls import all_gather_into_tensor, reduce_scatter_tensor

__all__ = ["ZipAllGather", "ZipReduceScatter", "use_zipccl"]


class _Alloc:
    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)


class ZipAllGather(_Alloc, AllGather):
    """FSDP2's parameter all-gather through zipccl (``compress``: True, False or "auto")."""

    def __init__(self, compress=True, checksum: bool = False):
        self.compress, self.checksum = compress, checksum

    def __call__(self, output_tensor, input_tensor, group, async_op: bool = False):
        return all_gather_into_tensor(output_tensor, input_tensor, group, async_op, compress=self.compress,
                                      checksum=self.checksum)


class ZipReduceScatter(_Alloc, ReduceScatter):
    """FSDP2's gradient reduce-scatter through zipccl: SUM, or AVG as the sum divided by the world size."""

    def __init__(self, compress=True, checksum: bool = False):
        self.compress, self.checksum = compress, checksum

    def __call__(self, output_tensor, input_tensor, group, op=dist.ReduceOp.SUM, async_op: bool = False):
        if op == dist.ReduceOp.AVG:
            divide = dist.get_world_size(group)
        elif op == dist.ReduceOp.SUM:
            divide = None
        else:
            raise NotImplementedError(f"zipccl's FSDP reduce-scatter supports SUM and AVG, not {op}")
        reduce_scatter_tensor(output_tensor, input_tensor, group=group, compress=self.compress,
                              checksum=self.checksum)
        if divide:
            output_tensor.div_(divide)
        return None


def use_zipccl(model: torch.nn.Module, *, compress=True, checksum: bool = False) -> int:
    """Give every ``fully_shard`` module of ``model`` zipccl's all-gather and reduce-scatter; how many."""
    from torch.distributed.fsdp import FSDPModule

    n = 0
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_custom_all_gather(ZipAllGather(compress, checksum))
            m.set_custom_reduce_scatter(ZipReduceScatter(compress, checksum))
            n += 1
    return n
