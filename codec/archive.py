"""The zipccl archive (ZCAR), version 1: a whole input file kept as its metadata and a table of entries,
every float tensor in it coded as a zipccl stream (:mod:`codec.format`); defined here and nowhere else.

An archive rebuilds a byte-identical copy of its input (a CRC32C of the whole original file is checked).
Input kinds (``INPUT_*``) and how :func:`plan` cuts them into entries:

* safetensors (1): the metadata is the file's header (8-byte little-endian length + JSON), verbatim;
  every tensor whose dtype is a :class:`codec.layouts.FloatLayout`'s safetensors name
  (:data:`codec.layouts.BY_SAFETENSORS`) is compressed, other tensors (I64, BOOL, ...) are stored, and
  the bytes between or after tensors are filler entries, stored.
* npy (2): the metadata is the whole npy header; the data is compressed if its dtype is one of
  :data:`codec.layouts.SUPPORTED`, or a 1- or 2-byte void type (which is how NumPy saves ``ml_dtypes``
  arrays: :data:`NPY_VOID_LAYOUTS`, unless the caller forces a layout of that size); the descr ``'<f1'``
  that ``np.save`` writes for float8_e5m2 is read as :data:`NPY_F1_LAYOUT`.  Anything else, big-endian
  data included, is stored; a last partial word is a filler entry.
* raw (3): the metadata is the layout's name (ASCII); the words are compressed as a 1-D tensor, a
  tail shorter than one word is a filler entry.

A compressed entry that would not shrink is stored.  Layout (all integers little-endian)::

    offset  size  field                                                              record
    0       4     magic b"ZCAR"                                                      ARCHIVE_HEAD
    4       1     archive version (1)
    5       1     input kind: 1 safetensors, 2 npy, 3 raw (INPUT_*)
    6       2     u16 reserved, 0
    8       8     u64 size of the original file in bytes
    16      4     u32 length L of the metadata
    20      L     metadata, verbatim: safetensors: the 8-byte length and the JSON header;
                  npy: the whole npy header (magic to padding); raw: the dtype name (ASCII)
            4     u32 number of entries                                              ENTRY_COUNT
    then, per entry, in file order (the original file is the metadata, except for raw
    inputs, followed by the entries' bytes):
            4     u32 length N of the name                                           ENTRY_NAME
            N     name, UTF-8 (tensor name; "array" for npy, "data" for raw; "(gap)"/"(tail)")
            1     flags: bit0 compressed (blob is a zipccl stream,                   ENTRY_HEAD
                  :mod:`codec.format`), else stored (blob is the original bytes); bit1 filler
                  (bytes that belong to no tensor: padding between safetensors tensors, a raw
                  file's tail)
            8     f64 exponent-entropy bound of the tensor in bits/value (NaN: not a float tensor)
            8     u64 length B of the blob
            B     blob
    then:   4     u32 CRC32C of the whole original file                              ARCHIVE_TRAILER
    (end of the archive: no byte may follow)

Writing: :func:`plan` (input file -> metadata and :class:`Piece` list), :func:`write`.  Reading:
:func:`parse_archive` (validates the tables), :func:`rebuild`, :func:`describe`.  Errors in the data
are :class:`codec.FormatError`; this module knows nothing of the command line (:mod:`codec.cli`).
"""
from __future__ import annotations

import ast
import io
import json
import math
import os
import struct
from dataclasses import dataclass

import numpy as np

from . import format as fmt
from .api import decode, encode
from .format import FormatError
from .layouts import BY_SAFETENSORS, SUPPORTED, FloatLayout, layout_for
from .records import Record
from .stats import entropy_bound_bits

__all__ = ["ARCHIVE_MAGIC", "ARCHIVE_VERSION", "INPUT_SAFETENSORS", "INPUT_NPY", "INPUT_RAW", "INPUT_NAMES",
           "INPUT_BY_NAME", "ARCHIVE_HEAD", "ENTRY_COUNT", "ENTRY_NAME", "ENTRY_HEAD", "ARCHIVE_TRAILER",
           "FLAG_COMPRESSED", "FLAG_FILLER", "Piece", "Entry", "Archive", "LayoutConflict", "detect_input",
           "plan", "write", "parse_archive", "rebuild", "describe", "stream_header", "stream_words", "totals"]

