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
"""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import torch
import torch.distributed as dist

import codec

__all__ = ["all_gather", "broadcast", "send", "recv", "all_reduce", "reduce_scatter", "all_to_all_single",
           "all_gather_into_tensor", "reduce_scatter_tensor", "allreduce_hook", "Work", "last_decision", "traffic"]

last_decision = None     # the strategy.Decision of the latest compress="auto" call (rank 0's, shared by all)
_CHOICES = ("uncompressed", "compressed-ring", "compressed-gather")

_MAX_DIMS = 8
_queue_lock = threading.Lock()
_queue: ThreadPoolExecutor | None = None


class Work:
    """Handle of an ``async_op=True`` call (like ``torch.distributed.Work``)."""

    def __init__(self, fut: Future):
        self._fut = fut

    def wait(self, timeout: float | None = None) -> bool:
        self._fut.result(timeout)
        return True

    def is_completed(self) -> bool:
        return self._fut.done()

    def get_future(self) -> Future:
        return self._fut


def _run(fn, async_op: bool):
    """Every call goes through one per-process queue, so calls reach the group in program order."""
    global _queue
    with _queue_lock:
        if _queue is None:
            _queue = ThreadPoolExecutor(1, thread_name_prefix="zipccl-collectives")
    fut = _queue.submit(_clear_errors(fn))
    if async_op:
        return Work(fut)
    fut.result()
    return None


def _clear_errors(fn):
    """Transport failures (a dead peer, the group's timeout) become one clear RuntimeError."""
    def run():
        try:
            return fn()
        except (ValueError, TypeError, NotImplementedError, codec.FormatError):
            raise
        except RuntimeError as e:
            raise RuntimeError(f"zipccl collective failed: a rank died or the group timed out ({e})") from e
    return run


# ----------------------------------------------------------------------------- framing
class Traffic:
    """Bytes this process framed for the wire: ``raw`` (tensor bytes) and ``framed`` (what was sent for
    them: codec streams, or the raw bytes when uncompressed).  ``ratio`` is the compression achieved."""

    def __init__(self):
        self._lock = threading.Lock()
        self.raw = self.framed = 0

    def add(self, raw: int, framed: int) -> None:
        with self._lock:
            self.raw += raw
            self.framed += framed

    @property
    def ratio(self) -> float:
        return self.raw / self.framed if self.framed else 1.0

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return self.raw, self.framed


traffic = Traffic()      # process-wide; counts every payload framed by the calls below


def _encode(t: torch.Tensor, compress: bool, checksum: bool) -> torch.Tensor:
    if not compress:
        out = t.detach().contiguous().reshape(-1).view(torch.uint8)     # sent as is: never written to
    else:
        out = torch.frombuffer(codec.encode(t.detach(), checksum=checksum), dtype=torch.uint8)
    traffic.add(t.numel() * t.element_size(), out.numel())
    return out


def _check_frame(stream, out: torch.Tensor, checksum: bool):
    """The header of a frame a peer sent for ``out``, checked before anything is decoded: the dtype and
    number of values must be ``out``'s (so the decoded size is bounded by this rank's own tensor, not
    by what the peer announces), and a receiver that asks for checksums gets a checksummed frame."""
    from codec import format as fmt
    from codec.layouts import layout_for

    h = fmt.parse_header(stream)
    if h.layout is not layout_for(out.dtype):
        raise TypeError(f"a peer sent {h.layout.name} values for a {out.dtype} tensor")
    if h.numel != out.numel():
        raise ValueError(f"a peer sent {h.numel} values for a tensor of {out.numel()}")
    if checksum and not h.checksum:
        raise codec.FormatError("a peer sent a frame without checksums although checksum=True here: "
                                "corruption would pass undetected")
    return h


def _decode_into(buf: torch.Tensor, out: torch.Tensor, compress: bool, checksum: bool = False) -> torch.Tensor:
    if not compress:
        if buf.numel() != out.numel() * out.element_size():
            raise ValueError(f"a peer sent {buf.numel()} bytes for a tensor of {out.numel() * out.element_size()}")
        out.view(-1).copy_(buf.view(out.dtype))
        return out
    stream = buf.numpy()
    _check_frame(stream, out, checksum)
    if out.is_contiguous():
        codec.decode(stream, out=out.detach())
    else:
        out.view(-1).copy_(codec.decode(stream).reshape(-1))
    return out


def _frame_limit(t: torch.Tensor, compress: bool) -> int:
    """The most bytes a frame for ``t`` can take: its raw size uncompressed; compressed, every chunk
    stored raw with the largest chunk table (one value per chunk, with checksums)."""
    from codec import format as fmt

    raw = t.numel() * t.element_size()
    return fmt.header_nbytes(t.dim(), t.numel(), True) + raw if compress else raw


def _describe(t: torch.Tensor) -> torch.Tensor:
    if t.dim() > _MAX_DIMS:
        raise ValueError(f"at most {_MAX_DIMS} dimensions are supported")
    d = torch.full((_MAX_DIMS + 2,), -1, dtype=torch.int64)
    d[0] = t.dim()
    d[1] = _DTYPES.index(t.dtype) if t.dtype in _DTYPES else -2
    d[2:2 + t.dim()] = torch.tensor(t.shape, dtype=torch.int64)
    return d


_DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn, torch.float8_e5m2]


