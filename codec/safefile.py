"""Compressed safetensors files (``*.zcc.safetensors``), layout version 1: defined here and nowhere else.

Such a file **is a safetensors file** (u64 little-endian header length ``N``, ``N`` bytes of UTF-8 JSON
padded with spaces, then the data; every tensor an entry ``{"dtype", "shape", "data_offsets": [begin,
end]}`` relative to the data start, the entries back to back), so standard safetensors tools open it
and list its tensors.  What zipccl adds::

    entry of a compressed tensor   dtype "U8", shape [B], under the tensor's own name: B bytes of one
                                   zipccl stream (codec.format) of the tensor (CRC32C per chunk when
                                   saved with checksum=True)
    entry of any other tensor      its own dtype and shape, its bytes as they are (integers, bool,
                                   float64, and float tensors whose stream would not be smaller)
    __metadata__["format"]         "pt" unless the caller gives another value
    __metadata__["zipccl"]         a JSON object (a string, as safetensors metadata values are):
        "layout": 1                          this layout's version
        "codec": "<zipccl version>"          the writer
        "tensors": {name: {"dtype": "BF16", "shape": [...]}, ...}     every compressed tensor, with
                                             its original safetensors dtype and shape
        "crc32c": {name: u32, ...}           with checksum=True: CRC32C of every stored tensor's bytes
        "source": {"name", "size", "crc32c", "header"}   only in a compressed shard of a model
                                             directory (:func:`compress_file`): the original file's
                                             name, size, CRC32C and verbatim header (length and
                                             JSON), so that :func:`decompress_file` gives its bytes back
    other __metadata__ keys        the caller's, as given

Reading (:func:`safe_open`, :func:`load_file`) memory-maps the file and decodes each tensor from the map
(no copy of the file); :meth:`SafeOpen.get_slice` decodes only the chunks a slice of the first
dimension needs.  Every fault (a truncated or corrupted file, a header that lies about offsets, a
stream whose dtype or shape disagrees with the metadata, an unknown layout or format version) is a
:class:`codec.FormatError` naming the tensor.  Writing is atomic (:mod:`codec.atomic`).
"""
from __future__ import annotations

import json
import math
import mmap
import os
import struct
from pathlib import Path

import numpy as np

from . import api
from . import format as fmt
from ._version import __version__
from .atomic import atomic_write
from .format import FormatError, crc32c
from .layouts import BY_SAFETENSORS, is_torch

__all__ = ["save_file", "load_file", "safe_open", "SafeOpen", "compress_file", "decompress_file", "compress_dir",
           "decompress_dir", "LAYOUT_VERSION"]

LAYOUT_VERSION = 1
SUFFIX = ".zcc.safetensors"
MAX_HEADER = 100 << 20                # safetensors' own limit on the JSON header
_KEY = "zipccl"

# safetensors dtype name -> NumPy dtype of the bytes as they are stored
_NUMPY = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16, "U32": np.uint32,
          "I32": np.int32, "U64": np.uint64, "I64": np.int64, "F64": np.float64, "C64": np.complex64}
_NUMPY.update({name: lay.numpy_dtype for name, lay in BY_SAFETENSORS.items()})


def _torch_names():
    import torch

    names = {torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16", torch.int32: "I32",
             torch.int64: "I64", torch.float64: "F64", torch.complex64: "C64"}
    for t, name in (("uint16", "U16"), ("uint32", "U32"), ("uint64", "U64")):
        if hasattr(torch, t):
            names[getattr(torch, t)] = name
    names.update({lay.torch_dtype: name for name, lay in BY_SAFETENSORS.items() if lay.torch_dtype is not None})
    return names


def _dtype_name(x) -> str:
    if is_torch(x):
        name = _torch_names().get(x.dtype)
    else:
        dt = np.dtype(x.dtype)
        name = next((k for k, v in _NUMPY.items() if np.dtype(v) == dt), None)
    if name is None:
        raise ValueError(f"dtype {x.dtype} has no safetensors name")
    return name