ARCHIVE_MAGIC = b"ZCAR"
ARCHIVE_VERSION = 1
INPUT_SAFETENSORS, INPUT_NPY, INPUT_RAW = 1, 2, 3
INPUT_NAMES = {INPUT_SAFETENSORS: "safetensors", INPUT_NPY: "npy", INPUT_RAW: "raw"}
INPUT_BY_NAME = {name: kind for kind, name in INPUT_NAMES.items()}
INPUT_EXTENSIONS = {".safetensors": INPUT_SAFETENSORS, ".npy": INPUT_NPY}
META_IN_FILE = {INPUT_SAFETENSORS: True, INPUT_NPY: True, INPUT_RAW: False}   # is the metadata the file's prefix?
FLAG_COMPRESSED, FLAG_FILLER = 1, 2
NAME_GAP, NAME_TAIL, NAME_NPY, NAME_RAW = "(gap)", "(tail)", "array", "data"      # entry names

# The fixed parts, declared once (the layout table above names them)
ARCHIVE_HEAD = Record("archive_head", [("magic", "4s"), ("version", "B"), ("input", "B"), ("reserved", "H"),
                                       ("size", "Q"), ("meta_len", "I")], prefix="AH")
ENTRY_COUNT = Record("entry_count", [("n_entries", "I")], prefix="AC")
ENTRY_NAME = Record("entry_name", [("length", "I")], prefix="AN")
ENTRY_HEAD = Record("entry_head", [("flags", "B"), ("bound", "d"), ("length", "Q")], prefix="AE")
ARCHIVE_TRAILER = Record("archive_trailer", [("crc32c", "I")], prefix="AT")
SAFETENSORS_LEN = Record("safetensors_len", [("header_len", "Q")], prefix="STL")   # a safetensors file's start

# npy data NumPy cannot name (ml_dtypes arrays): how it is read unless the caller forces a layout
NPY_VOID_LAYOUTS = {2: layout_for("bfloat16"), 1: layout_for("float8_e4m3fn")}     # by itemsize of V2 / V1
NPY_F1_LAYOUT = layout_for("float8_e5m2")        # np.save of float8_e5m2 writes descr "<f1"
_NPY_F1_DESCRS = ("<f1", "|f1", "=f1", "f1")
_NPY_MAGIC = b"\x93NUMPY"

_COPY_BLOCK = 1 << 24


class LayoutConflict(ValueError):
    """The layout a caller forced on npy data does not fit its dtype (``forced``, ``dtype``)."""

    def __init__(self, forced: FloatLayout, dtype: np.dtype):
        super().__init__(f"layout {forced.name} does not fit the npy dtype {dtype.str}")
        self.forced, self.dtype = forced, dtype


def ratio(raw: int, packed: int) -> float:
    return raw / packed if packed else (math.inf if raw else 1.0)


@dataclass
class Piece:
    """A byte range of the input that becomes one archive entry."""
    name: str
    offset: int                      # absolute offset in the input file
    length: int
    layout: FloatLayout | None = None    # compress as these words (None: store)
    shape: tuple | None = None           # shape of the words as encoded (C order of the file bytes)
    filler: bool = False


@dataclass
class Entry:
    """An entry of a parsed archive."""
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


@dataclass
class Archive:
    """A parsed, validated archive's header and tables (:func:`parse_archive`)."""
    input: int          # INPUT_*
    size: int           # of the original file
    meta: bytes
    entries: list[Entry]
    crc: int            # CRC32C of the original file

    @property
    def prefix(self) -> bytes:
        """The original file's first bytes that the metadata holds."""
        return self.meta if META_IN_FILE[self.input] else b""


