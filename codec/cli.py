"""Command line tool: ``zipccl`` / ``python -m codec``.

::

    python -m codec compress   IN [OUT]   # .safetensors, .npy, or raw words with --dtype NAME
    python -m codec decompress IN [OUT]   # byte-identical original file
    python -m codec inspect    IN         # an archive (ZCAR) or a bare codec stream (ZCCL)

``compress`` writes ``OUT`` (default ``IN.zcar``), an archive that ``decompress`` turns back
into a byte-identical copy of ``IN``.  Input kinds (``--format``, else by extension, else by
sniffing; any file with ``--dtype`` and an unknown extension is raw):

* ``.safetensors``: the file's header (8-byte little-endian length + JSON) is kept verbatim;
  every tensor of dtype BF16/F16/F32/F8_E4M3/F8_E5M2 is compressed with :func:`codec.encode`
  (read one tensor at a time), other tensors (I64, BOOL, ...) and any bytes between or after
  tensors are stored as they are.
* ``.npy``: the npy header is kept verbatim and the data compressed if its dtype is
  float16/float32, or a 1- or 2-byte void type (which is how NumPy saves ``ml_dtypes`` arrays:
  ``V2`` is read as bfloat16, ``V1`` as float8_e4m3fn, unless ``--dtype`` says otherwise);
  anything else is stored.  Big-endian data is stored.
* raw (``--dtype NAME``, one of :data:`codec.SUPPORTED`): the words are compressed as a 1-D
  tensor; a tail shorter than one word is stored.

Whatever the data, the original bytes come back exactly (a CRC32C of the whole original file
is checked on decompression).  Compressed tensors that would not shrink are stored.

Archive layout, version 1 (all integers little-endian)::

    offset  size  field
    0       4     magic b"ZCAR"
    4       1     archive version (1)
    5       1     input kind: 1 safetensors, 2 npy, 3 raw
    6       2     u16 reserved, 0
    8       8     u64 size of the original file in bytes
    16      4     u32 length L of the metadata
    20      L     metadata, verbatim: safetensors: the 8-byte length and the JSON header;
                  npy: the whole npy header (magic to padding); raw: the dtype name (ASCII)
            4     u32 number of entries
    then, per entry, in file order (the original file is the metadata, except for raw
    inputs, followed by the entries' bytes):
            4     u32 length N of the name
            N     name, UTF-8 (tensor name; "array" for npy, "data" for raw; "(gap)"/"(tail)")
            1     flags: bit0 compressed (blob is a zipccl stream, :mod:`codec.format`),
                  else stored (blob is the original bytes); bit1 filler (bytes that belong
                  to no tensor: padding between safetensors tensors, a raw file's tail)
            8     f64 exponent-entropy bound of the tensor in bits/value (NaN: not a float tensor)
            8     u64 length B of the blob
            B     blob
    then:   4     u32 CRC32C of the whole original file
    (end of the archive: no byte may follow)

Exit status: 0 success; 1 corrupted or invalid data (:class:`codec.FormatError`: a damaged
archive or stream, a malformed input file) or an I/O failure; 2 usage errors (bad option,
missing or unreadable file).
"""
from __future__ import annotations

import argparse
import ast
import json
import math
import mmap
import os
import struct
import sys
from collections import Counter
from dataclasses import dataclass

import numpy as np

from . import format as fmt
from .atomic import atomic_write
from .api import DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_SIZE_F32, decode as _decode, encode as _encode, inspect as _inspect_stream
from .format import FormatError
from .layouts import BY_SAFETENSORS, SUPPORTED, FloatLayout, layout_for, layout_named
from .stats import entropy_bound_bits

__all__ = ["main", "compress_file", "decompress_file", "inspect_file", "ARCHIVE_MAGIC", "ARCHIVE_VERSION"]

ARCHIVE_MAGIC = b"ZCAR"
ARCHIVE_VERSION = 1
KIND_SAFETENSORS, KIND_NPY, KIND_RAW = 1, 2, 3
KIND_NAMES = {KIND_SAFETENSORS: "safetensors", KIND_NPY: "npy", KIND_RAW: "raw"}
_META_IN_FILE = {KIND_SAFETENSORS: True, KIND_NPY: True, KIND_RAW: False}   # is the metadata the file's prefix?
FLAG_COMPRESSED, FLAG_FILLER = 1, 2
_HEAD = struct.Struct("<4sBBHQI")          # magic, version, kind, reserved, original size, metadata length
_ENTRY = struct.Struct("<BdQ")             # flags, entropy bound, blob length
_U32 = struct.Struct("<I")
_COPY_BLOCK = 1 << 24

class UsageError(Exception):
    """A user error (bad option or file): reported without a traceback, exit status 2."""


# --------------------------------------------------------------------------- helpers
def _crc_update(data, value: int) -> int:
    """CRC32C of ``data`` continuing from ``value`` (0 to start)."""
    import crc32c

    return crc32c.crc32c(data, value)