def _raw_bytes(x) -> bytes:
    """The tensor's bytes, C order, little-endian."""
    if is_torch(x):
        import torch

        flat = torch.empty(x.numel(), dtype=x.dtype)        # dense: .contiguous() keeps a 1-element
        flat.copy_(x.detach().reshape(-1))                   # tensor's stride, which .view(uint8) refuses
        return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    a = np.ascontiguousarray(x)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return a.tobytes()


# ----------------------------------------------------------------------------------------- writing
def _stream_if_smaller(x, nbytes: int, checksum: bool) -> bytes | None:
    """The zipccl stream of ``x`` (``nbytes`` bytes as it is), or None where it would not be smaller."""
    blob = bytes(api.encode(x, checksum=checksum))
    return blob if len(blob) < nbytes else None


def _encode_tensor(x, checksum: bool) -> tuple[str, list[int], bytes, bool]:
    """``(original dtype name, shape, entry bytes, compressed?)``: a float tensor of a zipccl layout as
    its stream where that is smaller than its bytes, anything else as it is."""
    name = _dtype_name(x)
    shape = [int(d) for d in x.shape]
    if name in BY_SAFETENSORS and math.prod(shape) > 0:
        blob = _stream_if_smaller(x.detach().to("cpu") if is_torch(x) else x,
                                  math.prod(shape) * BY_SAFETENSORS[name].itemsize, checksum)
        if blob is not None:
            return name, shape, blob, True
    return name, shape, _raw_bytes(x), False


def _zipccl_json(entries, listed: dict, checksum: bool, **extra) -> str:
    """``__metadata__["zipccl"]`` of a file of ``entries`` whose ``listed`` ones are compressed."""
    info = {"layout": LAYOUT_VERSION, "codec": __version__, "tensors": listed, **extra}
    if checksum:
        info["crc32c"] = {n: crc32c(d) for n, _, _, d in entries if n not in listed}
    return json.dumps(info, separators=(",", ":"), ensure_ascii=False)


def _write(path, entries: list[tuple[str, str, list[int], bytes]], metadata: dict[str, str]) -> int:
    """Write a safetensors file of ``(name, dtype, shape, bytes)`` entries, in that order, atomically;
    returns its size."""
    header: dict = {"__metadata__": metadata}
    at = 0
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(data)]}
        at += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    with atomic_write(path) as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, data in entries:
            f.write(data)
    return 8 + len(text) + at


def _check_metadata(metadata) -> dict[str, str]:
    metadata = dict(metadata or {})
    if _KEY in metadata:
        raise ValueError(f"metadata key {_KEY!r} is zipccl's own")
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError(f"metadata must map str to str, got {k!r}: {v!r}")
    metadata.setdefault("format", "pt")
    return metadata


def save_file(tensors: dict, path, metadata: dict[str, str] | None = None, *, checksum: bool = True) -> None:
    """Save ``{name: tensor}`` (torch tensors or NumPy arrays) as a compressed safetensors file: every
    float tensor of a zipccl dtype (bf16, fp16, fp32, fp8) as a zipccl stream, anything else as it is.
    ``checksum``: CRC32C of every chunk of every stream and of every stored tensor, so that
    :func:`load_file` detects any corruption.  The file appears whole or not at all."""
    metadata = _check_metadata(metadata)
    entries, listed = [], {}
    for name in sorted(tensors):
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"tensor name {name!r} is not allowed")
        dtype, shape, data, compressed = _encode_tensor(tensors[name], checksum)
        if compressed:
            listed[name] = {"dtype": dtype, "shape": shape}
            entries.append((name, "U8", [len(data)], data))
        else:
            entries.append((name, dtype, shape, data))
    metadata[_KEY] = _zipccl_json(entries, listed, checksum)
    _write(path, entries, metadata)