# --------------------------------------------------------------------------- input planning
def detect_input(path: str, *, raw_if_unknown: bool = False) -> int | None:
    """The input kind of ``path``: by extension, else raw if ``raw_if_unknown``, else by sniffing its
    first bytes; None if it cannot be told."""
    low = path.lower()
    for ext, kind in INPUT_EXTENSIONS.items():
        if low.endswith(ext):
            return kind
    if raw_if_unknown:
        return INPUT_RAW
    with open(path, "rb") as f:
        head = f.read(SAFETENSORS_LEN.size + 1)
    if head[:len(_NPY_MAGIC)] == _NPY_MAGIC:
        return INPUT_NPY
    n = SAFETENSORS_LEN.size
    if len(head) == n + 1 and head[n:] == b"{" and \
            SAFETENSORS_LEN.unpack_from(head).header_len <= os.path.getsize(path) - n:
        return INPUT_SAFETENSORS
    return None


def plan(f, size: int, input_kind: int, layout: FloatLayout | None = None) -> tuple[bytes, list[Piece]]:
    """``(metadata, pieces)`` of the input file ``f`` (``size`` bytes, at its start) of kind ``input_kind``;
    ``layout``: the words' layout (raw input: required; npy: forced, see :data:`NPY_VOID_LAYOUTS`)."""
    if input_kind == INPUT_SAFETENSORS:
        return plan_safetensors(f, size)
    if input_kind == INPUT_NPY:
        return plan_npy(f, size, layout)
    if input_kind == INPUT_RAW:
        if layout is None:
            raise ValueError("raw input needs a layout")
        return plan_raw(size, layout)
    raise ValueError(f"unknown input kind {input_kind}")


def plan_safetensors(f, size: int) -> tuple[bytes, list[Piece]]:
    head = f.read(SAFETENSORS_LEN.size)
    if len(head) < SAFETENSORS_LEN.size:
        raise FormatError(f"not a safetensors file: {size} bytes, shorter than the 8-byte header length")
    n = SAFETENSORS_LEN.unpack_from(head).header_len
    if n > size - SAFETENSORS_LEN.size:
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
    start, data_len = SAFETENSORS_LEN.size + n, size - SAFETENSORS_LEN.size - n
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
            pieces.append(Piece(NAME_GAP, start + pos, b - pos, filler=True))
        lay = BY_SAFETENSORS.get(dtype)
        if lay is not None and (e - b) != math.prod(shape) * lay.itemsize:
            lay = None                   # inconsistent entry: keep the bytes as they are
        pieces.append(Piece(name, start + b, e - b, lay, shape))
        pos = max(pos, e)
    if pos < data_len:
        pieces.append(Piece(NAME_TAIL, start + pos, data_len - pos, filler=True))
    return head + header, pieces


def read_npy_header(f):
    """``(shape, fortran_order, dtype, data offset)`` of the npy file ``f`` (at its start)."""
    try:
        version = np.lib.format.read_magic(f)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = reader(f, max_header_size=1 << 31)
    except (ValueError, SyntaxError, TypeError, KeyError) as e:
        return _read_npy_header_f1(f, e)
    return shape, fortran, dtype, f.tell()


def _read_npy_header_f1(f, err: Exception):
    """``np.save`` of an ``ml_dtypes.float8_e5m2`` array writes descr ``'<f1'``, which NumPy
    cannot read back; accept exactly that descr as :data:`NPY_F1_LAYOUT`, reject anything else."""
    try:
        f.seek(0)
        version = np.lib.format.read_magic(f)
        size_fmt = "<H" if version == (1, 0) else "<I"
        (hlen,) = struct.unpack(size_fmt, f.read(struct.calcsize(size_fmt)))
        d = ast.literal_eval(f.read(hlen).decode("utf-8" if version >= (3, 0) else "latin1"))
        if (isinstance(d, dict) and d.get("descr") in _NPY_F1_DESCRS
                and isinstance(d.get("fortran_order"), bool) and isinstance(d.get("shape"), tuple)
                and all(isinstance(s, int) and s >= 0 for s in d["shape"])):
            return d["shape"], d["fortran_order"], NPY_F1_LAYOUT.numpy_dtype, f.tell()
    except (ValueError, SyntaxError, TypeError, KeyError, UnicodeDecodeError, struct.error, MemoryError):
        pass
    raise FormatError(f"not a valid .npy file: {err}") from None


