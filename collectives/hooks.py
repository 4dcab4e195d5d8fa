"""DDP communication hooks: gradients all-reduced (compressed) and averaged, for
``model.register_comm_hook(group, collectives.allreduce_hook)``.

:func:`allreduce_hook` returns at once: the bucket's all-reduce is queued on zipccl's communication
thread (:mod:`collectives.work`) and the returned ``torch.futures.Future`` is completed from there,
as torch's own ``allreduce_hook`` chains ``.then`` on the work's future.  So while bucket k is being
encoded, sent and decoded, backward goes on computing the gradients of bucket k+1; DDP waits on the
futures only at the end of backward.  :func:`blocking_allreduce_hook` communicates inside the hook
(backward stops meanwhile): kept to measure what the overlap brings (bench/ddp_train.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from .calls import all_reduce


@dataclass
class HookState:
    """Options of the hooks: ``model.register_comm_hook(HookState(group, compress="auto"), allreduce_hook)``.
    ``compress``: True, False or "auto" (:mod:`collectives.strategy` decides per bucket, charging the
    codec the CPU time it takes from the backward pass that the overlapped hook runs beside)."""
    group: object = None
    compress: bool | str = True
    checksum: bool = False


def _options(state) -> HookState:
    return state if isinstance(state, HookState) else HookState(group=state)


def allreduce_hook(state, bucket):
    """DDP communication hook: compressed all-reduce of the bucket, averaged, overlapped with backward.
    ``state``: a :class:`HookState`, or the process group (None: the default one).  (No return
    annotation: DDP accepts only the exact ``torch.futures.Future[torch.Tensor]``.)"""
    o = _options(state)
    ws = dist.get_world_size(o.group)
    work = all_reduce(bucket.buffer(), group=o.group, async_op=True, compress=o.compress, checksum=o.checksum,
                      while_computing=True)
    return work.get_future().then(lambda fut: fut.value()[0].div_(ws))


def blocking_allreduce_hook(state, bucket):
    """The same all-reduce, run inside the hook: backward waits for each bucket's communication."""
    o = _options(state)
    buf = bucket.buffer()
    fut: torch.futures.Future = torch.futures.Future()
    try:
        all_reduce(buf, group=o.group, compress=o.compress, checksum=o.checksum)
        buf.div_(dist.get_world_size(o.group))
        fut.set_result(buf)
    except Exception as e:     # noqa: BLE001 - handed to DDP
        fut.set_exception(e)
    return fut
