"""Lossless weight synchronisation from one rank (a trainer) to the others (inference workers): full
or delta, pipelined down a chain of receivers.

    sync = collectives.WeightSync(model.named_parameters(), src=0)
    stats = sync.push()      # on src, after each optimizer step (or every k steps)
    stats = sync.pull()      # on every other rank: its own tensors get the source's values, in place

**Full and delta.**  The first sync sends every value, coded by the float codec.  After it, both sides
keep the last synced version, and only what changed travels: a delta stream per piece
(:mod:`codec.delta`: the changed positions and each changed value's step in float order; after one
optimizer step a few percent of bf16 weights change, most by one or two units in the last place).
Per piece the source keeps the smaller of the delta and the full stream.  Every sync ends with a
CRC32C digest of all synced values; a receiver whose values then differ from the source's raises
(it does not commit them), and a sync starts with every rank's (version, digest): one receiver that
missed a sync, failed one, or holds other values makes that sync a full one, never a wrong delta.

**Many receivers.**  The source's link carries one copy: the ranks form a chain (``src``, ``src+1``,
...), each receiver forwards the bytes as they arrive to the next one while decoding them, and the
tensors go in pieces of ``piece_bytes`` so that every link and every decoder works at once (like
NCCL's pipelined ring broadcast).  Time ~ one transfer of the coded bytes + one piece per hop.

**Old or new, never a mix.**  Receivers decode into a staging copy (it is also the delta's base) and
copy it into their tensors only once every piece is in and the digest matches; a receiver that fails
keeps its old values and says so to the source, whose :meth:`WeightSync.push` raises naming it.  A
dead receiver makes the source and those after it raise within the group's timeout; the ones before
it commit.  Memory: receivers hold one extra copy of the weights, the source two (the last synced
version and the snapshot being sent).  A receiver with ``staging=False`` holds none: it decodes
straight into its tensors (pieces never straddle a big tensor), which are then its delta base, and a
failed sync tells it which tensors were written (:attr:`SyncError.updated`).

Tensors: every dtype the codec takes is coded; others (integer buffers) travel raw.  Tensors may be on
a GPU: they are staged through host memory (the transport here is gloo's).
"""
from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
import torch.distributed as dist

import codec
from codec.layouts import host_array
from codec.delta import decode_delta, encode_delta, inspect_delta
from codec.format import crc32c
from codec.layouts import SUPPORTED

from . import framing, strategy
from .ring import POOL, _Lease
from .transport import global_rank

__all__ = ["WeightSync", "SyncStats", "SyncError"]

PIECE_BYTES = 4 << 20           # measured on the emulated cluster (MiniLM, 1 Gbit/s): 2 MiB 0.55-0.73 s, 4 MiB 0.37 s, 8 MiB 0.41 s, 16 MiB 0.51 s
FULL, DELTA, RAW, END = 1, 2, 3, 4                  # piece kinds
OK, FAILED, NOT_FORWARDED = 5, 6, 7                # a receiver's answer to the source
_MASK63 = (1 << 63) - 1


class SyncError(RuntimeError):
    """A sync failed on some rank (``rank``).  With staging the tensors of a rank that raises it are
    unchanged; without, ``updated`` names the ones it wrote (they hold the new values)."""

    def __init__(self, msg: str, rank: int | None = None):
        super().__init__(msg)
        self.rank = rank
        self.updated: list[str] = []


@dataclass
class SyncStats:
    version: int                 # the version now held (the source counts its pushes)
    mode: str                    # "full" or "delta"
    raw_bytes: int               # the tensors' bytes
    wire_bytes: int              # bytes of this sync on each link of the chain (payloads and headers)
    seconds: float
    changed_fraction: float | None   # delta: changed values / values (None in a full sync)
    pieces_full: int = 0
    pieces_delta: int = 0
    pieces_raw: int = 0              # sent uncompressed (compress=False, or "auto" on a link faster than the codec)

    @property
    def ratio(self) -> float:
        return self.raw_bytes / max(1, self.wire_bytes)