def _check_agree(t: torch.Tensor, group, what: str) -> None:
    """All ranks must pass tensors of the same shape and dtype."""
    ws = dist.get_world_size(group)
    mine = _describe(t)
    if mine[1] == -2:
        raise TypeError(f"{what}: unsupported dtype {t.dtype}; supported: {', '.join(map(str, _DTYPES))}")
    all_ = [torch.empty_like(mine) for _ in range(ws)]
    dist.all_gather(all_, mine, group=group)
    bad = [r for r in range(ws) if not torch.equal(all_[r], all_[0])]
    if bad:
        def fmt(d):
            return f"{_DTYPES[int(d[1])] if d[1] >= 0 else '?'}{tuple(int(x) for x in d[2:2 + int(d[0])])}"
        raise ValueError(f"{what}: ranks disagree on shape/dtype: rank 0 has {fmt(all_[0])}, "
                         + ", ".join(f"rank {r} has {fmt(all_[r])}" for r in bad))


def _exchange(send_to: int, payload: torch.Tensor, recv_from: int, group) -> torch.Tensor:
    """Send ``payload`` to one peer while receiving a variable-size buffer from another."""
    n_out = torch.tensor([payload.numel()], dtype=torch.int64)
    n_in = torch.empty(1, dtype=torch.int64)
    reqs = [dist.isend(n_out, _global(send_to, group), group=group),
            dist.irecv(n_in, _global(recv_from, group), group=group)]
    for r in reqs:
        r.wait()
    buf = torch.empty(int(n_in), dtype=torch.uint8)
    reqs = [dist.isend(payload, _global(send_to, group), group=group),
            dist.irecv(buf, _global(recv_from, group), group=group)]
    for r in reqs:
        r.wait()
    return buf


def _global(rank: int, group) -> int:
    return rank if group is None else dist.get_global_rank(group, rank)


def _gather_buffers(payload: torch.Tensor, group) -> list[torch.Tensor]:
    ws = dist.get_world_size(group)
    n = torch.tensor([payload.numel()], dtype=torch.int64)
    sizes = [torch.empty_like(n) for _ in range(ws)]
    dist.all_gather(sizes, n, group=group)
    longest = int(max(int(s) for s in sizes))
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[:payload.numel()] = payload
    bufs = [torch.empty(longest, dtype=torch.uint8) for _ in range(ws)]
    dist.all_gather(bufs, padded, group=group)
    return [b[:int(s)] for b, s in zip(bufs, sizes)]


def _auto(op: str, tensor, group):
    """Rank 0 decides (collectives.strategy) and broadcasts the choice, so all ranks agree."""
    global last_decision
    from . import strategy

    code = torch.zeros(1, dtype=torch.int64)
    d = None
    if dist.get_rank(group) == 0:
        d = strategy.decide(op, tensor, dist.get_world_size(group))
        code[0] = _CHOICES.index(d.choice)
    dist.broadcast(code, _global(0, group), group=group)
    choice = _CHOICES[int(code)]
    last_decision = d if d is not None else strategy.Decision(op, choice)
    if choice == "uncompressed":
        return False, "native"            # compression does not pay: torch's own collective is fastest
    return True, ("gather" if choice == "compressed-gather" else "ring")


