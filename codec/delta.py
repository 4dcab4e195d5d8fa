"""Delta streams: a tensor coded against an earlier version of itself, losslessly (weight
synchronisation, checkpoint deltas).

    blob = codec.encode_delta(new, base)        # what changed from base to new
    out = codec.decode_delta(blob, base)        # == new, bit for bit (base untouched)
    codec.decode_delta(blob, base, out=base)    # or in place

After an optimizer step only a few percent of bf16 weights change, most by one or two units in the
last place.  A delta stream carries only the changed positions (gaps, :mod:`reference.delta`) and
each changed value's *step* in float order, not its bits: measured on real AdamW steps of the
packaged MiniLM (bench/results/weight_sync_*.md), the steps take ~0.3 bytes per change where the
new values through the float codec take ~1.5 and an XOR through zstd ~2.  The byte sections are
entropy-coded with zstd (Huffman-coded literals); the low gap bits, near-uniform, are stored raw.

Layout (little-endian)::

    delta_head   (DELTA_HEAD: magic "ZCDL", version, dtype code, flags, shift, counts, section sizes)
    gaps         zstd frame of n_changed bytes     (gap quotients; 255 = escaped)
    low bits     n_low raw bytes                   (shift bits per change, little-endian bit order)
    gap escapes  zstd frame of n_gap_esc u64
    steps        zstd frame of n_changed bytes     (zigzagged step less one; 255 = escaped)
    step escapes zstd frame of n_step_esc words    (the dtype's width)
    crc32c       u32 of everything before it, when flags & 1

An empty section (nothing to store) is zero bytes, not an empty frame.  Every count is checked
against the base's length before anything is allocated or written, and a stream that is not a
delta for this base raises :class:`codec.FormatError` with ``out`` untouched.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reference import delta as ref

from . import _delta_numba as nb
from .format import FormatError, crc32c
from .layouts import FloatLayout, as_words, host_array, is_torch, layout_by_code, layout_for
from .records import Record

__all__ = ["encode_delta", "decode_delta", "inspect_delta", "DeltaHeader", "DELTA_HEAD", "DELTA_VERSION"]

DELTA_MAGIC = b"ZCDL"
DELTA_VERSION = 1
FLAG_CHECKSUM = 1
DELTA_HEAD = Record("delta_head", [("magic", "4s"), ("version", "B"), ("dtype", "B"), ("flags", "B"),
                                   ("shift", "B"), ("numel", "Q"), ("n_changed", "Q"), ("n_gap_esc", "Q"),
                                   ("n_step_esc", "Q"), ("z_gaps", "Q"), ("n_low", "Q"), ("z_gap_esc", "Q"),
                                   ("z_steps", "Q"), ("z_step_esc", "Q")], prefix="DH")
_SECTIONS = ("z_gaps", "n_low", "z_gap_esc", "z_steps", "z_step_esc")
BACKENDS = ("numba", "reference")


@dataclass(frozen=True)
class DeltaHeader:
    layout: FloatLayout
    numel: int
    n_changed: int
    shift: int
    n_gap_esc: int
    n_step_esc: int
    sections: tuple[int, ...]         # stored sizes, in stream order
    checksum: bool

    @property
    def nbytes(self) -> int:
        return DELTA_HEAD.size + sum(self.sections) + 4 * self.checksum


def _zstd():
    import zstandard

    return zstandard


def _words_of(x, what: str):
    try:
        return as_words(x)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what}: {e}") from None


def encode_delta(new, base, *, checksum: bool = False, level: int = 1, backend: str = "numba") -> bytes:
    """The delta stream that turns ``base`` into ``new`` (same dtype and number of values; NumPy arrays
    or CPU torch tensors).  ``level``: zstd's level for the byte sections (1 is as small as 3 here and
    faster).  Neither input is modified."""
    nw, lay, _, _ = _words_of(new, "new")
    bw, blay, _, _ = _words_of(base, "base")
    if blay is not lay or bw.size != nw.size:
        raise ValueError(f"new ({lay.name}, {nw.size} values) and base ({blay.name}, {bw.size} values) differ")
    w = 8 * lay.itemsize
    if backend == "reference":
        s, qbytes, lowbits, qesc, vbytes, vesc = ref.split(nw, bw, w)
    elif backend == "numba":
        n = int(nb.count_changes(nw, bw))
        s = ref.shift_for(nw.size, n)
        qbytes, vbytes = np.empty(n, np.uint8), np.empty(n, np.uint8)
        lowbits = np.zeros(-(-n * s // 8), np.uint8)
        qesc, vesc = np.empty(n, "<u8"), np.empty(n, lay.uint)
        nq, nv = nb.emit(nw, bw, s, w, qbytes, lowbits, qesc, vbytes, vesc)
        qesc, vesc = qesc[:nq], vesc[:nv]
    else:
        raise ValueError(f"unknown backend {backend!r}; one of {BACKENDS}")
    zstd = _zstd()      # long matches only: in these near-random small-alphabet bytes short ones cost more than
    z = zstd.ZstdCompressor(    # they save (measured: -5 % on the steps of 1-2 units in the last place)
        compression_params=zstd.ZstdCompressionParameters.from_level(level, min_match=7))
    parts = [z.compress(qbytes.tobytes()) if qbytes.size else b"", lowbits.tobytes(),
             z.compress(qesc.astype("<u8").tobytes()) if qesc.size else b"",
             z.compress(vbytes.tobytes()) if vbytes.size else b"",
             z.compress(vesc.astype(vesc.dtype.newbyteorder("<")).tobytes()) if vesc.size else b""]
    head = DELTA_HEAD.pack(magic=DELTA_MAGIC, version=DELTA_VERSION, dtype=lay.code,
                           flags=FLAG_CHECKSUM if checksum else 0, shift=s, numel=nw.size, n_changed=qbytes.size,
                           n_gap_esc=qesc.size, n_step_esc=vesc.size,
                           **{k: len(p) for k, p in zip(_SECTIONS, parts)})
    blob = b"".join([head, *parts])
    return blob + crc32c(blob).to_bytes(4, "little") if checksum else blob


def inspect_delta(stream) -> DeltaHeader:
    """The checked header of a delta stream (raises :class:`codec.FormatError`)."""
    mv = memoryview(stream).cast("B")
    if len(mv) < DELTA_HEAD.size:
        raise FormatError(f"delta stream of {len(mv)} bytes is shorter than its {DELTA_HEAD.size}-byte header")
    f = DELTA_HEAD.unpack_from(mv)
    if f.magic != DELTA_MAGIC:
        raise FormatError(f"not a zipccl delta stream (magic {bytes(f.magic)!r})")
    if f.version != DELTA_VERSION:
        raise FormatError(f"delta stream version {f.version}; this zipccl reads version {DELTA_VERSION}")
    lay = layout_by_code(f.dtype)
    if lay is None:
        raise FormatError(f"unknown dtype code {f.dtype}")
    if f.flags & ~FLAG_CHECKSUM:
        raise FormatError(f"unknown flags {f.flags:#x}")
    if f.n_changed > f.numel or f.n_gap_esc > f.n_changed or f.n_step_esc > f.n_changed:
        raise FormatError(f"counts impossible: {f.n_changed} changes ({f.n_gap_esc} gap and {f.n_step_esc} step "
                          f"escapes) in {f.numel} values")
    if f.shift > max(1, f.numel).bit_length():
        raise FormatError(f"gap shift {f.shift} too large for {f.numel} values")
    if f.n_low != -(-f.n_changed * f.shift // 8):
        raise FormatError(f"{f.n_low} bytes of low gap bits for {f.n_changed} changes of {f.shift} bits")
    for name, raw in (("z_gaps", f.n_changed), ("z_gap_esc", f.n_gap_esc), ("z_steps", f.n_changed),
                      ("z_step_esc", f.n_step_esc)):
        if (getattr(f, name) == 0) != (raw == 0):
            raise FormatError(f"section {name[2:]} is {getattr(f, name)} bytes for {raw} entries")
    h = DeltaHeader(lay, f.numel, f.n_changed, f.shift, f.n_gap_esc, f.n_step_esc,
                    tuple(getattr(f, k) for k in _SECTIONS), bool(f.flags & FLAG_CHECKSUM))
    if len(mv) != h.nbytes:
        raise FormatError(f"delta stream is {len(mv)} bytes, its header implies {h.nbytes}")
    if h.checksum and crc32c(mv[:-4]) != int.from_bytes(mv[-4:], "little"):
        raise FormatError("delta stream checksum mismatch: corrupted")
    return h


def _sections(h: DeltaHeader, mv):
    """The five raw sections, each decompressed to exactly its announced size."""
    d = _zstd().ZstdDecompressor()
    dtypes = (np.uint8, np.uint8, np.dtype("<u8"), np.uint8, np.dtype(h.layout.uint).newbyteorder("<"))
    counts = (h.n_changed, h.sections[1], h.n_gap_esc, h.n_changed, h.n_step_esc)
    out, at = [], DELTA_HEAD.size
    for i, (dt, n, size) in enumerate(zip(dtypes, counts, h.sections)):
        part = mv[at:at + size]
        at += size
        want = n * np.dtype(dt).itemsize
        if i == 1:
            raw = bytes(part)
        elif size == 0:
            raw = b""
        else:
            try:
                raw = d.decompress(part, max_output_size=want)
            except Exception as e:  # noqa: BLE001 - zstd's error type differs between versions
                raise FormatError(f"delta section {i}: not a valid zstd frame ({e})") from None
        if len(raw) != want:
            raise FormatError(f"delta section {i} holds {len(raw)} bytes, its header announces {want}")
        out.append(np.frombuffer(raw, dt).astype(np.dtype(dt).newbyteorder("="), copy=False))
    return out


def decode_delta(stream, base, out=None, *, backend: str = "numba"):
    """``new`` from a stream of :func:`encode_delta` and the same ``base``: a fresh array/tensor like
    ``base``, or ``out`` (C-contiguous, same dtype and size; may be ``base`` itself) written in place.
    Raises :class:`codec.FormatError` (``out`` untouched) if the stream is bad or not for this base's
    dtype and size."""
    h = inspect_delta(stream)
    bw, lay, shape, _ = _words_of(base, "base")
    if lay is not h.layout or bw.size != h.numel:
        raise FormatError(f"delta stream is for {h.numel} {h.layout.name} values, base has {bw.size} {lay.name}")
    qbytes, lowbits, qesc, vbytes, vesc = _sections(h, memoryview(stream).cast("B"))
    w = 8 * lay.itemsize
    if backend == "reference":
        try:
            new = ref.apply(bw, w, h.shift, qbytes, lowbits, qesc, vbytes, vesc)
        except ref.DeltaFault as e:
            raise FormatError(f"delta stream: {e}") from None
    elif backend == "numba":
        fault = nb.check(h.numel, w, h.shift, qbytes, lowbits, qesc, vbytes, vesc)
        if fault:
            raise FormatError(f"delta stream: {nb.FAULTS[fault]}")
        new = None
    else:
        raise ValueError(f"unknown backend {backend!r}; one of {BACKENDS}")
    if out is None:
        out = base.clone() if is_torch(base) else np.array(base, copy=True)
        target = _writable_words(out, lay, h.numel)
    else:
        target = _writable_words(out, lay, h.numel)
        if not np.shares_memory(target, bw):
            target[:] = bw
    if new is not None:
        target[:] = new
    else:
        nb.apply(target, w, h.shift, qbytes, lowbits, qesc, vbytes, vesc)
    return out


def _writable_words(out, lay: FloatLayout, numel: int) -> np.ndarray:
    if is_torch(out):
        if out.device.type != "cpu" or not out.is_contiguous():
            raise ValueError("out must be a contiguous CPU tensor")
        if layout_for(out.dtype) is not lay or out.numel() != numel:
            raise ValueError(f"out is {out.dtype} with {out.numel()} values, the delta is for {numel} {lay.name}")
        return host_array(out.detach().view(lay.torch_view_ints)).view(lay.uint).reshape(-1)
    if not isinstance(out, np.ndarray) or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be a writable C-contiguous array")
    words, olay, _, _ = as_words(out)
    if olay is not lay or words.size != numel:
        raise ValueError(f"out is {out.dtype} with {out.size} values, the delta is for {numel} {lay.name}")
    return out.reshape(-1).view(lay.uint)

