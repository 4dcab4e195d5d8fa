"""Compressed collectives over torch.distributed: the same calls, fewer bytes, the same bits.

Each function mirrors its ``torch.distributed`` namesake (tensor arguments, ``group``,
``async_op`` returning a handle with ``wait()``), moves :mod:`codec` streams instead of raw
tensors through the process group's own transport (gloo on CPU), and writes results that
are bit-identical to the same algorithm run uncompressed (``compress=False``).  Reductions
sum in the tensor's dtype in a fixed order:

* ``algorithm="ring"``: ring reduce-scatter (decode, add own shard, re-encode per hop), then a
  ring all-gather that forwards each reduced shard's compressed bytes unchanged; shard ``j`` is
  summed starting at rank ``j+1``, in ring order.  Both phases are pipelined in ~1 MiB slices
  (:mod:`collectives.ring`): encoding, the wire and decoding overlap.
* ``algorithm="gather"``: all-gather every rank's tensor, then sum in rank order 0..N-1
  (fewer hops, better for small messages).

Before moving data every call checks that all ranks agree on shape and dtype and raises a
``ValueError`` naming the ranks that differ; a corrupted frame raises ``codec.FormatError``
when ``checksum=True``.  A rank that dies makes the others fail with the group's timeout.

    import collectives
    collectives.all_reduce(grad)                  # was: torch.distributed.all_reduce(grad)

The package, one job per module (each imports only the ones listed before it):

* :mod:`collectives.traffic`: the process-wide count of bytes framed for the wire (:data:`traffic`);
* :mod:`collectives.work`: the per-process call queue (program order) and the :class:`Work` handle;
* :mod:`collectives.framing`: tensors as wire frames and back, and the checks of a received frame;
* :mod:`collectives.agreement`: the check that all ranks pass the same shape and dtype;
* :mod:`collectives.transport`: variable-size byte buffers between ranks (padded all-gather);
* :mod:`collectives.ring`: the slice-pipelined ring; :mod:`collectives.strategy`: the cost model;
* :mod:`collectives.auto`: ``compress="auto"`` (rank 0 decides, all follow; :data:`last_decision`);
* :mod:`collectives.calls`: the group collectives; :mod:`collectives.p2p`: :func:`send` / :func:`recv`;
* :mod:`collectives.hooks`: the DDP communication hook;
* :mod:`collectives.weight_sync`: :class:`WeightSync`, one rank's weights to the others, full or delta,
  pipelined down a chain.
"""
from __future__ import annotations

from . import auto, strategy  # noqa: F401 - collectives.strategy stays an attribute of the package
from .agreement import describe as _describe  # noqa: F401 - tests/test_hardening.py forges a description
from .calls import (RING_MIN_NUMEL, all_gather, all_gather_into_tensor, all_reduce, all_to_all_single,  # noqa: F401
                    broadcast, reduce_scatter, reduce_scatter_tensor)
from .hooks import HookState, StepTuner, allreduce_hook, blocking_allreduce_hook  # noqa: F401
from .p2p import PIPELINE_SLICE_BYTES, recv, send  # noqa: F401
from .traffic import Traffic, traffic  # noqa: F401
from .weight_sync import SyncError, SyncStats, WeightSync  # noqa: F401
from .work import Work

__all__ = ["all_gather", "broadcast", "send", "recv", "all_reduce", "reduce_scatter", "all_to_all_single",
           "all_gather_into_tensor", "reduce_scatter_tensor", "allreduce_hook", "Work", "last_decision", "traffic",
           "WeightSync", "SyncStats", "SyncError", "HookState", "StepTuner", "blocking_allreduce_hook"]


def __getattr__(name: str):
    # last_decision is rebound by every compress="auto" call, in collectives.auto: read it there
    if name == "last_decision":
        return auto.last_decision
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