# ----------------------------------------------------------------------------- collectives
RING_MIN_NUMEL = 1 << 16     # below this, one padded all_gather of whole streams (fewer messages)


def all_gather(tensor_list, tensor, group=None, async_op=False, *, compress=True, checksum=False):
    """``tensor_list[r]`` = rank r's ``tensor``.  ``compress="auto"``: let the cost model decide."""
    def op():
        nonlocal compress
        _check_agree(tensor, group, "all_gather")
        if compress == "auto":
            compress, how = _auto("all_gather", tensor, group)
            if how == "native":
                dist.all_gather(tensor_list, tensor, group=group)
                return
        ws = dist.get_world_size(group)
        if ws > 1 and tensor.numel() >= RING_MIN_NUMEL:          # pipelined ring, compressed bytes forwarded
            flat = tensor.detach().contiguous().view(-1)
            for out, part in zip(tensor_list, _ring([flat] * ws, group, compress, checksum, reduce=False,
                                                    gather=True)):
                out.view(-1).copy_(part)
            return
        for out, buf in zip(tensor_list, _gather_buffers(_encode(tensor, compress, checksum), group)):
            _decode_into(buf, out, compress, checksum)
    return _run(op, async_op)


def broadcast(tensor, src, group=None, async_op=False, *, compress=True, checksum=False):
    """Rank ``src``'s ``tensor`` into every rank's ``tensor`` (``src`` is a global rank, as in torch)."""
    def op():
        _check_agree(tensor, group, "broadcast")
        me = dist.get_rank()
        payload = _encode(tensor, compress, checksum) if me == src else torch.empty(0, dtype=torch.uint8)
        n = torch.tensor([payload.numel()], dtype=torch.int64)
        dist.broadcast(n, src, group=group)
        if me != src:
            limit = _frame_limit(tensor, compress)
            if not 0 <= int(n) <= limit:
                raise ValueError(f"broadcast: rank {src} announced a {int(n)}-byte frame for {tensor.numel()} "
                                 f"values of {tensor.dtype} (at most {limit} can be right)")
            payload = torch.empty(int(n), dtype=torch.uint8)
        dist.broadcast(payload, src, group=group)
        if me != src:
            _decode_into(payload, tensor, compress, checksum)
    return _run(op, async_op)


PIPELINE_SLICE_BYTES = 8 << 20     # send/recv pipeline: encode slice i+1 while slice i is on the wire
_UINT = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def _as_numpy(t: torch.Tensor):
    """A NumPy view of a CPU tensor with the matching NumPy/ml_dtypes float dtype."""
    from codec.layouts import layout_for

    return t.view(_UINT[t.element_size()]).numpy().view(layout_for(t.dtype).numpy_dtype)


def _split_encode(part: torch.Tensor):
    """Split-send of one slice: (low-bit plane, to send at once; the head, still to be coded)."""
    from codec.planes import split_low

    head, low = split_low(_as_numpy(part))
    traffic.add(part.numel() * part.element_size() - head.nbytes, low.nbytes)
    return torch.from_numpy(low), head


def _encode_head(head, checksum: bool) -> torch.Tensor:
    out = torch.frombuffer(codec.encode(head, checksum=checksum), dtype=torch.uint8)
    traffic.add(head.nbytes, out.numel())
    return out


