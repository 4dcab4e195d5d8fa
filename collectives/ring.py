"""A slice-pipelined ring: reduce-scatter (decode, add, re-encode per hop) and all-gather (forward the
compressed bytes as received, decode in the background), with encoding, the wire and decoding overlapped.

Every shard is cut into slices of about ``slice_bytes`` (default: :func:`slice_size`).  Rank ``r``
sends to ``r+1`` and receives from ``r-1``; messages go in a fixed order (reduce-scatter step 0 slice 0, 1, …, then step 1, …,
then the all-gather steps).  Three things run at once on each rank:

* a sender thread takes the payloads in wire order, each as soon as it exists, with the next
  ones posted while the oldest is still on the wire;
* the calling thread receives in wire order, keeping the next receives posted ahead (a compressed
  frame carries its length, so it lands in a buffer of the frame bound), and hands each slice to
  a single decode thread;
* a single encode thread re-encodes a reduced slice as soon as its decode-and-add is done.

So slice ``k`` of step ``s+1`` leaves while slice ``k+1`` of step ``s`` is still arriving.  The
reduction of every element is ``incoming + own`` in the same order as the unpipelined ring
(shard ``j`` summed from rank ``j+1`` onward), and slicing does not change an element-wise add, so
results are bit-identical whether compressed or not and whatever the slice size.  In the
all-gather the reduced shard is encoded once and the other ranks forward its bytes unchanged.

Receives posted ahead matter: gloo writes a message only once the receiver has asked for it, so a
receive posted after the previous message completed costs a round trip of idle wire per slice
(measured at 1 Gbit/s, 64 MiB all-reduce: the uncompressed ring's links carried 87 % of the 119 MB/s
the link gives with a size message and a blocking receive per slice, 99 % with receives posted ahead).  A frame's length is checked against the frame
bound before anything is decoded (``ValueError``); a peer whose message is longer than the receive
posted for it breaks gloo's own framing, which gloo reports by ending the process, as it does for
any message longer than its receive.
"""
from __future__ import annotations

import collections
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import torch
import torch.distributed as dist

RING_SLICE_BYTES = int(os.environ.get("ZIPCCL_RING_SLICE_BYTES", 0))   # 0: adaptive (slice_size)
MAX_SLICES = 256
PREFIX = 8             # a compressed frame's length, before its stream
RECV_AHEAD = 4         # receives kept posted ahead of the one being waited for
SEND_AHEAD = 2         # sends in flight before the sender waits for the oldest


def slice_size(shard_bytes: int) -> int:
    """Adaptive slice: a quarter of a shard, within [1 MiB, 8 MiB] (measured on the emulated cluster:
    smaller slices lose wire time to per-message gaps, larger ones to pipeline fill)."""
    return RING_SLICE_BYTES or _adaptive_slice(shard_bytes)


