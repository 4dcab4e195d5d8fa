"""A slice-pipelined ring: reduce-scatter (decode, add, re-encode per hop) and all-gather (forward the
compressed bytes as received, decode in the background), with encoding, the wire and decoding overlapped.

Every shard is cut into slices of about ``slice_bytes`` (default: :func:`slice_size`).  Rank ``r``
sends to ``r+1`` and receives from ``r-1``; messages go in a fixed order (reduce-scatter step 0 slice 0, 1, …, then step 1, …,
then the all-gather steps).  Three things run at once on each rank:

* a sender thread takes the payloads in wire order, each as soon as it exists;
* the calling thread receives in wire order and hands each slice to a single decode thread;
* a single encode thread re-encodes a reduced slice as soon as its decode-and-add is done.

So slice ``k`` of step ``s+1`` leaves while slice ``k+1`` of step ``s`` is still arriving.  The
reduction of every element is ``incoming + own`` in the same order as the unpipelined ring
(shard ``j`` summed from rank ``j+1`` onward), and slicing does not change an element-wise add, so
results are bit-identical whether compressed or not and whatever the slice size.  In the
all-gather the reduced shard is encoded once and the other ranks forward its bytes unchanged.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import torch
import torch.distributed as dist

RING_SLICE_BYTES = int(os.environ.get("ZIPCCL_RING_SLICE_BYTES", 0))   # 0: adaptive (slice_size)
MAX_SLICES = 256


def slice_size(shard_bytes: int) -> int:
    """Adaptive slice: a quarter of a shard, within [1 MiB, 8 MiB] (measured on the emulated cluster:
    smaller slices lose wire time to per-message gaps, larger ones to pipeline fill)."""
    return RING_SLICE_BYTES or min(8 << 20, max(1 << 20, shard_bytes // 4))


def n_slices(t: torch.Tensor, slice_bytes: int | None = None) -> int:
    nbytes = t.numel() * t.element_size()
    slice_bytes = slice_bytes or slice_size(nbytes)
    return max(1, min(MAX_SLICES, t.numel(), -(-nbytes // slice_bytes)))


def _forward(src: Future, dst: Future) -> None:
    def done(f):
        if dst.done():
            return
        e = f.exception()
        if e is not None:
            dst.set_exception(e)
        else:
            dst.set_result(f.result())
    src.add_done_callback(done)


def ring(shards: list[torch.Tensor], group, encode, decode_into, *, reduce: bool, gather: bool,
         slice_bytes: int | None = None, global_rank=lambda r: r, into=None) -> list[torch.Tensor]:
    """Run the pipeline over ``shards`` (this rank's contribution, one flat tensor per rank's shard).

    ``reduce``: ring reduce-scatter, after which this rank's shard holds the sum over ranks.
    ``gather``: ring all-gather of this rank's shard (the reduced one if ``reduce``).
    Returns the list of shards: with ``gather`` all of them final, otherwise only this rank's.
    ``encode(t) -> uint8 tensor``, ``decode_into(buf, out)`` are the framing functions.
    ``into``: per shard, a flat contiguous tensor of its size where its result is written as it
    is decoded (no copy afterwards), or None (a fresh one); returned in place of the shards.
    A destination may be the shard itself (in-place all-reduce): every read of a rank's own
    contribution (the reduce-scatter's additions, on the one decode thread) is queued before the
    all-gather's first write.
    """
    ws, r = dist.get_world_size(group), dist.get_rank(group)
    nxt, prv = global_rank((r + 1) % ws), global_rank((r - 1) % ws)
    sl = [torch.tensor_split(s, n_slices(s, slice_bytes)) for s in shards]
    into = [None] * ws if into is None else list(into)
    final = (range(ws) if gather else [r])
    for j in final:
        if into[j] is None:
            into[j] = torch.empty_like(shards[j])
    dst = [torch.tensor_split(into[j], len(sl[j])) if into[j] is not None else None for j in range(ws)]
    plan_send, plan_recv = [], []                         # (phase, step, shard) per message block
    steps = ws - 1
    if reduce:
        plan_send += [("rs", s, (r - s - 1) % ws) for s in range(steps)]
        plan_recv += [("rs", s, (r - s - 2) % ws) for s in range(steps)]
    if gather:
        plan_send += [("ag", s, (r - s) % ws) for s in range(steps)]
        plan_recv += [("ag", s, (r - s - 1) % ws) for s in range(steps)]
    slots = {(ph, s, k): Future() for ph, s, j in plan_send for k in range(len(sl[j]))}
    order = [(ph, s, k) for ph, s, j in plan_send for k in range(len(sl[j]))]
    enc_pool = ThreadPoolExecutor(1, thread_name_prefix="zipccl-ring-encode")
    dec_pool = ThreadPoolExecutor(1, thread_name_prefix="zipccl-ring-decode")
    failure: list[BaseException] = []

    def sender():
        try:
            n = torch.empty(1, dtype=torch.int64)
            for key in order:
                payload = slots[key].result()
                n[0] = payload.numel()
                dist.send(n, nxt, group=group)
                dist.send(payload, nxt, group=group)
        except BaseException as e:  # noqa: BLE001 - re-raised by the calling thread
            failure.append(e)

    first = plan_send[0]
    for k, part in enumerate(sl[first[2]]):               # step 0 needs nothing from the ring
        _forward(enc_pool.submit(encode, part), slots[(first[0], 0, k)])
    th = threading.Thread(target=sender, name="zipccl-ring-send", daemon=True)
    th.start()
    pending = []
    try:
        n = torch.empty(1, dtype=torch.int64)
        for ph, s, j in plan_recv:
            for k, own in enumerate(sl[j]):
                dist.recv(n, prv, group=group)
                size = int(n)
                limit = 2 * own.numel() * own.element_size() + 4096
                if not 0 <= size <= limit:
                    raise ValueError(f"ring: peer announced a {size}-byte slice for {own.numel()} values")
                buf = torch.empty(size, dtype=torch.uint8)
                dist.recv(buf, prv, group=group)
                if ph == "rs":
                    def reduce_slice(buf=buf, own=own):
                        incoming = torch.empty_like(own)
                        decode_into(buf, incoming)
                        return incoming + own
                    f = dec_pool.submit(reduce_slice)
                    pending.append(f)
                    if s + 1 < steps:
                        _forward(enc_pool.submit(lambda f=f: encode(f.result())), slots[("rs", s + 1, k)])
                    else:                                 # shard r is complete: it is the result
                        def keep(f, j=j, k=k):
                            dst[j][k].copy_(f.result())
                        pending.append(dec_pool.submit(keep, f))
                        if gather:
                            _forward(enc_pool.submit(lambda f=f: encode(f.result())), slots[("ag", 0, k)])
                else:
                    pending.append(dec_pool.submit(decode_into, buf, dst[j][k]))
                    if s + 1 < steps:
                        slots[("ag", s + 1, k)].set_result(buf)   # forward the bytes as they came
            if failure:
                raise failure[0]
        for f in pending:
            f.result()
        th.join()
        if failure:
            raise failure[0]
    except BaseException as e:
        for f in slots.values():                          # release the sender and the encoder
            if not f.done():
                f.set_exception(RuntimeError(f"ring aborted: {e}"))
        enc_pool.shutdown(wait=False, cancel_futures=True)
        dec_pool.shutdown(wait=False, cancel_futures=True)
        raise
    enc_pool.shutdown()
    dec_pool.shutdown()
    if gather and not reduce and into[r].data_ptr() != shards[r].data_ptr():
        into[r].copy_(shards[r])                          # this rank's own shard, as it is
    return [into[j] if j in final else shards[j] for j in range(ws)]