def send(tensor, dst, group=None, *, compress=True, checksum=False, slice_bytes: int = PIPELINE_SLICE_BYTES,
         split: bool = True):
    """Point-to-point send (blocking), pipelined: the tensor goes in slices of ``slice_bytes``; the
    next slice is encoded (GIL released) while the previous one is being sent, and the receiver
    decodes slice i while slice i+1 arrives.  The receiver calls :func:`recv` with a same-shape tensor.

    ``split=True`` (with compression; UCCL-Zip's split-send): each slice's low mantissa bits, which
    no entropy coder can shrink, go on the wire at once as a packed plane (:mod:`codec.planes`)
    while the rest of the slice (sign, exponent, leading mantissa bit) is being coded; the coded
    part follows.  Same bytes in total as coding the whole slice, but the wire starts right away.
    Used where it costs no ratio (:func:`codec.planes.worth_splitting`: not for float8, not for
    tensors with many zeros); otherwise whole slices are coded."""
    def op():
        flat = tensor.detach().contiguous().view(-1)
        n_slices = max(1, -(-flat.numel() * flat.element_size() // slice_bytes))
        parts = torch.tensor_split(flat, n_slices)
        from codec.planes import worth_splitting

        use_split = bool(compress and split and flat.numel() and worth_splitting(_as_numpy(parts[0])))
        dist.send(torch.tensor([n_slices, int(use_split)], dtype=torch.int64), dst, group=group)
        with ThreadPoolExecutor(1, thread_name_prefix="zipccl-encode") as pool:
            def prepare(part):
                """(low-bit plane or None, future of the coded frame) of one slice."""
                if use_split:
                    low, head = _split_encode(part)
                    return low, pool.submit(_encode_head, head, checksum)
                return None, pool.submit(_encode, part, compress, checksum)

            low, fut = prepare(parts[0])
            for i in range(n_slices):
                if low is not None:
                    dist.send(low, dst, group=group)                 # while the head is being coded
                nxt = prepare(parts[i + 1]) if i + 1 < n_slices else None
                payload = fut.result()
                dist.send(torch.tensor([payload.numel()], dtype=torch.int64), dst, group=group)
                dist.send(payload, dst, group=group)
                if nxt is not None:
                    low, fut = nxt
    _run(op, False)


def _join_into(low: torch.Tensor, payload: torch.Tensor, out: torch.Tensor, checksum: bool) -> None:
    from codec.planes import join_low

    stream = payload.numpy()
    _check_frame(stream, out, checksum)
    _as_numpy(out.view(-1))[:] = join_low(codec.decode(stream), low.numpy()).reshape(-1)


def recv(tensor, src, group=None, *, compress=True, checksum=False):
    """Receive what :func:`send` sent (split or not) into ``tensor``; returns ``src``."""
    def op():
        from codec.layouts import layout_for, packed_nbytes

        flat = tensor.view(-1)
        hdr = torch.empty(2, dtype=torch.int64)
        dist.recv(hdr, src, group=group)
        n_slices, use_split = int(hdr[0]), int(hdr[1])
        if not 1 <= n_slices <= max(1, flat.numel()) or use_split not in (0, 1) or (use_split and not compress):
            raise ValueError(f"recv: sender announced {n_slices} slices (split={use_split}) for {flat.numel()} "
                             f"values (compress={compress})")
        parts = torch.tensor_split(flat, n_slices)
        n = torch.empty(1, dtype=torch.int64)
        with ThreadPoolExecutor(1, thread_name_prefix="zipccl-decode") as pool:
            pending = []
            for part in parts:
                low = None
                if use_split:
                    low = torch.empty(packed_nbytes(part.numel(), layout_for(part.dtype).man_bits - 1),
                                      dtype=torch.uint8)
                    dist.recv(low, src, group=group)
                dist.recv(n, src, group=group)
                limit = _frame_limit(part, compress)
                if not 0 <= int(n) <= limit:
                    raise ValueError(f"recv: sender announced a {int(n)}-byte frame for {part.numel()} values")
                payload = torch.empty(int(n), dtype=torch.uint8)
                dist.recv(payload, src, group=group)
                if use_split:
                    pending.append(pool.submit(_join_into, low, payload, part, checksum))
                else:
                    pending.append(pool.submit(_decode_into, payload, part, compress, checksum))
            for f in pending:
                f.result()
    _run(op, False)
    return src


def _ring(shards, group, compress, checksum, *, reduce=True, gather=False):
    """The slice-pipelined ring of :mod:`collectives.ring` with this module's framing."""
    from .ring import ring

    return ring(shards, group, lambda t: _encode(t, compress, checksum),
                lambda buf, out: _decode_into(buf, out, compress, checksum), reduce=reduce, gather=gather,
                global_rank=lambda r: _global(r, group))


def reduce_scatter(output, input_list, op=dist.ReduceOp.SUM, group=None, async_op=False, *, compress=True,
                   checksum=False):
    """``output`` = sum over ranks of ``input_list[rank]`` (ring algorithm)."""
    if op != dist.ReduceOp.SUM:
        raise NotImplementedError("only ReduceOp.SUM is supported")

    def run():
        _check_agree(output, group, "reduce_scatter")
        if dist.get_world_size(group) == 1:
            output.copy_(input_list[0])
            return
        mine = _ring([t.contiguous().view(-1) for t in input_list], group, compress, checksum)
        output.view(-1).copy_(mine[dist.get_rank(group)])
    return _run(run, async_op)


def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False, *, algorithm="auto", compress=True,
               checksum=False):
    """In-place sum over ranks.  ``algorithm``: "ring", "gather", "auto" (gather below 64K values) or
    "native" (torch's own all_reduce, uncompressed only).  ``compress="auto"``: the cost model of
    :mod:`collectives.strategy` picks; where compression does not pay it runs "native", whose
    summation order is gloo's (pass ``compress=False`` for this module's ring order, bit-identical to
    the compressed ring)."""
    if op != dist.ReduceOp.SUM:
        raise NotImplementedError("only ReduceOp.SUM is supported")

    def run():
        nonlocal compress, algorithm
        _check_agree(tensor, group, "all_reduce")
        ws = dist.get_world_size(group)
        if ws == 1:
            return
        if compress == "auto":
            compress, algorithm = _auto("all_reduce", tensor, group)
        algo = algorithm if algorithm != "auto" else ("gather" if tensor.numel() < RING_MIN_NUMEL else "ring")
        if algo == "native":
            if compress:
                raise ValueError("algorithm='native' is torch's own all_reduce: use compress=False or 'auto'")
            t = tensor if tensor.is_contiguous() else tensor.contiguous()
            dist.all_reduce(t, group=group)
            if t is not tensor:
                tensor.copy_(t)
            return
        flat = tensor.detach().contiguous().view(-1)
        if algo == "gather":
            parts = [torch.empty_like(flat) for _ in range(ws)]
            for out, buf in zip(parts, _gather_buffers(_encode(flat, compress, checksum), group)):
                _decode_into(buf, out, compress, checksum)
            acc = parts[0].clone()
            for p in parts[1:]:
                acc = acc + p
        elif algo == "ring":
            acc = torch.cat(_ring(list(torch.tensor_split(flat, ws)), group, compress, checksum, gather=True))
        else:
            raise ValueError(f"unknown algorithm {algorithm!r}: ring, gather, native or auto")
        tensor.view(-1).copy_(acc)
    return _run(run, async_op)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                      async_op=False, *, compress=True, checksum=False):
    """Rank r sends ``input``'s i-th split (dim 0) to rank i and receives rank i's r-th split."""
    def run():
        ws = dist.get_world_size(group)
        r = dist.get_rank(group)
        ins = list(torch.split(input, input_split_sizes or [input.shape[0] // ws] * ws))
        outs = list(torch.split(output, output_split_sizes or [output.shape[0] // ws] * ws))
        outs[r].copy_(ins[r])
        for step in range(1, ws):
            to, frm = (r + step) % ws, (r - step) % ws
            buf = _exchange(to, _encode(ins[to], compress, checksum), frm, group)
            if outs[frm].numel():
                _decode_into(buf, outs[frm], compress, checksum)
            elif buf.numel() and compress:
                codec.decode(buf.numpy())          # still validate what arrived
    return _run(run, async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False, *, compress=True,
                           checksum=False):
    """FSDP's all-gather: ``output_tensor`` (world_size * n values, flat or stacked) = every rank's
    ``input_tensor`` (n values) concatenated in rank order."""
    ws = dist.get_world_size(group)
    if output_tensor.numel() != ws * input_tensor.numel():
        raise ValueError(f"all_gather_into_tensor: output has {output_tensor.numel()} values, expected "
                         f"{ws} x {input_tensor.numel()}")
    parts = list(output_tensor.view(-1).chunk(ws)) if input_tensor.numel() else [
        output_tensor.view(-1)[:0] for _ in range(ws)]
    return all_gather(parts, input_tensor.reshape(-1), group, async_op, compress=compress, checksum=checksum)


def reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False, *, compress=True,
                          checksum=False):
    """FSDP's reduce-scatter: ``input`` (world_size * n values) summed over ranks; rank r keeps slice r."""
    ws = dist.get_world_size(group)
    if input.numel() != ws * output.numel():
        raise ValueError(f"reduce_scatter_tensor: input has {input.numel()} values, expected {ws} x {output.numel()}")
    return reduce_scatter(output.view(-1), list(input.reshape(-1).chunk(ws)) if output.numel() else
                          [input.reshape(-1)[:0]] * ws, op, group, async_op, compress=compress, checksum=checksum)


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