def _adaptive_slice(shard_bytes: int) -> int:
    return min(8 << 20, max(1 << 20, shard_bytes // 4))


def n_slices(t: torch.Tensor, slice_bytes: int | None = None) -> int:
    nbytes = t.numel() * t.element_size()
    slice_bytes = slice_bytes or slice_size(nbytes)
    return max(1, min(MAX_SLICES, t.numel(), -(-nbytes // slice_bytes)))


def interleave(numel: int, itemsize: int, world: int) -> int:
    """How many pieces of an all-reduced tensor each rank's shard takes (the all-reduce's shard ``j`` is
    pieces ``j, j + world, j + 2 world, ...`` of the tensor cut into ``world * q`` pieces): as many as
    the default slices of a contiguous shard, so a piece is a slice, and never a function of
    ``ZIPCCL_RING_SLICE_BYTES`` (which only cuts pieces into slices): the summation order, and so the
    bits, depend on the tensor's size and the world size alone.

    Why: a tensor's compressibility is not uniform along it (a model's flattened gradient is half
    zeros, the unused rows of its word embeddings, all at its start), and each link of the ring carries
    every shard but one per phase, so the busiest link is the one whose skipped shards code smallest:
    contiguous quarters of MiniLM's flattened bf16 gradient coded to 0.24, 0.07, 0.96 and 5.41 MiB
    (32 MiB; the largest 3.2x their mean), interleaved ones to 1.49, 1.46, 1.41 and 2.33 (1.4x).
    Measured (bench/results/collectives_interleave_amd-epyc-f26-m2.md): the 64 MiB gradient all-reduce at
    1 Gbit/s 0.406 -> 0.374 s, 32 MiB and weights unchanged."""
    per_rank = numel // world
    shard = per_rank * itemsize
    return max(1, min(-(-shard // _adaptive_slice(shard)), MAX_SLICES, per_rank))


class _Pool:
    """Flat uint8 CPU buffers kept for reuse, by size class (MiB): the ring's frames, the frames it
    receives and its reduced slices come from here and go back after their last use, so their pages
    are faulted in once per process rather than once per slice (page faults and freeing were a
    tenth of the emulated cluster's CPU time).  At most ``keep_bytes`` are kept."""

    def __init__(self, keep_bytes: int = 512 << 20):
        self._free: dict[int, list[torch.Tensor]] = {}
        self._lock = threading.Lock()
        self._kept = 0
        self._keep = keep_bytes

    def take(self, nbytes: int) -> torch.Tensor:
        cls = max(1, -(-nbytes // (1 << 20)))
        with self._lock:
            free = self._free.get(cls)
            if free:
                self._kept -= cls << 20
                return free.pop()
        return torch.empty(cls << 20, dtype=torch.uint8)

    def give(self, buf: torch.Tensor) -> None:
        with self._lock:
            if self._kept + buf.numel() <= self._keep:
                self._free.setdefault(buf.numel() >> 20, []).append(buf)
                self._kept += buf.numel()


POOL = _Pool()


class _Lease:
    """A pooled buffer in use by ``users`` parties; back to the pool when the last one is done."""

    def __init__(self, buf: torch.Tensor, users: int = 1):
        self.buf, self._users, self._lock = buf, users, threading.Lock()

    def done(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users == 0
        if last:
            POOL.give(self.buf)


def _overlaps(a: torch.Tensor | None, b: torch.Tensor) -> bool:
    """Whether two tensors' memory overlaps."""
    if a is None or not a.numel() or not b.numel():
        return False
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()


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


def ring(shards: list, group, encode, decode_into, *, reduce: bool, gather: bool,
         slice_bytes: int | None = None, global_rank=lambda r: r, into=None, frame_limit=None) -> list:
    """Run the pipeline over ``shards`` (this rank's contribution, one flat tensor per rank's shard, or
    per shard a list of flat pieces, each cut into slices on its own: the all-reduce's interleaved
    shards, :func:`interleave`; ``into`` then holds lists of pieces too, and is required for ``final``).

    ``reduce``: ring reduce-scatter, after which this rank's shard holds the sum over ranks.
    ``gather``: ring all-gather of this rank's shard (the reduced one if ``reduce``).
    Returns the list of shards: with ``gather`` all of them final, otherwise only this rank's.
    ``encode(t, out) -> uint8 tensor``, ``decode_into(buf, out)`` are the framing functions;
    ``frame_limit(t)``: the most bytes ``encode`` can write for ``t``, which it then writes into
    ``out``, a pooled buffer of that size; each frame carries its length ahead of it.  None: uncompressed
    frames, ``t``'s own bytes (``out`` is None), whose size the receiver knows.
    ``into``: per shard, a flat contiguous tensor of its size where its result is written as it
    is decoded (no copy afterwards), or None (a fresh one); returned in place of the shards.
    A destination may be the shard itself (in-place all-reduce): every read of a rank's own
    contribution (the reduce-scatter's additions, on the one decode thread) is queued before the
    all-gather's first write.
    """
    ws, r = dist.get_world_size(group), dist.get_rank(group)
    nxt, prv = global_rank((r + 1) % ws), global_rank((r - 1) % ws)

    def cut(s):
        if isinstance(s, torch.Tensor):
            return list(torch.tensor_split(s, n_slices(s, slice_bytes)))
        # the slice size of the whole shard (a piece is about one of its default slices)
        size = slice_bytes or slice_size(sum(p.numel() * p.element_size() for p in s))
        return [part for piece in s for part in torch.tensor_split(piece, n_slices(piece, size))]

    sl = [cut(s) for s in shards]
    into = [None] * ws if into is None else list(into)
    final = (range(ws) if gather else [r])
    for j in final:
        if into[j] is None:
            into[j] = torch.empty_like(shards[j])
    dst = [cut(into[j]) if into[j] is not None else None for j in range(ws)]
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

    def framed(t, lease=None):
        """(frame of ``t``, the lease the sender ends once it is sent, or None); ``lease``: of ``t``'s
        buffer, done once ``t`` is coded (uncompressed, the frame is ``t``'s memory: the sender's).
        A compressed frame is its length (8 bytes) then the stream, so that the receiver can post its
        receive ahead into a buffer of the frame bound, before the length is known."""
        if frame_limit is None:
            return encode(t, None), lease
        try:
            out = _Lease(POOL.take(PREFIX + frame_limit(t)))
            n = encode(t, out.buf[PREFIX:]).numel()
            out.buf[:PREFIX].view(torch.int64)[0] = n
            return out.buf[:PREFIX + n], out
        finally:
            if lease is not None:
                lease.done()

    def sender():
        inflight = collections.deque()

        def retire_oldest():
            w, lease = inflight.popleft()
            w.wait()
            if lease is not None:
                lease.done()
        try:
            for key in order:
                payload, lease = slots[key].result()
                inflight.append((dist.isend(payload, nxt, group=group), lease))
                while len(inflight) > SEND_AHEAD:
                    retire_oldest()
            while inflight:
                retire_oldest()
        except BaseException as e:  # noqa: BLE001 - re-raised by the calling thread
            failure.append(e)

    first = plan_send[0]
    for k, part in enumerate(sl[first[2]]):               # step 0 needs nothing from the ring
        _forward(enc_pool.submit(framed, part), slots[(first[0], 0, k)])
    th = threading.Thread(target=sender, name="zipccl-ring-send", daemon=True)
    th.start()
    pending = []
    # every message this rank receives, in wire order; RECV_AHEAD receives are kept posted, each into a
    # pooled buffer of the frame bound, so the sender never waits for this rank to ask for the next one.
    # Uncompressed, the all-gather's slices are received straight into their destination (no copy), and
    # the reduce-scatter adds straight from the received bytes; where a destination is memory the
    # reduce-scatter still reads (an in-place all-reduce), those receives are posted only once every
    # addition is done.
    msgs = [(ph, s, j, k, own) for ph, s, j in plan_recv for k, own in enumerate(sl[j])]
    posted = collections.deque()
    direct = frame_limit is None

    def spans(s):
        return [s] if isinstance(s, torch.Tensor) else list(s)

    settled = not (direct and reduce and any(_overlaps(d, o) for j in final for d in spans(into[j])
                                             for m in range(ws) for o in spans(shards[m])))
    next_post = 0

    def post(i):
        ph, s, j, k, own = msgs[i]
        if direct and ph == "ag":
            posted.append((dist.irecv(dst[j][k].view(torch.uint8), prv, group=group), None))
            return
        raw = own.numel() * own.element_size()
        cap = raw if frame_limit is None else PREFIX + frame_limit(own)
        got = _Lease(POOL.take(cap), 2 if ph == "ag" and s + 1 < steps else 1)
        posted.append((dist.irecv(got.buf[:cap], prv, group=group), got))

    def top_up(upto):
        nonlocal next_post
        while next_post < min(upto, len(msgs)) and (settled or msgs[next_post][0] != "ag"):
            post(next_post)
            next_post += 1

    try:
        top_up(RECV_AHEAD)
        for i, (ph, s, j, k, own) in enumerate(msgs):
            if not settled and ph == "ag":
                for f in pending:                         # every read of this rank's own shards is done
                    f.result()
                settled = True
            top_up(i + 1 + RECV_AHEAD)
            req, got = posted.popleft()
            req.wait()
            forwarded = ph == "ag" and s + 1 < steps
            if direct and ph == "ag":                     # landed in place: nothing to decode
                if forwarded:
                    slots[("ag", s + 1, k)].set_result((dst[j][k].view(torch.uint8), None))
                continue
            if frame_limit is None:
                frame = buf = got.buf[:own.numel() * own.element_size()]
            else:
                size, limit = int(got.buf[:PREFIX].view(torch.int64)[0]), frame_limit(own)
                if not 0 <= size <= limit:
                    raise ValueError(f"ring: peer announced a {size}-byte slice for {own.numel()} values")
                frame, buf = got.buf[:PREFIX + size], got.buf[PREFIX:PREFIX + size]
            if ph == "rs":
                last = s + 1 == steps

                # a partial sum goes to a pooled buffer, freed once the next hop's encode is done; the last
                # step's (this rank's shard, complete) straight to its destination, no copy afterwards
                def reduce_slice(buf=buf, got=got, own=own, out=dst[j][k] if last else None):
                    nbytes = own.numel() * own.element_size()
                    total = None if out is not None else _Lease(POOL.take(nbytes))
                    target = out if out is not None else total.buf[:nbytes].view(own.dtype)
                    if direct:                            # raw bytes: incoming + own in one pass
                        torch.add(buf.view(own.dtype), own, out=target)
                    elif _overlaps(target, own):          # in place: decoded aside, then incoming + own
                        aside = POOL.take(nbytes)
                        incoming = aside[:nbytes].view(own.dtype)
                        decode_into(buf, incoming)
                        torch.add(incoming, own, out=target)
                        POOL.give(aside)
                    else:                                 # incoming + own, as the unpipelined ring adds
                        decode_into(buf, target)
                        target.add_(own)
                    got.done()
                    return target, total
                f = dec_pool.submit(reduce_slice)
                pending.append(f)
                if not last:
                    _forward(enc_pool.submit(lambda f=f: framed(*f.result())), slots[("rs", s + 1, k)])
                elif gather:                              # shard r is complete: it goes round as it is
                    _forward(enc_pool.submit(lambda f=f: framed(*f.result())), slots[("ag", 0, k)])
            else:
                def decode_slice(buf=buf, got=got, out=dst[j][k]):
                    decode_into(buf, out)
                    got.done()
                pending.append(dec_pool.submit(decode_slice))
                if forwarded:
                    slots[("ag", s + 1, k)].set_result((frame, got))   # forward the bytes as they came
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