# ----------------------------------------------------------------------------------------- reading
def parse_header(mv, size: int, where: str = "") -> tuple[int, dict[str, dict], dict[str, str]]:
    """Validate a safetensors header: ``(data start, {name: entry}, metadata)``.  Offsets are checked
    against ``size`` (the file's length), entries against their dtype and shape and each other."""
    if size < 8:
        raise FormatError(f"{where}file of {size} bytes is too short for a safetensors header")
    (n,) = struct.unpack_from("<Q", mv, 0)
    if n > min(size - 8, MAX_HEADER):
        raise FormatError(f"{where}header length {n} exceeds the file ({size} bytes) or {MAX_HEADER}")
    try:
        header = json.loads(bytes(mv[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{where}header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise FormatError(f"{where}header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in metadata.items()):
        raise FormatError(f"{where}__metadata__ must map strings to strings")
    start, data_len = 8 + n, size - 8 - n
    spans = []
    for name, e in header.items():
        ok = (isinstance(e, dict) and e.get("dtype") in _NUMPY and isinstance(e.get("shape"), list)
              and all(type(d) is int and d >= 0 for d in e["shape"]) and isinstance(e.get("data_offsets"), list)
              and len(e["data_offsets"]) == 2 and all(type(o) is int for o in e["data_offsets"]))
        if not ok:
            raise FormatError(f"{where}tensor {name!r}: malformed entry {str(e)[:120]}")
        a, b = e["data_offsets"]
        if not 0 <= a <= b <= data_len:
            raise FormatError(f"{where}tensor {name!r}: data_offsets {[a, b]} outside the data ({data_len} bytes)")
        want = math.prod(e["shape"]) * np.dtype(_NUMPY[e["dtype"]]).itemsize
        if b - a != want:
            raise FormatError(f"{where}tensor {name!r}: {b - a} bytes for {e['dtype']} {e['shape']} ({want} expected)")
        spans.append((a, b, name))
    spans.sort()
    for (a0, b0, n0), (a1, b1, n1) in zip(spans, spans[1:]):
        if a1 < b0:
            raise FormatError(f"{where}tensors {n0!r} and {n1!r} overlap")
    return start, header, metadata


def _zipccl_info(metadata: dict[str, str], entries: dict[str, dict], where: str) -> dict:
    text = metadata.get(_KEY)
    if text is None:
        return {"layout": LAYOUT_VERSION, "tensors": {}}
    try:
        info = json.loads(text)
    except json.JSONDecodeError as e:
        raise FormatError(f"{where}metadata {_KEY!r} is not JSON: {e}") from None
    if not isinstance(info, dict) or info.get("layout") != LAYOUT_VERSION:
        raise FormatError(f"{where}unknown zcc.safetensors layout {info.get('layout') if isinstance(info, dict) else info!r} "
                          f"(this build reads {LAYOUT_VERSION})")
    tensors = info.get("tensors", {})
    if not isinstance(tensors, dict):
        raise FormatError(f"{where}metadata {_KEY!r}: 'tensors' is not an object")
    for name, t in tensors.items():
        e = entries.get(name)
        if e is None or e["dtype"] != "U8" or len(e["shape"]) != 1:
            raise FormatError(f"{where}tensor {name!r}: listed as compressed, but its entry is not a U8 vector")
        if not (isinstance(t, dict) and t.get("dtype") in BY_SAFETENSORS and isinstance(t.get("shape"), list)
                and all(type(d) is int and d >= 0 for d in t["shape"])):
            raise FormatError(f"{where}tensor {name!r}: malformed compressed-tensor metadata {str(t)[:120]}")
    crcs = info.get("crc32c", {})
    if not isinstance(crcs, dict) or not all(isinstance(v, int) for v in crcs.values()):
        raise FormatError(f"{where}metadata {_KEY!r}: malformed 'crc32c'")
    return info


class _Slice:
    """``f.get_slice(name)``: shape and dtype without decoding; ``[...]`` decodes what the index needs."""

    def __init__(self, f: "SafeOpen", name: str):
        self._f, self._name = f, name

    def get_shape(self) -> list[int]:
        return list(self._f._shape(self._name))

    def get_dtype(self) -> str:
        return self._f._dtype(self._name)

    def __getitem__(self, key):
        return self._f._slice(self._name, key)


class SafeOpen:
    """A compressed (or plain) safetensors file, memory-mapped: :func:`safe_open`."""

    def __init__(self, path, framework: str = "pt", device: str = "cpu"):
        if framework not in ("pt", "torch", "np", "numpy"):
            raise ValueError(f"framework must be 'pt' or 'np', got {framework!r}")
        self._torch = framework in ("pt", "torch")
        self._device = str(device)
        self.path = Path(path)
        self._where = f"{self.path.name}: "
        self._fd = open(self.path, "rb")
        size = os.fstat(self._fd.fileno()).st_size
        self._mm = mmap.mmap(self._fd.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        self._mv = memoryview(self._mm)
        try:
            self._start, self._entries, self._metadata = parse_header(self._mv, size, self._where)
            self._info = _zipccl_info(self._metadata, self._entries, self._where)
        except BaseException:
            self.close()
            raise

    # context manager / lifetime
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Unmap the file (where a view of it is still alive, as in the traceback of an error raised while
        decoding, the map goes when the last view does)."""
        mv, self._mv = getattr(self, "_mv", None), None
        mm, self._mm = getattr(self, "_mm", None), None
        try:
            if mv is not None:
                mv.release()
            if isinstance(mm, mmap.mmap):
                mm.close()
        except BufferError:
            pass
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            fd.close()

    # the safetensors API
    def keys(self) -> list[str]:
        return sorted(self._entries)

    def metadata(self) -> dict[str, str]:
        """The caller's metadata (zipccl's own key left out)."""
        return {k: v for k, v in self._metadata.items() if k != _KEY}

    def is_compressed(self, name: str) -> bool:
        self._entry(name)
        return name in self._info["tensors"]

    def get_tensor(self, name: str):
        """The whole tensor, decoded: a torch tensor on the file's device (framework "pt") or a NumPy array."""
        if self.is_compressed(name):
            return self._decode(name)
        return self._stored(name, self._bytes(name))

    def get_slice(self, name: str) -> _Slice:
        self._entry(name)
        return _Slice(self, name)

    # internals
    def _entry(self, name: str) -> dict:
        if self._mv is None:
            raise ValueError(f"{self.path} is closed")
        e = self._entries.get(name)
        if e is None:
            raise KeyError(f"{self._where}no tensor named {name!r}")
        return e

    def _shape(self, name):
        t = self._info["tensors"].get(name)
        return tuple(t["shape"]) if t else tuple(self._entry(name)["shape"])

    def _dtype(self, name):
        t = self._info["tensors"].get(name)
        return t["dtype"] if t else self._entry(name)["dtype"]

    def _bytes(self, name) -> memoryview:
        a, b = self._entry(name)["data_offsets"]
        return self._mv[self._start + a:self._start + b]

    def _fault(self, name, e) -> FormatError:
        return FormatError(f"{self._where}tensor {name!r}: {e}")

    def _stored(self, name, data, shape=None):
        crc = self._info.get("crc32c", {}).get(name)
        if crc is not None and crc32c(data) != crc:
            raise self._fault(name, "checksum mismatch (stored bytes corrupted)")
        dtype = self._entry(name)["dtype"]
        shape = self._entry(name)["shape"] if shape is None else shape
        arr = np.frombuffer(data, dtype=_NUMPY[dtype]).copy().reshape(shape)
        return self._family(arr, dtype)

    def _family(self, arr: np.ndarray, dtype: str):
        if not self._torch:
            return arr
        import torch

        lay = BY_SAFETENSORS.get(dtype)
        if lay is not None:
            t = torch.from_numpy(arr.view(lay.view_ints)).view(lay.torch_dtype)
        else:
            t = torch.from_numpy(arr)
        return t if self._device == "cpu" else t.to(self._device)

    def _stream_header(self, name, stream):
        t = self._info["tensors"][name]
        try:
            h = fmt.parse_header(stream)
        except FormatError as e:
            raise self._fault(name, e) from None
        self._check(name, h)
        return h

    def _check(self, name, h):
        t = self._info["tensors"][name]
        if h.layout is not BY_SAFETENSORS[t["dtype"]] or list(h.shape) != list(t["shape"]):
            raise self._fault(name, f"stream holds {h.layout.safetensors} {list(h.shape)}, the metadata says "
                                    f"{t['dtype']} {t['shape']}")

    def _decode(self, name):
        stream = self._bytes(name)
        if self._torch and self._device.startswith("cuda"):
            import torch

            if torch.cuda.is_available():
                self._stream_header(name, stream)
                dev = torch.frombuffer(bytearray(stream), dtype=torch.uint8).to(self._device)
                try:
                    return api.decode(dev).reshape(self._shape(name))
                except FormatError as e:
                    raise self._fault(name, e) from None
        made = []

        def dest(h, n):                       # the decoder's own header parse: checked, then the output made
            self._check(name, h)
            if self._torch:
                import torch

                t = torch.empty(h.shape, dtype=h.layout.torch_dtype)
                made.append(t)
                return t.view(-1).view(h.layout.torch_view_ints).numpy().view(h.layout.uint)
            a = np.empty(h.shape, dtype=h.layout.numpy_dtype)
            made.append(a)
            return a.reshape(-1).view(h.layout.uint)

        try:
            api._decode_words(stream, None, None, "auto", dest)
        except FormatError as e:
            raise self._fault(name, e) from None
        out = made[0]
        return out if not self._torch or self._device == "cpu" else out.to(self._device)

    def _slice(self, name, key):
        shape = self._shape(name)
        key = key if isinstance(key, tuple) else (key,)
        if not shape or not key or not isinstance(key[0], (slice, int, np.integer)) or isinstance(key[0], bool):
            return self.get_tensor(name)[key]          # an index the rows cannot narrow down
        k0 = key[0]
        if isinstance(k0, slice):
            rows = range(shape[0])[k0]
        else:
            i = int(k0) + (shape[0] if int(k0) < 0 else 0)
            if not 0 <= i < shape[0]:
                raise IndexError(f"index {int(k0)} is out of bounds for dimension 0 of size {shape[0]}")
            rows = range(i, i + 1)
        lo = min(rows[0], rows[-1]) if len(rows) else 0
        hi = max(rows[0], rows[-1]) + 1 if len(rows) else 0
        part = self._rows(name, lo, hi, math.prod(shape[1:])).reshape((hi - lo,) + tuple(shape[1:]))
        if not isinstance(k0, slice):
            return part[(0,) + key[1:]]
        if rows.step != 1 and len(rows):
            sel = np.arange(len(rows)) * rows.step + (rows[0] - lo)
            if self._torch:
                import torch

                sel = torch.as_tensor(sel, device=part.device)
            part = part[sel]
        return part[(slice(None),) + key[1:]]

    def _rows(self, name, lo, hi, row):
        """Rows ``[lo, hi)`` of the first dimension, flat, decoding only the chunks that hold them."""
        if not self.is_compressed(name):
            e = self._entry(name)
            size = np.dtype(_NUMPY[e["dtype"]]).itemsize
            data = self._bytes(name)
            if self._info.get("crc32c", {}).get(name) is not None:
                return self._stored(name, data).reshape(-1)[lo * row:hi * row]
            return self._stored(name, data[lo * row * size:hi * row * size], shape=[(hi - lo) * row])
        stream = self._bytes(name)
        h = self._stream_header(name, stream)
        a, b = lo * row, hi * row
        if a == b:
            return self._family(np.empty(0, h.layout.numpy_dtype), h.layout.safetensors)
        first, last = a // h.chunk_size, -(-b // h.chunk_size)
        try:
            words = api.decode_chunks(stream, first, last)
        except FormatError as e:
            raise self._fault(name, e) from None
        part = np.ascontiguousarray(words[a - first * h.chunk_size:b - first * h.chunk_size])
        return self._family(part, h.layout.safetensors)


def safe_open(path, framework: str = "pt", device: str = "cpu") -> SafeOpen:
    """Open a compressed (or plain) safetensors file lazily: ``keys()``, ``metadata()``,
    ``get_tensor(name)``, ``get_slice(name)[...]``; use it as a context manager."""
    return SafeOpen(path, framework, device)


def load_file(path, device: str = "cpu", *, framework: str = "pt") -> dict:
    """Every tensor of a compressed (or plain) safetensors file, decoded, as ``{name: tensor}`` (torch
    tensors on ``device``; ``framework="np"``: NumPy arrays).  Each tensor's chunks are decoded on the
    codec's threads (:func:`codec.get_num_threads`), one tensor after another: on 2 cores that was faster
    than tensors decoded side by side (measured on MiniLM: 24 ms against 40 ms for 45 MB of bf16)."""
    with safe_open(path, framework, device) as f:
        return {n: f.get_tensor(n) for n in f.keys()}


# --------------------------------------------------------------------- model directories, shard by shard
def _spans(entries: dict[str, dict]) -> list[tuple[int, int, str]]:
    return sorted((e["data_offsets"][0], e["data_offsets"][1], name) for name, e in entries.items())


def compress_file(src, dst, *, checksum: bool = True) -> dict:
    """Compress one safetensors file into a ``.zcc.safetensors`` file that :func:`decompress_file` turns
    back into the same bytes (the original header is kept verbatim in the metadata, with the file's
    size and CRC32C).  Returns ``{"name", "size", "compressed"}``."""
    src = Path(src)
    with open(src, "rb") as fd:
        size = os.fstat(fd.fileno()).st_size
        with mmap.mmap(fd.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            mv = memoryview(mm)
            try:
                where = f"{src.name}: "
                start, entries, metadata = parse_header(mv, size, where)
                if _KEY in metadata:
                    raise ValueError(f"{src} is already a compressed safetensors file")
                spans = _spans(entries)
                at = 0
                for a, b, name in spans:
                    if a != at:
                        raise FormatError(f"{where}bytes {at}..{a} of the data belong to no tensor (not a "
                                          "standard safetensors file; `python -m codec compress` keeps such files)")
                    at = b
                if at != size - start:
                    raise FormatError(f"{where}{size - start - at} bytes after the last tensor")
                out, listed = [], {}

                def piece(a, b, name):          # its views of the map end with it (the map can then close)
                    e = entries[name]
                    lay = BY_SAFETENSORS.get(e["dtype"])
                    data = mv[start + a:start + b]
                    if lay is not None and b > a:
                        blob = _stream_if_smaller(np.frombuffer(data, dtype=lay.numpy_dtype).reshape(e["shape"]),
                                                  b - a, checksum)
                        if blob is not None:
                            listed[name] = {"dtype": e["dtype"], "shape": e["shape"]}
                            return name, "U8", [len(blob)], blob
                    return name, e["dtype"], e["shape"], bytes(data)

                out = [piece(*span) for span in spans]
                source = {"name": src.name, "size": size, "crc32c": crc32c(mv),
                          "header": bytes(mv[8:start]).decode("utf-8")}
            finally:
                mv.release()
    metadata = dict(metadata)
    metadata[_KEY] = _zipccl_json(out, listed, checksum, source=source)
    compressed = _write(dst, out, metadata)
    return {"name": src.name, "size": size, "compressed": compressed}


def decompress_file(src, dst) -> dict:
    """The original safetensors file of a :func:`compress_file` output, byte for byte (its CRC32C and
    size checked); returns ``{"name", "size", "compressed"}``."""
    with safe_open(src, framework="np") as f:
        where = f._where
        source = f._info.get("source")
        if not isinstance(source, dict) or not {"name", "size", "crc32c", "header"} <= set(source):
            raise FormatError(f"{where}not a compressed model shard (no source file recorded): use load_file")
        head = source["header"].encode("utf-8")
        prefix = struct.pack("<Q", len(head)) + head
        size = int(source["size"])
        # the original header, validated against the original size (the bytes after it are not here)
        start, entries, _ = parse_header(memoryview(prefix), size, where + "source ")
        if start != len(prefix):
            raise FormatError(f"{where}source header inconsistent")
        spans = _spans(entries)
        if (spans[-1][1] if spans else 0) != size - start:
            raise FormatError(f"{where}source header and source size {size} disagree")
        crc = crc32c(prefix)
        with atomic_write(dst) as out:
            out.write(prefix)
            for a, b, name in spans:
                if name not in f._entries:
                    raise FormatError(f"{where}tensor {name!r} of the source is missing")
                if f._shape(name) != tuple(entries[name]["shape"]) or f._dtype(name) != entries[name]["dtype"]:
                    raise FormatError(f"{where}tensor {name!r} disagrees with the source header")
                data = np.ascontiguousarray(f.get_tensor(name)).view(np.uint8).reshape(-1).data
                if len(data) != b - a:
                    raise FormatError(f"{where}tensor {name!r}: {len(data)} bytes, the source had {b - a}")
                crc = crc32c(data, crc)
                out.write(data)
            if crc != source["crc32c"]:
                raise FormatError(f"{where}CRC32C of the rebuilt file differs from the original's")
        return {"name": source["name"], "size": size, "compressed": os.path.getsize(src)}


_INDEX = ".safetensors.index.json"


def _copy(src: Path, dst: Path) -> None:
    import shutil

    with open(src, "rb") as i, atomic_write(dst) as o:
        shutil.copyfileobj(i, o, 1 << 22)


def _walk(src, dst, progress):
    """Every file under ``src`` (sorted), with its relative path; its folder made under ``dst``."""
    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        raise NotADirectoryError(src)
    for p in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = p.relative_to(src)
        if progress:
            progress(rel)
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        yield p, rel


def compress_dir(src, dst, *, checksum: bool = True, progress=None) -> list[dict]:
    """A model directory with every ``*.safetensors`` shard compressed (``*.zcc.safetensors``), the
    shard index rewritten to the new names (``*.zcc.safetensors.index.json``, the original kept inside
    it), every other file copied.  ``progress(path)``: called before each file.  Returns one summary
    per shard."""
    dst = Path(dst)
    out = []
    for p, rel in _walk(src, dst, progress):
        name = p.name
        if name.endswith(".safetensors") and not name.endswith(SUFFIX):
            out.append(compress_file(p, dst / rel.parent / (name[:-len(".safetensors")] + SUFFIX), checksum=checksum))
        elif name.endswith(_INDEX) and not name.endswith(SUFFIX + ".index.json"):
            text = p.read_text(encoding="utf-8")
            try:
                index = json.loads(text)
                wmap = index["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise FormatError(f"{name}: not a safetensors shard index ({e})") from None
            index["weight_map"] = {k: (v[:-len(".safetensors")] + SUFFIX if v.endswith(".safetensors") else v)
                                   for k, v in wmap.items()}
            index[_KEY] = {"layout": LAYOUT_VERSION, "source": {"name": name, "text": text}}
            with atomic_write(dst / rel.parent / (name[:-len(_INDEX)] + SUFFIX + ".index.json")) as f:
                f.write(json.dumps(index, indent=2, ensure_ascii=False).encode())
        else:
            _copy(p, dst / rel)
    return out


def decompress_dir(src, dst, *, progress=None) -> list[dict]:
    """The inverse of :func:`compress_dir`: the original shards and index, byte for byte, and the other
    files copied."""
    dst = Path(dst)
    out = []
    for p, rel in _walk(src, dst, progress):
        if p.name.endswith(SUFFIX):
            with safe_open(p, framework="np") as f:
                source = f._info.get("source") or {}
            name = source.get("name")
            if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
                raise FormatError(f"{p.name}: no valid source name recorded")
            out.append(decompress_file(p, dst / rel.parent / name))
        elif p.name.endswith(SUFFIX + ".index.json"):
            try:
                source = json.loads(p.read_text(encoding="utf-8"))[_KEY]["source"]
                name, text = source["name"], source["text"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise FormatError(f"{p.name}: not a compressed shard index ({e})") from None
            if not isinstance(name, str) or "/" in name or name.startswith(".") or not isinstance(text, str):
                raise FormatError(f"{p.name}: malformed source record")
            with atomic_write(dst / rel.parent / name) as f:
                f.write(text.encode("utf-8"))
        else:
            _copy(p, dst / rel)
    return out
