"""numcodecs / Zarr codec: ``ZipCCL``, codec id ``"zipccl"``.

>>> import numpy as np
>>> from codec.zarr import ZipCCL
>>> c = ZipCCL(chunk_size=4096)
>>> x = np.linspace(-1, 1, 10_000, dtype=np.float32)
>>> bool((c.decode(c.encode(x)) == x).all())
True

After ``pip install zipccl`` (or ``pip install -e .``) numcodecs finds the codec through
the ``numcodecs.codecs`` entry point: ``numcodecs.get_codec({"id": "zipccl"})``; importing
this module also registers it.  Use it as a Zarr v2 ``compressor`` (or the last filter) on
arrays of dtype bfloat16, float16, float32, float8_e4m3fn or float8_e5m2.

Like other numcodecs codecs it compresses the buffer in memory order: a C-contiguous array
keeps its shape in the stream, an F-contiguous one is compressed as its flat memory, any
other array as a C-ordered copy.  ``decode`` returns a NumPy array of the original dtype,
or fills ``out`` (any buffer of exactly the decoded size, as numcodecs requires) and returns it.
"""
from __future__ import annotations

import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_contiguous_ndarray, ensure_ndarray_like, ndarray_copy
from numcodecs.registry import register_codec

from . import format as _fmt
from .api import decode as _decode, encode as _encode

__all__ = ["ZipCCL"]


class ZipCCL(Codec):
    """Lossless float compression (zipccl) as a numcodecs codec.

    chunk_size: values per independently decodable chunk of the stream, 1..2**20 (None: the codec's
        per-dtype default).
    checksum: store CRC32C checksums (decode then detects any corruption).
    """

    codec_id = "zipccl"

    def __init__(self, *, chunk_size: int | None = None, checksum: bool = False):
        if chunk_size is not None:
            if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)):
                raise TypeError(f"chunk_size must be an integer or None, got {chunk_size!r}")
            if not 1 <= int(chunk_size) <= _fmt.MAX_CHUNK_SIZE:
                raise ValueError(f"chunk_size must be in [1, {_fmt.MAX_CHUNK_SIZE}], got {chunk_size}")
        if not isinstance(checksum, (bool, np.bool_)):
            raise TypeError(f"checksum must be a bool, got {checksum!r}")
        self.chunk_size = None if chunk_size is None else int(chunk_size)
        self.checksum = bool(checksum)

    def encode(self, buf) -> bytes:
        arr = ensure_ndarray_like(buf)
        if not isinstance(arr, np.ndarray):
            arr = np.asarray(arr)
        if arr.flags.f_contiguous and not arr.flags.c_contiguous:
            arr = arr.reshape(-1, order="A")          # memory order, as numcodecs codecs see a buffer
        return bytes(_encode(arr, chunk_size=self.chunk_size, checksum=self.checksum))   # immutable, as stores expect

    def decode(self, buf, out=None):
        src = ensure_contiguous_ndarray(buf)
        h = _fmt.parse_header(src)
        if out is None:
            dec = np.empty(h.shape, dtype=h.layout.numpy_dtype)
            return _decode(src, out=dec)
        if (isinstance(out, np.ndarray) and out.dtype == h.layout.numpy_dtype and out.size == h.numel
                and out.flags.c_contiguous and out.flags.writeable):
            return _decode(src, out=out)
        dec = np.empty(h.numel, dtype=h.layout.numpy_dtype)
        _decode(src, out=dec)
        return ndarray_copy(dec, out)

    def get_config(self) -> dict:
        return {"id": self.codec_id, "chunk_size": self.chunk_size, "checksum": self.checksum}

    @classmethod
    def from_config(cls, config: dict) -> "ZipCCL":
        config = dict(config)
        codec_id = config.pop("id", cls.codec_id)
        if codec_id != cls.codec_id:
            raise ValueError(f"config is for codec {codec_id!r}, not {cls.codec_id!r}")
        return cls(**config)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(chunk_size={self.chunk_size!r}, checksum={self.checksum!r})"


register_codec(ZipCCL)