class _Group:
    """The tensors of one dtype as one flat buffer (members in order) and its pieces: ranges of the flat
    that either lie inside one tensor (a tensor of half a piece or more starts its own pieces) or cover
    whole small tensors, so that a receiver without staging decodes big tensors in place."""

    def __init__(self, dtype: torch.dtype, members: list[tuple[int, int, int]], piece_bytes: int):
        self.dtype = dtype
        self.coded = str(dtype).removeprefix("torch.") in SUPPORTED
        self.members = members                   # (tensor index, offset, numel)
        self.numel = sum(n for _, _, n in members)
        self.itemsize = torch.empty(0, dtype=dtype).element_size()
        per = max(1, piece_bytes // self.itemsize)
        self.pieces, start = [], 0               # start: of the bundle of small tensors being filled
        for _, off, n in members:
            if 2 * n >= per:
                if start < off:
                    self.pieces.append((start, off))
                self.pieces += [(a, min(a + per, off + n)) for a in range(off, off + n, per)]
                start = off + n
            elif off + n - start > per:
                self.pieces.append((start, off))
                start = off
        if start < self.numel:
            self.pieces.append((start, self.numel))

    def segments(self, a: int, b: int):
        """(tensor index, start, stop) of the values of flat range [a, b), in order."""
        return [(i, max(a, off) - off, min(b, off + n) - off) for i, off, n in self.members
                if off < b and off + n > a and n]

    def flat(self) -> torch.Tensor:
        return torch.empty(self.numel, dtype=self.dtype)


class WeightSync:
    """Synchronise ``named_tensors`` (a dict or ``named_parameters()``: the same names, shapes and dtypes
    on every rank of ``group``) from ``src`` (a rank of ``group``) to every other rank.

    ``delta``: send only what changed once both sides hold a common version.  ``checksum``: CRC32C in
    every coded piece (a corrupted one raises :class:`codec.FormatError` on the receiver that decodes
    it; without it, the final digest still refuses corrupted values).  ``compress``: code a full sync
    (True), send it raw (False), or ``"auto"``: the link is measured in the first sync (a ping-pong,
    :func:`collectives.strategy.calibrate`) and a full sync is sent raw where the codec, on the cores
    this rank has, would be slower than the wire (delta syncs are always coded).  ``staging``
    (receivers): decode into a staging copy and commit all tensors at the end (old or new, never a
    mix; one extra copy of the weights in memory), or, ``False``, straight into the tensors (no extra
    memory, no commit copy; the tensors are then the delta's base, their digest is taken before each
    sync, so a local change to them gets a full sync; a failed sync raises :class:`SyncError` with
    ``updated``, the names of the tensors it wrote).  ``piece_bytes``: the pipeline's
    unit.  Every rank constructs it, then the source calls :meth:`push` and the others :meth:`pull`, as
    often as wanted, in the same order (a sync is a collective of ``group``)."""

    def __init__(self, named_tensors, src: int = 0, group=None, *, delta: bool = True, checksum: bool = False,
                 compress: bool | str = "auto", staging: bool = True, piece_bytes: int = PIECE_BYTES,
                 level: int = 1):
        items = list(named_tensors.items() if isinstance(named_tensors, dict) else named_tensors)
        if not items:
            raise ValueError("WeightSync: no tensors")
        self.names = [n for n, _ in items]
        if len(set(self.names)) != len(self.names):
            raise ValueError("WeightSync: duplicate tensor names")
        self.tensors = [t for _, t in items]
        if compress not in (True, False, "auto"):
            raise ValueError(f"compress must be True, False or 'auto', not {compress!r}")
        self.group, self.src, self.delta, self.checksum, self.level = group, src, delta, checksum, level
        self.compress, self._link, self.staging = compress, None, staging
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        if not 0 <= src < self.world:
            raise ValueError(f"src {src} is not a rank of the group (size {self.world})")
        self.chain = [(src + k) % self.world for k in range(self.world)]
        self.piece_bytes = int(piece_bytes)
        groups: dict[torch.dtype, list] = {}
        for i, t in enumerate(self.tensors):
            g = groups.setdefault(t.dtype, [])
            g.append((i, sum(n for _, _, n in g), t.numel()))
        self.groups = [_Group(dt, m, self.piece_bytes) for dt, m in groups.items()]
        self.spec = [(n, str(t.dtype).removeprefix("torch."), tuple(t.shape)) for n, t in items]
        h = hashlib.sha256(repr((self.spec, self.piece_bytes, self.delta, self.compress)).encode()).digest()
        self._spec_digest = int.from_bytes(h[:8], "little") & _MASK63
        self.version, self.digest = 0, 0
        self._base = None                        # the last synced version (source) / staging (receivers)
        self._spare = None                       # the source's snapshot buffers, reused

    # -- the parts every rank runs ----------------------------------------------------------------

    def _control(self) -> tuple[bool, int]:
        """All ranks' (spec, version, digest): (delta or full, the new version), identical on every rank;
        a rank whose tensors differ in name, shape or dtype makes every rank raise, naming the first."""
        mine = torch.tensor([self._spec_digest, self.version, self.digest], dtype=torch.int64)
        rows = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(rows, mine, group=self.group)
        rows = [r.tolist() for r in rows]
        if any(r[0] != rows[self.src][0] for r in rows):
            specs = [None] * self.world
            dist.all_gather_object(specs, (self.spec, (self.piece_bytes, self.delta, self.compress)),
                                   group=self.group)
            raise ValueError(_first_mismatch(specs, self.src))
        if self.compress == "auto" and self._link is None and self.world > 1:
            self._link = strategy.calibrate(self.group, save=False)        # every rank, once
        s = rows[self.src]
        delta = self.delta and s[1] >= 1 and all(r[1:] == s[1:] for r in rows)
        return delta, s[1] + 1

    def _code_full(self, cur) -> bool:
        """Whether a full sync is coded: with ``compress="auto"``, where the predicted time of the coded
        chain, max(wire of the coded bytes, the source's encode, a receiver's decode), beats the raw
        chain's wire time."""
        if self.compress != "auto":
            return self.compress
        coded = [f for g, f in zip(self.groups, cur) if g.coded]
        if not coded or self._link is None:
            return True
        raw = sum(f.numel() * f.element_size() for f in coded)
        ratio = strategy.sample_ratio(max(coded, key=lambda f: f.numel()))
        enc, dec = strategy.codec_throughput()
        cores = strategy.cores_per_rank()
        coded_s = max(raw / ratio / self._link.beta, raw / (enc * cores), raw / (dec * cores))
        return coded_s < raw / self._link.beta

    @staticmethod
    def _digest(tensors) -> int:
        """CRC32C of the tensors' bytes in turn: the flats of the groups, or the members of every group in
        order (the same bytes)."""
        d = 0
        for t in tensors:
            d = crc32c(host_array(t.detach().cpu().contiguous().view(-1).view(torch.uint8)), d)
        return d & _MASK63

    # -- the delta coding of one piece (a benchmark may substitute another) -----------------------

    def encode_delta_piece(self, piece: torch.Tensor, base: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(the frame that turns ``base`` into ``piece``, the number of values that changed)."""
        blob = encode_delta(piece, base, checksum=self.checksum, level=self.level)
        return torch.frombuffer(bytearray(blob), dtype=torch.uint8), inspect_delta(blob).n_changed

    def apply_delta_piece(self, frame: torch.Tensor, out: torch.Tensor) -> int:
        """Apply a frame of :meth:`encode_delta_piece` to ``out`` (holding the base) in place; the
        number of values that changed.  Raises :class:`codec.FormatError` with ``out`` untouched."""
        stream = host_array(frame)
        h = inspect_delta(stream)
        if self.checksum and not h.checksum:
            raise codec.FormatError("the source sent a delta without checksum although checksum=True here")
        decode_delta(stream, out, out=out)
        return h.n_changed

    # -- source -------------------------------------------------------------------------------------

    def push(self) -> SyncStats:
        """Send the tensors' current values down the chain; returns once every receiver has them (or
        raises :class:`SyncError` naming the first receiver that failed)."""
        if self.rank != self.src:
            raise RuntimeError(f"push() is for rank {self.src} (the source); this is rank {self.rank}: call pull()")
        t0 = time.perf_counter()
        delta, version = self._control()
        cur, self._spare = self._spare or [g.flat() for g in self.groups], None
        for g, flat in zip(self.groups, cur):
            for i, off, n in g.members:
                flat[off:off + n].copy_(self.tensors[i].detach().reshape(-1), non_blocking=False)
        base = self._base if delta else None
        code_full = delta or self._code_full(cur)
        stats = SyncStats(version, "delta" if delta else "full", sum(f.numel() * f.element_size() for f in cur),
                          0, 0.0, None)
        changed = [0, 0]
        nxt = global_rank(self.chain[1], self.group) if self.world > 1 else None
        hdr = torch.empty(2, dtype=torch.int64)

        def full(piece):
            lease = _Lease(POOL.take(framing.frame_limit(piece, True)))      # pooled: no fresh pages per piece
            return FULL, framing.encode(piece, True, self.checksum, out=lease.buf), lease

        def code(gi, a, b):
            """(kind, frame, lease of the frame's buffer or None) of one piece."""
            g, piece = self.groups[gi], cur[gi][a:b]
            if not g.coded or not code_full:
                return RAW, piece.view(torch.uint8), None
            if base is None:
                return full(piece)
            blob, n_changed = self.encode_delta_piece(piece, base[gi][a:b])
            changed[0] += n_changed
            changed[1] += piece.numel()
            if blob.numel() * 2 < piece.numel() * piece.element_size():
                return DELTA, blob, None
            kind, frame, lease = full(piece)
            if blob.numel() < frame.numel():
                lease.done()
                return DELTA, blob, None
            return kind, frame, lease

        jobs = [(gi, a, b) for gi, g in enumerate(self.groups) for a, b in g.pieces]
        if nxt is not None:
            with ThreadPoolExecutor(1, thread_name_prefix="zipccl-sync-encode") as pool:
                futs = [pool.submit(code, *j) for j in jobs[:2]]
                for k in range(len(jobs)):
                    kind, payload, lease = futs[k].result()
                    if k + 2 < len(jobs):
                        futs.append(pool.submit(code, *jobs[k + 2]))
                    stats.pieces_full += kind == FULL
                    stats.pieces_delta += kind == DELTA
                    stats.pieces_raw += kind == RAW and self.groups[jobs[k][0]].coded
                    hdr[0], hdr[1] = kind, payload.numel()
                    self._send(hdr, nxt)
                    self._send(payload, nxt)
                    if lease is not None:
                        lease.done()
                    stats.wire_bytes += payload.numel() + hdr.numel() * 8
        digest = self._digest(cur)
        if nxt is not None:
            hdr[0], hdr[1] = END, digest
            self._send(hdr, nxt)
            stats.wire_bytes += 16
            self._collect_acks()
        self._spare, self._base, self.version, self.digest = self._base, cur, version, digest
        stats.changed_fraction = changed[0] / changed[1] if delta and changed[1] else None
        stats.seconds = time.perf_counter() - t0
        return stats

    def _send(self, t, dst):
        try:
            dist.send(t, dst, group=self.group)
        except RuntimeError as e:
            raise SyncError(f"WeightSync: sending to rank {self.chain[1]} failed (dead or timed out): {e}",
                            self.chain[1]) from e

    def _collect_acks(self):
        ack = torch.empty(2, dtype=torch.int64)
        failed = []
        for r in self.chain[1:]:
            try:
                dist.recv(ack, global_rank(r, self.group), group=self.group)
            except RuntimeError as e:
                raise SyncError(f"WeightSync: rank {r} did not confirm the sync (dead or timed out): {e}", r) from e
            if int(ack[0]) == NOT_FORWARDED:
                lost = int(ack[1])
                raise SyncError(f"WeightSync: rank {r} could not forward the sync to rank {lost} (dead or timed "
                                f"out); ranks up to {r} have it" + (f", except {failed}" if failed else ""), lost)
            if int(ack[0]) != OK:
                failed.append(r)
        if failed:
            raise SyncError(f"WeightSync: the sync failed on rank(s) {failed}; they kept their previous values "
                            f"(their own error says why)", failed[0])

    # -- receivers ----------------------------------------------------------------------------------

    def pull(self) -> SyncStats:
        """Receive the source's values into this rank's tensors, in place: with staging, all or none;
        without, a failed sync raises :class:`SyncError` whose ``updated`` names the tensors it wrote."""
        if self.rank == self.src:
            raise RuntimeError(f"pull() is for the receivers; rank {self.rank} is the source: call push()")
        t0 = time.perf_counter()
        if not self.staging and self.version:
            self.digest = self._digest_tensors()       # the base is the tensors themselves: changed here?
        delta, version = self._control()
        pos = self.chain.index(self.rank)
        prv = global_rank(self.chain[pos - 1], self.group)
        nxt = global_rank(self.chain[pos + 1], self.group) if pos + 1 < self.world else None
        if self.staging and self._base is None:
            self._base = [g.flat() for g in self.groups]
        stats = SyncStats(version, "delta" if delta else "full",
                          sum(t.numel() * t.element_size() for t in self.tensors), 0, 0.0, None)
        self.version, self.digest = 0, 0             # until this sync commits, the staging is no base
        error: list[BaseException] = []
        changed = [0, 0]
        updated: set[int] = set()

        def decode(kind, payload, gi, a, b, lease, out, scatter):
            try:
                if error:
                    return
                g = self.groups[gi]
                if kind == RAW and not (delta and g.coded):
                    if payload.numel() != out.numel() * out.element_size():
                        raise codec.FormatError(f"raw piece of {payload.numel()} bytes for {out.numel()} values")
                    out.view(torch.uint8).copy_(payload)
                elif kind == FULL and g.coded:
                    framing.decode_into(payload, out, True, self.checksum)
                elif kind == DELTA and delta and g.coded:
                    changed[0] += self.apply_delta_piece(payload, out)
                    changed[1] += out.numel()
                else:
                    raise codec.FormatError(f"piece kind {kind} where a {'delta' if delta else 'full'} sync "
                                            f"of {g.dtype} values was expected")
                self._scatter(scatter, out)
                if not self.staging:
                    updated.update(i for i, _, _ in g.segments(a, b))
            except BaseException as e:  # noqa: BLE001 - reported after the stream is drained
                error.append(e)
            finally:
                if lease is not None:
                    lease.done()

        hdr = torch.empty(2, dtype=torch.int64)
        fwd = ThreadPoolExecutor(1, thread_name_prefix="zipccl-sync-forward") if nxt is not None else None
        dec = ThreadPoolExecutor(1, thread_name_prefix="zipccl-sync-decode")
        sent = []
        try:
            for gi, g in enumerate(self.groups):
                for a, b in g.pieces:
                    dist.recv(hdr, prv, group=self.group)
                    kind, n = int(hdr[0]), int(hdr[1])
                    raw = (b - a) * g.itemsize
                    limit = framing.frame_limit(torch.empty(b - a, dtype=g.dtype, device="meta"), True) \
                        if g.coded else raw
                    if kind not in (FULL, DELTA, RAW) or not 0 <= n <= max(limit, raw + (1 << 16)):
                        raise codec.FormatError(f"WeightSync: the source announced a piece of kind {kind} and "
                                                f"{n} bytes for {b - a} values")
                    out, scatter = self._target(gi, a, b, gather=delta)
                    if kind == RAW and n == raw and not (delta and g.coded) and scatter is None:
                        payload, lease = out.view(torch.uint8), None      # straight into its place
                    else:                     # a pooled buffer: no fresh pages per piece
                        lease = _Lease(POOL.take(n), 2 if fwd is not None else 1)
                        payload = lease.buf[:n]
                    dist.recv(payload, prv, group=self.group)
                    stats.wire_bytes += 16 + n
                    if fwd is not None:
                        sent.append(fwd.submit(self._forward, hdr.clone(), payload, nxt, lease))
                    if lease is not None or scatter is not None:
                        dec.submit(decode, kind, payload, gi, a, b, lease, out, scatter)
                    elif not self.staging:
                        updated.update(i for i, _, _ in g.segments(a, b))
            dist.recv(hdr, prv, group=self.group)
            if int(hdr[0]) != END:
                raise codec.FormatError(f"WeightSync: expected the end of the sync, got kind {int(hdr[0])}")
            want = int(hdr[1])
            stats.wire_bytes += 16
            if fwd is not None:
                sent.append(fwd.submit(self._forward, hdr.clone(), None, nxt))
            dec.shutdown(wait=True)
        except RuntimeError as e:
            dec.shutdown(wait=False, cancel_futures=True)
            if isinstance(e, SyncError):
                raise
            raise self._failed(SyncError(f"WeightSync: rank {self.rank}: the chain broke (a rank died or timed "
                                         f"out): {e}", self.rank), updated) from e
        except codec.FormatError as e:
            dec.shutdown(wait=False, cancel_futures=True)
            raise self._failed(e, updated)
        finally:
            if fwd is not None:
                fwd.shutdown(wait=False)
        forwarded = True
        for f in sent:                 # a dead next rank: this one still has every piece and may commit
            if f.exception() is not None:
                forwarded = False
                break
        got = self._digest(self._base) if self.staging else self._digest_tensors()
        if not error and got != want:
            error.append(codec.FormatError("WeightSync: the received values differ from the source's "
                                           "(digest mismatch): corrupted in transit"))
        ack = torch.tensor([FAILED if error else OK if forwarded else NOT_FORWARDED,
                            self.chain[pos + 1] if not forwarded else 0], dtype=torch.int64)
        dist.send(ack, global_rank(self.src, self.group), group=self.group)
        if error:
            raise self._failed(error[0], updated)
        if self.staging:                                      # commit: all tensors or none
            for g, flat in zip(self.groups, self._base):
                self._scatter(g.segments(0, g.numel), flat)
        self.version, self.digest = version, want
        stats.changed_fraction = changed[0] / changed[1] if delta and changed[1] else None
        stats.seconds = time.perf_counter() - t0
        return stats

    def _target(self, gi: int, a: int, b: int, gather: bool):
        """(where piece [a, b) of group ``gi`` is decoded, the segments to copy it to afterwards or None).
        With staging: the staging's slice.  Without: the tensor's own memory where the piece lies inside
        one contiguous CPU tensor, else a buffer (holding the tensors' values if ``gather``: a delta's
        base) scattered to them once decoded."""
        g = self.groups[gi]
        if self.staging:
            return self._base[gi][a:b], None
        seg = g.segments(a, b)
        if len(seg) == 1:
            t = self.tensors[seg[0][0]]
            if t.device.type == "cpu" and t.is_contiguous():
                return t.detach().view(-1)[seg[0][1]:seg[0][2]], None
        buf = torch.empty(b - a, dtype=g.dtype)
        if gather:
            at = 0
            for i, lo, hi in seg:
                buf[at:at + hi - lo].copy_(self.tensors[i].detach().reshape(-1)[lo:hi])
                at += hi - lo
        return buf, seg

    def _scatter(self, segments, values: torch.Tensor) -> None:
        """Copy ``values`` (the segments' values in order) into the tensors."""
        if segments is None:
            return
        at = 0
        for i, lo, hi in segments:
            t = self.tensors[i].detach()
            part = values[at:at + hi - lo]
            if t.is_contiguous():
                t.view(-1)[lo:hi].copy_(part)
            else:                                             # strided: through a contiguous copy of it
                whole = t.reshape(-1).clone()
                whole[lo:hi] = part
                t.copy_(whole.view(t.shape))
            at += hi - lo

    def _failed(self, err: BaseException, updated: set) -> BaseException:
        """The error a failed pull raises: as it is with staging (nothing was written), else a
        :class:`SyncError` saying which tensors hold the new values (``updated``)."""
        if self.staging:
            return err
        names = [self.names[i] for i in sorted(updated)]
        e = SyncError(f"{err} (no staging: {len(names)} of {len(self.names)} tensors were updated"
                      + (f": {', '.join(names[:8])}{', ...' if len(names) > 8 else ''})" if names else ")"), self.rank)
        e.updated = names
        e.__cause__ = err
        return e

    def _digest_tensors(self) -> int:
        return self._digest(self.tensors[i] for g in self.groups for i, _, _ in g.members)

    def _forward(self, hdr, payload, dst, lease=None) -> None:
        try:
            dist.send(hdr, dst, group=self.group)
            if payload is not None:
                dist.send(payload, dst, group=self.group)
        finally:
            if lease is not None:
                lease.done()


def _first_mismatch(specs, src: int) -> str:
    ref_spec, ref_opts = specs[src]
    for r, (spec, opts) in enumerate(specs):
        if r == src:
            continue
        if opts != ref_opts:
            return (f"WeightSync: rank {r} uses (piece_bytes, delta, compress) = {opts}; rank {src} (the source) "
                    f"{ref_opts}")
        for k in range(max(len(spec), len(ref_spec))):
            a = ref_spec[k] if k < len(ref_spec) else None
            b = spec[k] if k < len(spec) else None
            if a != b:
                def say(x):
                    return "nothing" if x is None else f"{x[0]!r} {x[1]}{list(x[2])}"
                return f"WeightSync: tensor {k} differs: rank {src} (source) has {say(a)}, rank {r} has {say(b)}"
    return "WeightSync: the ranks' tensor lists differ"