def npy_layout(dtype: np.dtype, forced: FloatLayout | None) -> FloatLayout | None:
    """How to compress npy data of ``dtype`` (None: store it); :class:`LayoutConflict` if ``forced``
    does not fit it."""
    if dtype.hasobject or dtype.byteorder == ">" or dtype.names is not None or dtype.subdtype is not None:
        return None
    if dtype.kind == "V":          # ml_dtypes arrays are saved as void: bf16 -> V2, fp8 -> V1
        if forced is not None:
            if forced.itemsize != dtype.itemsize:
                raise LayoutConflict(forced, dtype)
            return forced
        return NPY_VOID_LAYOUTS.get(dtype.itemsize)
    try:
        lay = layout_for(dtype)
    except TypeError:
        lay = None
    if forced is not None and forced is not lay:
        raise LayoutConflict(forced, dtype)
    return lay


def plan_npy(f, size: int, forced: FloatLayout | None) -> tuple[bytes, list[Piece]]:
    shape, fortran, dtype, offset = read_npy_header(f)
    f.seek(0)
    meta = f.read(offset)
    data_len = size - offset
    if dtype.hasobject or dtype.itemsize == 0:
        return meta, ([Piece(NAME_NPY, offset, data_len)] if data_len else [])
    lay = npy_layout(dtype, forced)
    numel = math.prod(shape)
    n = min(numel, data_len // dtype.itemsize)
    words_shape = (tuple(shape[::-1]) if fortran else tuple(shape)) if n == numel else (n,)
    pieces = [Piece(NAME_NPY, offset, n * dtype.itemsize, lay, words_shape)]
    if data_len > n * dtype.itemsize:
        pieces.append(Piece(NAME_TAIL, offset + n * dtype.itemsize, data_len - n * dtype.itemsize, filler=True))
    return meta, pieces


def plan_raw(size: int, lay: FloatLayout) -> tuple[bytes, list[Piece]]:
    n = size // lay.itemsize
    pieces = [Piece(NAME_RAW, 0, n * lay.itemsize, lay, (n,))]
    if size > n * lay.itemsize:
        pieces.append(Piece(NAME_TAIL, n * lay.itemsize, size - n * lay.itemsize, filler=True))
    return lay.name.encode("ascii"), pieces


# --------------------------------------------------------------------------- writing
def _read_exact(f, n: int) -> np.ndarray:
    buf = np.empty(n, dtype=np.uint8)
    got = f.readinto(memoryview(buf)) if n else 0
    if got != n:
        raise FormatError(f"input ended early (read {got} of {n} bytes): was it modified while being read?")
    return buf


def write(f, out, input_kind: int, size: int, meta: bytes, pieces: list[Piece], *, chunk_size: int | None = None,
          checksum: bool = False, progress=None) -> list[dict]:
    """Write the archive of the input file ``f`` (``size`` bytes of kind ``input_kind``, planned by :func:`plan`
    as ``meta`` and ``pieces``) to the binary file ``out``; returns one row of facts per entry.
    ``progress``: None, or an object told ``entry(name)`` before a tensor is coded and ``update(nbytes)``
    as input bytes are done."""
    out.write(ARCHIVE_HEAD.pack(magic=ARCHIVE_MAGIC, version=ARCHIVE_VERSION, input=input_kind, reserved=0, size=size,
                                meta_len=len(meta)))
    out.write(meta)
    out.write(ENTRY_COUNT.pack(n_entries=len(pieces)))
    prefix = meta if META_IN_FILE[input_kind] else b""
    crc = fmt.crc32c(prefix, 0)
    pos = len(prefix)
    rows = []
    for p in pieces:
        if p.offset != pos:
            raise AssertionError(f"internal error: piece {p.name!r} at {p.offset}, expected {pos}")
        f.seek(p.offset)
        crc, row = _write_piece(f, out, p, crc, chunk_size, checksum, progress)
        pos += p.length
        rows.append(row)
    if pos != size:
        raise AssertionError(f"internal error: entries cover {pos} of {size} bytes")
    out.write(ARCHIVE_TRAILER.pack(crc32c=crc))
    return rows


def _write_entry_head(out, name: str, flags: int, bound: float, blob_len: int) -> None:
    nb = name.encode("utf-8", "surrogatepass")
    out.write(ENTRY_NAME.pack(length=len(nb)) + nb + ENTRY_HEAD.pack(flags=flags, bound=bound, length=blob_len))


def _write_piece(f, out, p: Piece, crc: int, chunk_size: int | None, checksum: bool, progress):
    row = {"name": p.name, "filler": p.filler, "raw_nbytes": p.length, "numel": None, "dtype": None,
           "bound_bits": math.nan}
    if p.layout is not None and p.length:
        if progress is not None:
            progress.entry(p.name)
        buf = _read_exact(f, p.length)
        crc = fmt.crc32c(buf, crc)
        words = buf.view(p.layout.numpy_dtype).reshape(p.shape)
        bound = entropy_bound_bits(words)
        blob = encode(words, chunk_size=chunk_size, checksum=checksum)
        row.update(numel=words.size, dtype=p.layout.name, bound_bits=bound)
        if len(blob) < p.length:
            _write_entry_head(out, p.name, FLAG_COMPRESSED, bound, len(blob))
            out.write(blob)
            row.update(compressed=True, nbytes=len(blob))
        else:                             # would not shrink: store
            _write_entry_head(out, p.name, 0, bound, p.length)
            out.write(memoryview(buf))
            row.update(compressed=False, nbytes=p.length)
        if progress is not None:
            progress.update(p.length)
        return crc, row
    _write_entry_head(out, p.name, FLAG_FILLER if p.filler else 0, math.nan, p.length)
    left = p.length
    while left:
        chunk = f.read(min(left, _COPY_BLOCK))
        if not chunk:
            raise FormatError("input ended early: was it modified while being read?")
        crc = fmt.crc32c(chunk, crc)
        out.write(chunk)
        left -= len(chunk)
        if progress is not None:
            progress.update(len(chunk))
    row.update(compressed=False, nbytes=p.length)
    return crc, row


def totals(rows: list[dict], original: int, archive: int) -> dict:
    """Sums over the entry rows of :func:`write` or :func:`describe` (``archive``: the archive's size)."""
    floats = [r for r in rows if r.get("numel") and not math.isnan(r["bound_bits"])]
    numel = sum(r["numel"] for r in floats)
    packed = sum(r["nbytes"] for r in floats)
    raw = sum(r["raw_nbytes"] for r in floats)
    bound = sum(r["bound_bits"] * r["numel"] for r in floats) / numel if numel else math.nan
    return {"archive_nbytes": archive, "ratio": ratio(original, archive),
            "n_tensors": sum(not r["filler"] for r in rows),
            "n_compressed": sum(bool(r.get("compressed")) for r in rows),
            "float_values": numel, "float_raw_nbytes": raw, "float_nbytes": packed,
            "float_ratio": ratio(raw, packed),
            "bits_per_value": 8 * packed / numel if numel else math.nan, "entropy_bound_bits": bound,
            "stored_nbytes": sum(r["nbytes"] for r in rows if not r.get("compressed"))}


# --------------------------------------------------------------------------- reading
def parse_archive(mv: memoryview) -> Archive:
    """The header and tables of the archive ``mv``; raises FormatError on any inconsistency."""
    total = len(mv)
    if total < ARCHIVE_HEAD.size:
        raise FormatError(f"archive truncated: {total} bytes, shorter than its {ARCHIVE_HEAD.size}-byte header")
    magic, version, kind, reserved, size, meta_len = ARCHIVE_HEAD.unpack_from(mv, 0)
    if magic != ARCHIVE_MAGIC:
        raise FormatError(f"not a zipccl archive (magic {bytes(magic)!r}, expected {ARCHIVE_MAGIC!r})")
    if version != ARCHIVE_VERSION:
        raise FormatError(f"unsupported archive version {version} (this build reads {ARCHIVE_VERSION})")
    if kind not in INPUT_NAMES or reserved:
        raise FormatError(f"archive header corrupted: input kind {kind}, reserved {reserved}")
    pos = ARCHIVE_HEAD.size

    def need(n: int, what: str) -> None:
        if total - pos < n:
            raise FormatError(f"archive truncated in {what} (needs {n} bytes at offset {pos}, {total - pos} left)")

    need(meta_len + ENTRY_COUNT.size, "the metadata")
    meta = bytes(mv[pos:pos + meta_len])
    pos += meta_len
    n_entries = ENTRY_COUNT.unpack_from(mv, pos).n_entries
    pos += ENTRY_COUNT.size
    if n_entries > (total - pos) // (ENTRY_NAME.size + ENTRY_HEAD.size):
        raise FormatError(f"archive truncated or corrupted: {n_entries} entries cannot fit in {total - pos} bytes")
    entries, covered = [], meta_len if META_IN_FILE[kind] else 0
    for i in range(n_entries):
        need(ENTRY_NAME.size, f"entry {i}")
        nlen = ENTRY_NAME.unpack_from(mv, pos).length
        pos += ENTRY_NAME.size
        need(nlen + ENTRY_HEAD.size, f"entry {i}")
        try:
            name = bytes(mv[pos:pos + nlen]).decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise FormatError(f"archive corrupted: entry {i} has a name that is not UTF-8") from None
        pos += nlen
        flags, bound, blen = ENTRY_HEAD.unpack_from(mv, pos)
        pos += ENTRY_HEAD.size
        if flags & ~(FLAG_COMPRESSED | FLAG_FILLER) or flags == FLAG_COMPRESSED | FLAG_FILLER:
            raise FormatError(f"archive corrupted: entry {i} ({name!r}) has flags {flags:#x}")
        need(blen, f"entry {i} ({name!r})")
        entries.append(Entry(name, flags, bound, pos, blen))
        if not flags & FLAG_COMPRESSED:
            covered += blen
        pos += blen
    need(ARCHIVE_TRAILER.size, "the trailer")
    crc = ARCHIVE_TRAILER.unpack_from(mv, pos).crc32c
    pos += ARCHIVE_TRAILER.size
    if pos != total:
        raise FormatError(f"archive has {total - pos} unexpected bytes after its end (offset {pos})")
    if covered > size:
        raise FormatError(f"archive corrupted: stored entries hold {covered} bytes, the original has {size}")
    return Archive(kind, size, meta, entries, crc)


def stream_header(blob, name: str) -> fmt.Header:
    """The parsed header of a stream; errors name the tensor."""
    try:
        return fmt.parse_header(blob)
    except FormatError as e:
        raise FormatError(f"tensor {name!r}: {e}") from None


def stream_words(blob: memoryview, name: str) -> tuple[fmt.Header, np.ndarray]:
    """Decode one entry's stream into a flat NumPy array; errors name the entry."""
    try:
        h = fmt.parse_header(blob)
        out = np.empty(h.numel, dtype=h.layout.numpy_dtype)
        decode(blob, out=out)
    except FormatError as e:
        raise FormatError(f"tensor {name!r}: {e}") from None
    except (ValueError, IndexError, OverflowError, KeyError) as e:     # a damaged payload the decoder tripped on
        raise FormatError(f"tensor {name!r}: corrupted stream ({type(e).__name__}: {e})") from None
    return h, out


def rebuild(mv: memoryview, arc: Archive, out, *, progress=None) -> None:
    """Write the original file of the archive ``mv`` (parsed as ``arc``) to the binary file ``out``;
    FormatError if an entry is damaged or the rebuilt bytes disagree with the size or CRC32C recorded.
    ``progress``: None, or an object told ``update(nbytes)`` as output bytes are written."""
    size = arc.size
    prefix = arc.prefix
    out.write(prefix)
    crc, written = fmt.crc32c(prefix, 0), len(prefix)
    for e in arc.entries:
        blob = mv[e.start:e.start + e.length]
        if e.compressed:
            h = stream_header(blob, e.name)
            if written + h.numel * h.layout.itemsize > size:
                raise FormatError(f"tensor {e.name!r}: decodes past the original size {size}")
            _, words = stream_words(blob, e.name)
            data = memoryview(words.view(np.uint8))
            crc = fmt.crc32c(data, crc)
            out.write(data)
            written += len(data)
            if progress is not None:
                progress.update(len(data))
        else:
            for a in range(0, e.length, _COPY_BLOCK):
                piece = blob[a:a + _COPY_BLOCK]
                crc = fmt.crc32c(piece, crc)
                out.write(piece)
                if progress is not None:
                    progress.update(len(piece))
            written += e.length
        del blob
    if written != size:
        raise FormatError(f"archive corrupted: rebuilt {written} bytes, the original had {size}")
    if crc != arc.crc:
        raise FormatError(f"archive corrupted: CRC32C of the rebuilt file is {crc:#010x}, "
                          f"the archive recorded {arc.crc:#010x}")


def metadata_info(input_kind: int, meta: bytes) -> tuple[dict, dict]:
    """``(per-tensor {name: (dtype, shape)}, extra facts)`` from an archive's metadata (best effort)."""
    if input_kind == INPUT_SAFETENSORS:
        try:
            obj = json.loads(meta[SAFETENSORS_LEN.size:].decode("utf-8"))
            info = {k: (v.get("dtype"), tuple(v.get("shape", ()))) for k, v in obj.items()
                    if k != "__metadata__" and isinstance(v, dict)}
            extra = {"metadata": obj.get("__metadata__")} if "__metadata__" in obj else {}
            return info, extra
        except (ValueError, UnicodeDecodeError, TypeError, AttributeError):
            return {}, {"metadata_error": "unreadable safetensors header"}
    if input_kind == INPUT_NPY:
        try:
            shape, fortran, dtype, _ = read_npy_header(io.BytesIO(meta))
            name = dtype.str.lstrip("|") if dtype.kind == "V" and dtype.names is None else dtype.name
            return {NAME_NPY: (name, tuple(shape))}, {"fortran_order": fortran}
        except FormatError:
            return {}, {"metadata_error": "unreadable npy header"}
    return {}, {}


def describe(mv: memoryview) -> dict:
    """Facts about the archive ``mv`` and every entry, without decompressing (the streams' headers
    are parsed)."""
    arc = parse_archive(mv)
    kind, meta = arc.input, arc.meta
    tinfo, extra = metadata_info(kind, meta)
    rows = []
    for e in arc.entries:
        dtype, shape = (None, None) if e.filler else tinfo.get(e.name, (None, None))
        if kind == INPUT_RAW and not e.filler:
            dtype = meta.decode("ascii", "replace")
        row = {"name": e.name, "filler": e.filler, "compressed": e.compressed, "nbytes": e.length,
               "raw_nbytes": e.length, "dtype": dtype, "shape": shape, "numel": None,
               "bound_bits": e.bound, "chunk_kinds": None}
        if e.compressed:
            h = stream_header(mv[e.start:e.start + e.length], e.name)
            counts = np.bincount(h.kinds, minlength=len(fmt.KIND_NAMES))
            row.update(raw_nbytes=h.numel * h.layout.itemsize, numel=h.numel, codec_dtype=h.layout.name,
                       chunk_size=h.chunk_size, checksum=h.checksum,
                       chunk_kinds={fmt.KIND_NAMES[k]: int(counts[k]) for k in sorted(fmt.KIND_NAMES)})
            if shape is None:
                row["shape"] = h.shape
            if dtype is None:
                row["dtype"] = h.layout.name
            elif kind == INPUT_NPY and dtype.startswith("V"):
                row["dtype"] = f"{dtype} as {h.layout.name}"
        elif shape is not None:
            row["numel"] = math.prod(shape)
        elif kind == INPUT_RAW and not e.filler and dtype in SUPPORTED:
            row["numel"] = e.length // layout_for(dtype).itemsize
            row["shape"] = (row["numel"],)
        row["ratio"] = ratio(row["raw_nbytes"], e.length)
        row["bits_per_value"] = 8 * e.length / row["numel"] if row["numel"] else None
        rows.append(row)
    info = {"type": "archive", "version": ARCHIVE_VERSION, "kind": INPUT_NAMES[kind], "original_nbytes": arc.size,
            "metadata_nbytes": len(meta), "crc32c": arc.crc, "entries": rows, **extra}
    info.update(totals(rows, arc.size, len(mv)))
    return info