def parse_dtype(name: str) -> FloatLayout:
    """A layout from a dtype name or alias (``bfloat16``, ``bf16``, ``BF16``, ``fp8_e4m3``...)."""
    lay = layout_named(name)
    if lay is None:
        raise UsageError(f"unsupported --dtype {name!r}: choose one of {', '.join(SUPPORTED)}")
    return lay


def _fmt_shape(shape) -> str:
    if shape is None:
        return "-"
    return "(" + ", ".join(str(int(s)) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _ratio(raw: int, packed: int) -> float:
    return raw / packed if packed else (math.inf if raw else 1.0)


@dataclass
class _Piece:
    """A byte range of the input that becomes one archive entry."""
    name: str
    offset: int                      # absolute offset in the input file
    length: int
    layout: FloatLayout | None = None    # compress as these words (None: store)
    shape: tuple | None = None           # shape of the words as encoded (C order of the file bytes)
    filler: bool = False


def _progress(total: int, desc: str, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, leave=False,
                dynamic_ncols=True)


def _size_arg(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = 1
    if t and t[-1] in "KMGT":
        mult, t = 1024 ** ("KMGT".index(t[-1]) + 1), t[:-1]
    try:
        v = int(float(t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (a number of bytes, with K, M, G or T)") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"size must be >= 0, got {text!r}")
    return v


# --------------------------------------------------------------------------- input planning
def _plan_safetensors(f, size: int) -> tuple[bytes, list[_Piece]]:
    head = f.read(8)
    if len(head) < 8:
        raise FormatError(f"not a safetensors file: {size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", head)
    if n > size - 8:
        raise FormatError(f"not a safetensors file: header length {n} exceeds the file ({size} bytes)")
    header = f.read(n)
    try:
        obj = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"not a safetensors file: header is not JSON ({e})") from None
    except RecursionError:
        raise FormatError("not a safetensors file: header JSON is nested too deeply") from None
    if not isinstance(obj, dict):
        raise FormatError("not a safetensors file: header is not a JSON object")
    start, data_len = 8 + n, size - 8 - n
    tensors = []
    for name, info in obj.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
            ok = (isinstance(dtype, str) and isinstance(shape, list)
                  and all(type(s) is int and s >= 0 for s in shape)              # bool is an int: refuse it
                  and type(b) is int and type(e) is int and 0 <= b <= e <= data_len)
        except (TypeError, KeyError, ValueError):
            ok = False
        if not ok:
            raise FormatError(f"not a valid safetensors file: bad entry for tensor {name!r}: {info!r}")
        tensors.append((b, e, name, dtype, tuple(shape)))
    tensors.sort(key=lambda t: (t[0], t[1]))
    pieces, pos = [], 0
    for b, e, name, dtype, shape in tensors:
        if b < pos and e > b:
            raise FormatError(f"not a valid safetensors file: tensor {name!r} overlaps the previous one")
        if b < pos:                      # an empty tensor placed inside another: no bytes of its own
            continue
        if b > pos:
            pieces.append(_Piece("(gap)", start + pos, b - pos, filler=True))
        lay = BY_SAFETENSORS.get(dtype)
        if lay is not None and (e - b) != math.prod(shape) * lay.itemsize:
            lay = None                   # inconsistent entry: keep the bytes as they are
        pieces.append(_Piece(name, start + b, e - b, lay, shape))
        pos = max(pos, e)
    if pos < data_len:
        pieces.append(_Piece("(tail)", start + pos, data_len - pos, filler=True))
    return head + header, pieces


def _read_npy_header(f):
    """``(shape, fortran_order, dtype, data offset)`` of the npy file ``f`` (at its start)."""
    try:
        version = np.lib.format.read_magic(f)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = reader(f, max_header_size=1 << 31)
    except (ValueError, SyntaxError, TypeError, KeyError) as e:
        return _read_npy_header_e5m2(f, e)
    return shape, fortran, dtype, f.tell()


def _read_npy_header_e5m2(f, err: Exception):
    """``np.save`` of an ``ml_dtypes.float8_e5m2`` array writes descr ``'<f1'``, which NumPy
    cannot read back; accept exactly that descr as float8_e5m2, reject anything else."""
    import ml_dtypes

    try:
        f.seek(0)
        version = np.lib.format.read_magic(f)
        size_fmt = "<H" if version == (1, 0) else "<I"
        (hlen,) = struct.unpack(size_fmt, f.read(struct.calcsize(size_fmt)))
        d = ast.literal_eval(f.read(hlen).decode("utf-8" if version >= (3, 0) else "latin1"))
        if (isinstance(d, dict) and d.get("descr") in ("<f1", "|f1", "=f1", "f1")
                and isinstance(d.get("fortran_order"), bool) and isinstance(d.get("shape"), tuple)
                and all(isinstance(s, int) and s >= 0 for s in d["shape"])):
            return d["shape"], d["fortran_order"], np.dtype(ml_dtypes.float8_e5m2), f.tell()
    except (ValueError, SyntaxError, TypeError, KeyError, UnicodeDecodeError, struct.error, MemoryError):
        pass
    raise FormatError(f"not a valid .npy file: {err}") from None


def _npy_layout(dtype: np.dtype, forced: FloatLayout | None) -> FloatLayout | None:
    """How to compress npy data of ``dtype`` (None: store it)."""
    if dtype.hasobject or dtype.byteorder == ">" or dtype.names is not None or dtype.subdtype is not None:
        return None
    if dtype.kind == "V":          # ml_dtypes arrays are saved as void: bf16 -> V2, fp8 -> V1
        if forced is not None:
            if forced.itemsize != dtype.itemsize:
                raise UsageError(f"--dtype {forced.name} ({forced.itemsize} bytes) does not match the "
                                 f"npy dtype {dtype.str} ({dtype.itemsize} bytes)")
            return forced
        return {2: layout_for("bfloat16"), 1: layout_for("float8_e4m3fn")}.get(dtype.itemsize)
    try:
        lay = layout_for(dtype)
    except TypeError:
        lay = None
    if forced is not None and forced is not lay:
        raise UsageError(f"--dtype {forced.name} contradicts the npy dtype {dtype.name}")
    return lay


def _plan_npy(f, size: int, forced: FloatLayout | None) -> tuple[bytes, list[_Piece]]:
    shape, fortran, dtype, offset = _read_npy_header(f)
    f.seek(0)
    meta = f.read(offset)
    data_len = size - offset
    if dtype.hasobject or dtype.itemsize == 0:
        return meta, ([_Piece("array", offset, data_len)] if data_len else [])
    lay = _npy_layout(dtype, forced)
    numel = math.prod(shape)
    n = min(numel, data_len // dtype.itemsize)
    words_shape = (tuple(shape[::-1]) if fortran else tuple(shape)) if n == numel else (n,)
    pieces = [_Piece("array", offset, n * dtype.itemsize, lay, words_shape)]
    if data_len > n * dtype.itemsize:
        pieces.append(_Piece("(tail)", offset + n * dtype.itemsize, data_len - n * dtype.itemsize, filler=True))
    return meta, pieces


def _plan_raw(size: int, lay: FloatLayout) -> tuple[bytes, list[_Piece]]:
    n = size // lay.itemsize
    pieces = [_Piece("data", 0, n * lay.itemsize, lay, (n,))]
    if size > n * lay.itemsize:
        pieces.append(_Piece("(tail)", n * lay.itemsize, size - n * lay.itemsize, filler=True))
    return lay.name.encode("ascii"), pieces


def _detect_kind(path: str, fmt_opt: str | None, has_dtype: bool) -> int:
    if fmt_opt:
        return {"safetensors": KIND_SAFETENSORS, "npy": KIND_NPY, "raw": KIND_RAW}[fmt_opt]
    low = path.lower()
    if low.endswith(".safetensors"):
        return KIND_SAFETENSORS
    if low.endswith(".npy"):
        return KIND_NPY
    if has_dtype:
        return KIND_RAW
    with open(path, "rb") as f:
        head = f.read(9)
    if head[:6] == b"\x93NUMPY":
        return KIND_NPY
    if len(head) == 9 and head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] <= os.path.getsize(path) - 8:
        return KIND_SAFETENSORS
    raise UsageError(f"cannot tell what {path} holds: name it .safetensors or .npy, pass --format, "
                     f"or pass --dtype NAME for raw words")


# --------------------------------------------------------------------------- compress
def _read_exact(f, n: int) -> np.ndarray:
    buf = np.empty(n, dtype=np.uint8)
    got = f.readinto(memoryview(buf)) if n else 0
    if got != n:
        raise FormatError(f"input ended early (read {got} of {n} bytes): was it modified while being read?")
    return buf


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _check_paths(src: str, dst: str) -> None:
    if not os.path.exists(src):
        raise FileNotFoundError(2, "No such file or directory", src)
    if not os.path.isfile(src):
        raise UsageError(f"{src}: not a regular file")
    if os.path.isdir(dst):
        raise UsageError(f"{dst}: is a directory (give the output file's name)")
    if not os.path.isdir(os.path.dirname(os.path.abspath(dst))):
        raise UsageError(f"{dst}: its directory does not exist")
    if _same_file(src, dst):
        raise UsageError(f"output {dst} is the input file")


def compress_file(src: str, dst: str, *, dtype: str | None = None, input_format: str | None = None,
                  chunk_size: int | None = None, checksum: bool = False, progress: bool = False) -> dict:
    """Compress ``src`` into the archive ``dst``; returns a summary dict (see :func:`main`)."""
    _check_paths(src, dst)
    forced = parse_dtype(dtype) if dtype is not None else None
    kind = _detect_kind(src, input_format, forced is not None)
    if kind == KIND_RAW and forced is None:
        raise UsageError("raw input needs --dtype NAME (one of " + ", ".join(SUPPORTED) + ")")
    if kind == KIND_SAFETENSORS and forced is not None:
        raise UsageError("--dtype does not apply to safetensors files (their header names the dtypes)")
    size = os.path.getsize(src)
    stats = {"input": src, "output": dst, "kind": KIND_NAMES[kind], "original_nbytes": size, "tensors": []}
    with open(src, "rb") as f:
        if kind == KIND_SAFETENSORS:
            meta, pieces = _plan_safetensors(f, size)
        elif kind == KIND_NPY:
            meta, pieces = _plan_npy(f, size, forced)
        else:
            meta, pieces = _plan_raw(size, forced)
        bar = _progress(size, os.path.basename(src), progress)
        try:
            with atomic_write(dst) as out:
                out.write(_HEAD.pack(ARCHIVE_MAGIC, ARCHIVE_VERSION, kind, 0, size, len(meta)))
                out.write(meta)
                out.write(_U32.pack(len(pieces)))
                prefix = meta if _META_IN_FILE[kind] else b""
                crc = _crc_update(prefix, 0)
                pos = len(prefix)
                for p in pieces:
                    if p.offset != pos:
                        raise AssertionError(f"internal error: piece {p.name!r} at {p.offset}, expected {pos}")
                    f.seek(p.offset)
                    crc, row = _write_piece(f, out, p, crc, chunk_size, checksum, bar)
                    pos += p.length
                    stats["tensors"].append(row)
                if pos != size:
                    raise AssertionError(f"internal error: entries cover {pos} of {size} bytes")
                out.write(_U32.pack(crc))
                stats["archive_nbytes"] = out.tell()
        finally:
            if bar is not None:
                bar.close()
    stats.update(_totals(stats["tensors"], size, stats["archive_nbytes"]))
    return stats


def _write_entry_head(out, name: str, flags: int, bound: float, blob_len: int) -> None:
    nb = name.encode("utf-8", "surrogatepass")
    out.write(_U32.pack(len(nb)) + nb + _ENTRY.pack(flags, bound, blob_len))


def _write_piece(f, out, p: _Piece, crc: int, chunk_size: int, checksum: bool, bar):
    row = {"name": p.name, "filler": p.filler, "raw_nbytes": p.length, "numel": None, "dtype": None,
           "bound_bits": math.nan}
    if p.layout is not None and p.length:
        if bar is not None:
            bar.set_postfix_str(p.name[-40:], refresh=True)
        buf = _read_exact(f, p.length)
        crc = _crc_update(buf, crc)
        words = buf.view(p.layout.numpy_dtype).reshape(p.shape)
        bound = entropy_bound_bits(words)
        blob = _encode(words, chunk_size=chunk_size, checksum=checksum)
        row.update(numel=words.size, dtype=p.layout.name, bound_bits=bound)
        if len(blob) < p.length:
            _write_entry_head(out, p.name, FLAG_COMPRESSED, bound, len(blob))
            out.write(blob)
            row.update(compressed=True, nbytes=len(blob))
        else:                             # would not shrink: store
            _write_entry_head(out, p.name, 0, bound, p.length)
            out.write(memoryview(buf))
            row.update(compressed=False, nbytes=p.length)
        if bar is not None:
            bar.update(p.length)
        return crc, row
    _write_entry_head(out, p.name, FLAG_FILLER if p.filler else 0, math.nan, p.length)
    left = p.length
    while left:
        chunk = f.read(min(left, _COPY_BLOCK))
        if not chunk:
            raise FormatError("input ended early: was it modified while being read?")
        crc = _crc_update(chunk, crc)
        out.write(chunk)
        left -= len(chunk)
        if bar is not None:
            bar.update(len(chunk))
    row.update(compressed=False, nbytes=p.length)
    return crc, row


def _totals(rows: list[dict], original: int, archive: int) -> dict:
    floats = [r for r in rows if r.get("numel") and not math.isnan(r["bound_bits"])]
    numel = sum(r["numel"] for r in floats)
    packed = sum(r["nbytes"] for r in floats)
    raw = sum(r["raw_nbytes"] for r in floats)
    bound = sum(r["bound_bits"] * r["numel"] for r in floats) / numel if numel else math.nan
    return {"archive_nbytes": archive, "ratio": _ratio(original, archive),
            "n_tensors": sum(not r["filler"] for r in rows),
            "n_compressed": sum(bool(r.get("compressed")) for r in rows),
            "float_values": numel, "float_raw_nbytes": raw, "float_nbytes": packed,
            "float_ratio": _ratio(raw, packed),
            "bits_per_value": 8 * packed / numel if numel else math.nan, "entropy_bound_bits": bound,
            "stored_nbytes": sum(r["nbytes"] for r in rows if not r.get("compressed"))}


# --------------------------------------------------------------------------- archive reading
@dataclass
class _Entry:
    name: str
    flags: int
    bound: float
    start: int          # blob offset in the archive
    length: int

    @property
    def compressed(self) -> bool:
        return bool(self.flags & FLAG_COMPRESSED)

    @property
    def filler(self) -> bool:
        return bool(self.flags & FLAG_FILLER)


def _parse_archive(mv: memoryview) -> tuple[int, int, bytes, list[_Entry], int]:
    """``(kind, original size, metadata, entries, crc)``; raises FormatError on any inconsistency."""
    total = len(mv)
    if total < _HEAD.size:
        raise FormatError(f"archive truncated: {total} bytes, shorter than its {_HEAD.size}-byte header")
    magic, version, kind, reserved, size, meta_len = _HEAD.unpack_from(mv, 0)
    if magic != ARCHIVE_MAGIC:
        raise FormatError(f"not a zipccl archive (magic {bytes(magic)!r}, expected {ARCHIVE_MAGIC!r})")
    if version != ARCHIVE_VERSION:
        raise FormatError(f"unsupported archive version {version} (this build reads {ARCHIVE_VERSION})")
    if kind not in KIND_NAMES or reserved:
        raise FormatError(f"archive header corrupted: input kind {kind}, reserved {reserved}")
    pos = _HEAD.size

    def need(n: int, what: str) -> None:
        if total - pos < n:
            raise FormatError(f"archive truncated in {what} (needs {n} bytes at offset {pos}, {total - pos} left)")

    need(meta_len + 4, "the metadata")
    meta = bytes(mv[pos:pos + meta_len])
    pos += meta_len
    (n_entries,) = _U32.unpack_from(mv, pos)
    pos += 4
    if n_entries > (total - pos) // (4 + _ENTRY.size):
        raise FormatError(f"archive truncated or corrupted: {n_entries} entries cannot fit in {total - pos} bytes")
    entries, covered = [], meta_len if _META_IN_FILE[kind] else 0
    for i in range(n_entries):
        need(4, f"entry {i}")
        (nlen,) = _U32.unpack_from(mv, pos)
        pos += 4
        need(nlen + _ENTRY.size, f"entry {i}")
        try:
            name = bytes(mv[pos:pos + nlen]).decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise FormatError(f"archive corrupted: entry {i} has a name that is not UTF-8") from None
        pos += nlen
        flags, bound, blen = _ENTRY.unpack_from(mv, pos)
        pos += _ENTRY.size
        if flags & ~(FLAG_COMPRESSED | FLAG_FILLER) or flags == FLAG_COMPRESSED | FLAG_FILLER:
            raise FormatError(f"archive corrupted: entry {i} ({name!r}) has flags {flags:#x}")
        need(blen, f"entry {i} ({name!r})")
        entries.append(_Entry(name, flags, bound, pos, blen))
        if not flags & FLAG_COMPRESSED:
            covered += blen
        pos += blen
    need(4, "the trailer")
    (crc,) = _U32.unpack_from(mv, pos)
    pos += 4
    if pos != total:
        raise FormatError(f"archive has {total - pos} unexpected bytes after its end (offset {pos})")
    if covered > size:
        raise FormatError(f"archive corrupted: stored entries hold {covered} bytes, the original has {size}")
    return kind, size, meta, entries, crc


class _Mapped:
    """Read-only mmap of a whole file (a zero-length file maps to ``b""``)."""

    def __init__(self, path: str):
        self._f = open(path, "rb")
        size = os.fstat(self._f.fileno()).st_size
        self._mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        self.mv = memoryview(self._mm) if self._mm is not None else memoryview(b"")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.mv.release()
            if self._mm is not None:
                self._mm.close()
        except BufferError:      # a view still exported (e.g. held by a traceback): the GC unmaps it
            pass
        self._f.close()


def _stream_words(blob: memoryview, name: str) -> tuple[fmt.Header, np.ndarray]:
    """Decode one entry's stream into a flat NumPy array; errors name the entry."""
    try:
        h = fmt.parse_header(blob)
        out = np.empty(h.numel, dtype=h.layout.numpy_dtype)
        _decode(blob, out=out)
    except FormatError as e:
        raise FormatError(f"tensor {name!r}: {e}") from None
    except (ValueError, IndexError, OverflowError, KeyError) as e:     # a damaged payload the decoder tripped on
        raise FormatError(f"tensor {name!r}: corrupted stream ({type(e).__name__}: {e})") from None
    return h, out


def _refuse_oversize(what: str, nbytes: int, max_size: int | None) -> None:
    if max_size is not None and nbytes > max_size:
        raise FormatError(f"{what} decompresses to {nbytes:,} bytes, more than --max-size {max_size:,}")


def decompress_file(src: str, dst: str, *, progress: bool = False, max_size: int | None = None) -> dict:
    """Rebuild the original file from the archive ``src`` (or the raw words of a bare stream).
    ``max_size``: refuse (FormatError) an output larger than this many bytes before writing any."""
    _check_paths(src, dst)
    with _Mapped(src) as m:
        mv = m.mv
        if bytes(mv[:4]) == fmt.MAGIC:
            h = _checked_header(mv, os.path.basename(src))
            _refuse_oversize(src, h.numel * h.layout.itemsize, max_size)
            return _decompress_stream(mv, src, dst)
        kind, size, meta, entries, want_crc = _parse_archive(mv)
        _refuse_oversize(src, size, max_size)
        archive_nbytes = len(mv)
        bar = _progress(size, os.path.basename(dst), progress)
        try:
            with atomic_write(dst) as out:
                prefix = meta if _META_IN_FILE[kind] else b""
                out.write(prefix)
                crc, written = _crc_update(prefix, 0), len(prefix)
                for e in entries:
                    blob = mv[e.start:e.start + e.length]
                    if e.compressed:
                        h = _checked_header(blob, e.name)
                        if written + h.numel * h.layout.itemsize > size:
                            raise FormatError(f"tensor {e.name!r}: decodes past the original size {size}")
                        _, words = _stream_words(blob, e.name)
                        data = memoryview(words.view(np.uint8))
                        crc = _crc_update(data, crc)
                        out.write(data)
                        written += len(data)
                        if bar is not None:
                            bar.update(len(data))
                    else:
                        for a in range(0, e.length, _COPY_BLOCK):
                            piece = blob[a:a + _COPY_BLOCK]
                            crc = _crc_update(piece, crc)
                            out.write(piece)
                            if bar is not None:
                                bar.update(len(piece))
                        written += e.length
                    del blob
                if written != size:
                    raise FormatError(f"archive corrupted: rebuilt {written} bytes, the original had {size}")
                if crc != want_crc:
                    raise FormatError(f"archive corrupted: CRC32C of the rebuilt file is {crc:#010x}, "
                                      f"the archive recorded {want_crc:#010x}")
        finally:
            if bar is not None:
                bar.close()
    return {"input": src, "output": dst, "kind": KIND_NAMES[kind], "original_nbytes": size,
            "archive_nbytes": archive_nbytes, "n_entries": len(entries)}


def _checked_header(blob, name: str) -> fmt.Header:
    try:
        return fmt.parse_header(blob)
    except FormatError as e:
        raise FormatError(f"tensor {name!r}: {e}") from None


def _decompress_stream(mv, src: str, dst: str) -> dict:
    h, words = _stream_words(mv, os.path.basename(src))
    with atomic_write(dst) as out:
        out.write(memoryview(words.view(np.uint8)))
    return {"input": src, "output": dst, "kind": "stream", "original_nbytes": words.nbytes,
            "archive_nbytes": len(mv), "n_entries": 1, "dtype": h.layout.name, "shape": h.shape}


# --------------------------------------------------------------------------- inspect
def _meta_info(kind: int, meta: bytes) -> tuple[dict, dict]:
    """``(per-tensor {name: (dtype, shape)}, extra facts)`` from an archive's metadata (best effort)."""
    import io

    if kind == KIND_SAFETENSORS:
        try:
            obj = json.loads(meta[8:].decode("utf-8"))
            info = {k: (v.get("dtype"), tuple(v.get("shape", ()))) for k, v in obj.items()
                    if k != "__metadata__" and isinstance(v, dict)}
            extra = {"metadata": obj.get("__metadata__")} if "__metadata__" in obj else {}
            return info, extra
        except (ValueError, UnicodeDecodeError, TypeError, AttributeError):
            return {}, {"metadata_error": "unreadable safetensors header"}
    if kind == KIND_NPY:
        try:
            shape, fortran, dtype, _ = _read_npy_header(io.BytesIO(meta))
            name = dtype.str.lstrip("|") if dtype.kind == "V" and dtype.names is None else dtype.name
            return {"array": (name, tuple(shape))}, {"fortran_order": fortran}
        except FormatError:
            return {}, {"metadata_error": "unreadable npy header"}
    return {}, {}


def inspect_file(path: str) -> dict:
    """Facts about an archive (every entry) or a bare codec stream, without decompressing."""
    if not os.path.exists(path):
        raise FileNotFoundError(2, "No such file", path)
    with _Mapped(path) as m:
        mv = m.mv
        if bytes(mv[:4]) == fmt.MAGIC:
            info = _inspect_stream(mv)
            info["type"] = "stream"
            info["chunk_kinds"] = dict(Counter(c["kind"] for c in info["chunks"]))
            return info
        if bytes(mv[:4]) != ARCHIVE_MAGIC:
            raise FormatError(f"{path} is neither a zipccl archive (magic {ARCHIVE_MAGIC!r}) nor a "
                              f"zipccl stream (magic {fmt.MAGIC!r})")
        kind, size, meta, entries, crc = _parse_archive(mv)
        tinfo, extra = _meta_info(kind, meta)
        rows = []
        for e in entries:
            dtype, shape = (None, None) if e.filler else tinfo.get(e.name, (None, None))
            if kind == KIND_RAW and not e.filler:
                dtype = meta.decode("ascii", "replace")
            row = {"name": e.name, "filler": e.filler, "compressed": e.compressed, "nbytes": e.length,
                   "raw_nbytes": e.length, "dtype": dtype, "shape": shape, "numel": None,
                   "bound_bits": e.bound, "chunk_kinds": None}
            if e.compressed:
                h = _checked_header(mv[e.start:e.start + e.length], e.name)
                counts = np.bincount(h.kinds, minlength=3)
                row.update(raw_nbytes=h.numel * h.layout.itemsize, numel=h.numel, codec_dtype=h.layout.name,
                           chunk_size=h.chunk_size, checksum=h.checksum,
                           chunk_kinds={fmt.KIND_NAMES[k]: int(counts[k]) for k in sorted(fmt.KIND_NAMES)})
                if shape is None:
                    row["shape"] = h.shape
                if dtype is None:
                    row["dtype"] = h.layout.name
                elif kind == KIND_NPY and dtype.startswith("V"):
                    row["dtype"] = f"{dtype} as {h.layout.name}"
            elif shape is not None:
                row["numel"] = math.prod(shape)
            elif kind == KIND_RAW and not e.filler and dtype in SUPPORTED:
                row["numel"] = e.length // layout_for(dtype).itemsize
                row["shape"] = (row["numel"],)
            row["ratio"] = _ratio(row["raw_nbytes"], e.length)
            row["bits_per_value"] = 8 * e.length / row["numel"] if row["numel"] else None
            rows.append(row)
        info = {"type": "archive", "version": ARCHIVE_VERSION, "kind": KIND_NAMES[kind], "original_nbytes": size,
                "metadata_nbytes": len(meta), "crc32c": crc, "entries": rows, **extra}
        info.update(_totals(rows, size, len(mv)))
        return info


# --------------------------------------------------------------------------- printing
def _print_summary(s: dict, out) -> None:
    print(f"{s['input']} ({s['kind']}) -> {s['output']}: {s['original_nbytes']:,} -> {s['archive_nbytes']:,} bytes, "
          f"ratio {s['ratio']:.3f}x", file=out)
    if s["float_values"]:
        print(f"  float tensors: {s['float_values']:,} values, {s['float_raw_nbytes']:,} -> {s['float_nbytes']:,} "
              f"bytes (ratio {s['float_ratio']:.3f}x): {s['bits_per_value']:.3f} bits/value, "
              f"exponent-entropy bound {s['entropy_bound_bits']:.3f} bits/value", file=out)
    stored = [r for r in s["tensors"] if not r["filler"] and not r.get("compressed")]
    n = s["n_tensors"]
    print(f"  {n} tensor{'s' if n != 1 else ''}: {s['n_compressed']} compressed, {len(stored)} stored; "
          f"{s['stored_nbytes']:,} bytes kept as they are (stored tensors and padding)", file=out)


def _fmt_bits(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def _print_inspect(path: str, info: dict, out) -> None:
    if info["type"] == "stream":
        print(f"{path}: zipccl stream (format v{info['format_version']})", file=out)
        print(f"  dtype {info['dtype']}, shape {_fmt_shape(info['shape'])}, {info['numel']:,} values", file=out)
        print(f"  {info['n_chunks']:,} chunks of {info['chunk_size']:,} values, checksum "
              f"{'yes' if info['checksum'] else 'no'}, header {info['header_nbytes']:,} bytes", file=out)
        print(f"  {info['raw_nbytes']:,} -> {info['nbytes']:,} bytes: ratio {info['ratio']:.3f}x, "
              f"{info['bits_per_value']:.3f} bits/value", file=out)
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(info["chunk_kinds"].items())) or "none"
        print(f"  chunk kinds: {kinds}", file=out)
        return
    print(f"{path}: zipccl archive v{info['version']} of a {info['kind']} file", file=out)
    print(f"  {info['original_nbytes']:,} -> {info['archive_nbytes']:,} bytes: ratio {info['ratio']:.3f}x; "
          f"metadata {info['metadata_nbytes']:,} bytes; CRC32C {info['crc32c']:#010x}", file=out)
    if info.get("metadata") is not None:
        print(f"  __metadata__: {json.dumps(info['metadata'])}", file=out)
    if info["float_values"]:
        print(f"  float tensors: {info['float_values']:,} values, {info['bits_per_value']:.3f} bits/value, "
              f"exponent-entropy bound {info['entropy_bound_bits']:.3f} bits/value", file=out)
    rows = info["entries"]
    table = [("name", "dtype", "shape", "bytes", "stored", "ratio", "bits/value", "bound", "chunks")]
    for r in rows:
        if r["compressed"]:
            chunks = " ".join(f"{k}:{v}" for k, v in r["chunk_kinds"].items())
        else:
            chunks = "padding" if r["filler"] else "stored"
        table.append((r["name"], str(r["dtype"] or "-"), _fmt_shape(r["shape"]), f"{r['raw_nbytes']:,}",
                      f"{r['nbytes']:,}", f"{r['ratio']:.3f}", _fmt_bits(r["bits_per_value"]),
                      _fmt_bits(r["bound_bits"]), chunks))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    right = {3, 4, 5, 6, 7}
    for row in table:
        print("  " + "  ".join(c.rjust(w) if i in right else c.ljust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip(), file=out)


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, tuple):
        return list(o)
    return str(o)


def _json_clean(o):
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _json_clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_json_clean(v) for v in o]
    return o


# --------------------------------------------------------------------------- argparse
def _chunk_size(s: str) -> int:
    try:
        v = int(s, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {s!r}") from None
    if not 1 <= v <= fmt.MAX_CHUNK_SIZE:
        raise argparse.ArgumentTypeError(f"must be in [1, {fmt.MAX_CHUNK_SIZE}], got {v}")
    return v


def _build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = argparse.ArgumentParser(prog="zipccl", description="Lossless compression of float tensor files "
                                "(.safetensors, .npy, raw words).")
    p.add_argument("--version", action="version", version=f"zipccl {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    c = sub.add_parser("compress", help="compress a .safetensors, .npy or raw file into an archive")
    c.add_argument("input", metavar="IN")
    c.add_argument("output", metavar="OUT", nargs="?", help="archive to write (default: IN.zcar)")
    c.add_argument("--dtype", metavar="NAME", help=f"dtype of raw input words ({', '.join(SUPPORTED)}); "
                   "for .npy: how to read 1- or 2-byte void data (default bfloat16 / float8_e4m3fn)")
    c.add_argument("--format", dest="input_format", choices=("safetensors", "npy", "raw"),
                   help="input kind (default: from the extension; raw if --dtype is given)")
    c.add_argument("--chunk-size", type=_chunk_size, default=None, metavar="N",
                   help=f"values per independently decodable chunk (default {DEFAULT_CHUNK_SIZE}, "
                        f"{DEFAULT_CHUNK_SIZE_F32} for float32)")
    c.add_argument("--checksum", action="store_true", help="store CRC32C checksums in every tensor stream")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary")
    c.add_argument("--json", action="store_true", help="print the summary as JSON")

    d = sub.add_parser("decompress", help="rebuild the original file from an archive")
    d.add_argument("input", metavar="IN")
    d.add_argument("output", metavar="OUT", nargs="?", help="file to write (default: IN without .zcar)")
    d.add_argument("--max-size", type=_size_arg, default=None, metavar="BYTES",
                   help="refuse an output larger than this (suffixes K, M, G, T: powers of 1024), before "
                        "writing or allocating anything")
    d.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary")

    i = sub.add_parser("inspect", help="describe an archive (every tensor) or a bare zipccl stream")
    i.add_argument("input", metavar="IN")
    i.add_argument("--json", action="store_true", help="print the facts as JSON")
    i.add_argument("-q", "--quiet", action="store_true", help="(accepted for symmetry; inspect prints anyway)")
    return p


def _cmd_compress(a) -> int:
    dst = a.output or a.input + ".zcar"
    s = compress_file(a.input, dst, dtype=a.dtype, input_format=a.input_format, chunk_size=a.chunk_size,
                      checksum=a.checksum, progress=not a.quiet and sys.stderr.isatty())
    if a.json:
        print(json.dumps(_json_clean(s), default=_json_default, indent=1))
    elif not a.quiet:
        _print_summary(s, sys.stdout)
    return 0


def _cmd_decompress(a) -> int:
    dst = a.output
    if dst is None:
        if not a.input.endswith(".zcar") or len(a.input) == len(".zcar"):
            raise UsageError("give OUT: the default output is IN without its .zcar suffix")
        dst = a.input[: -len(".zcar")]
    s = decompress_file(a.input, dst, progress=not a.quiet and sys.stderr.isatty(), max_size=a.max_size)
    if not a.quiet:
        print(f"{s['input']} -> {s['output']}: {s['archive_nbytes']:,} -> {s['original_nbytes']:,} bytes "
              f"({s['kind']})")
    return 0


def _cmd_inspect(a) -> int:
    info = inspect_file(a.input)
    if a.json:
        if info["type"] == "stream":
            info = {k: v for k, v in info.items() if k != "chunks"} | {"chunks": info["chunks"]}
        print(json.dumps(_json_clean(info), default=_json_default, indent=1))
    else:
        _print_inspect(a.input, info, sys.stdout)
    return 0


def main(argv=None) -> int:
    """Entry point of ``zipccl`` and ``python -m codec``; returns the exit status."""
    parser = _build_parser()
    try:
        a = parser.parse_args(argv)
    except SystemExit as e:          # --help, --version (0) and usage errors (2)
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    cmd = {"compress": _cmd_compress, "decompress": _cmd_decompress, "inspect": _cmd_inspect}[a.command]
    try:
        return cmd(a)
    except UsageError as e:
        print(f"zipccl {a.command}: error: {e}", file=sys.stderr)
        return 2
    except FormatError as e:
        print(f"zipccl {a.command}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 1
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as e:
        print(f"zipccl {a.command}: error: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"zipccl {a.command}: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"zipccl {a.command}: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print(f"zipccl {a.command}: error: out of memory (for a stream's declared size, see decompress "
              "--max-size)", file=sys.stderr)
        return 1
