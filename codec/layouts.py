"""Bit layouts of the supported float formats.

A float word is ``sign | exponent field | mantissa``.  The codec splits it into

* the **exponent field** ``e`` (``E`` bits), which is entropy coded, and
* the **sign+mantissa field** ``sm = sign << M | mantissa`` (``1 + M`` bits), stored raw,

and joins them back bit for bit.  Nothing is interpreted: zero, subnormals
(``e == 0``), Inf and NaN with any payload (``e == 2**E - 1``) are just field
values, so the split is a bijection on all ``2**(8*itemsize)`` words.

Every fact about a dtype lives in its :class:`FloatLayout` row (bit widths, stream code, word
types on the host, in torch and in the kernels, names and aliases, the safetensors name); the rest of
the project reads them from there.  Adding a dtype: see "Adding a dtype" in README.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["FloatLayout", "LAYOUTS", "layout_for", "layout_by_code", "layout_named", "as_words", "is_torch", "BY_SAFETENSORS", "split", "join", "log2_magnitude", "SUPPORTED"]


@dataclass(frozen=True)
class FloatLayout:
    # (the dtype objects below are cached on the instance: building them from names took ~10 us of a
    # small tensor's torch encode + decode)
    name: str            # canonical name, e.g. "bfloat16": NumPy/ml_dtypes and torch use it too
    code: int            # dtype code stored in the stream header (never reuse one)
    exp_bits: int        # E
    man_bits: int        # M
    itemsize: int        # bytes per word
    has_inf: bool = True  # False for the "fn" formats: the top field holds normals and NaN (mantissa all ones)
    safetensors: str = ""          # the dtype's name in a safetensors header
    aliases: tuple[str, ...] = ()  # other names users type (CLI --dtype, codegen targets), lower case

    @property
    def bias(self) -> int:
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def sm_bits(self) -> int:
        """Width of the raw sign+mantissa field: ``1 + M``."""
        return 1 + self.man_bits

    @cached_property
    def uint(self) -> np.dtype:
        return np.dtype(f"<u{self.itemsize}")

    @cached_property
    def numpy_dtype(self) -> np.dtype:
        return _numpy_dtype(self.name)

    @property
    def uint_name(self) -> str:
        """The unsigned word type's name (``uint16``): NumPy, torch and the Triton kernels'."""
        return f"uint{8 * self.itemsize}"

    @property
    def c_uint(self) -> str:
        """The unsigned word type in the CUDA kernels."""
        return {1: "unsigned char", 2: "unsigned short", 4: "unsigned int"}[self.itemsize]

    @cached_property
    def view_ints(self) -> np.dtype:
        """The integer type torch can view words as on the CPU, and convert to NumPy (torch's
        uint16/uint32 are storage-only): uint8, int16 or int32.  Same bits as :attr:`uint`."""
        return np.dtype(np.uint8) if self.itemsize == 1 else np.dtype(f"<i{self.itemsize}")

    @cached_property
    def torch_dtype(self):
        import torch

        return getattr(torch, self.name)

    @cached_property
    def torch_view_ints(self):
        """:attr:`view_ints` as a torch dtype."""
        import torch

        return getattr(torch, self.view_ints.name)

    @cached_property
    def torch_words(self):
        """The unsigned torch dtype the device kernels take words as (``torch.uint16``...)."""
        import torch

        return getattr(torch, self.uint_name)



LAYOUTS = (
    FloatLayout("bfloat16", 1, 8, 7, 2, safetensors="BF16", aliases=("bf16",)),
    FloatLayout("float16", 2, 5, 10, 2, safetensors="F16", aliases=("f16", "fp16", "half")),
    FloatLayout("float32", 3, 8, 23, 4, safetensors="F32", aliases=("f32", "fp32", "float")),
    FloatLayout("float8_e4m3fn", 4, 4, 3, 1, has_inf=False, safetensors="F8_E4M3",
                aliases=("f8_e4m3", "fp8_e4m3", "e4m3", "float8_e4m3")),
    FloatLayout("float8_e5m2", 5, 5, 2, 1, safetensors="F8_E5M2", aliases=("f8_e5m2", "fp8_e5m2", "e5m2")),
)
SUPPORTED = tuple(l.name for l in LAYOUTS)
_BY_NAME = {l.name: l for l in LAYOUTS}
_BY_CODE = {l.code: l for l in LAYOUTS}
_BY_ALIAS = {k: l for l in LAYOUTS for k in (l.name, l.safetensors.lower()) + l.aliases}
BY_SAFETENSORS = {l.safetensors: l for l in LAYOUTS}


def _numpy_dtype(name: str) -> np.dtype:
    if name in ("float16", "float32"):
        return np.dtype(name)
    # imported where first needed: ml_dtypes 0.7 takes ~1.3 s to import (it registers its ufunc loops
    # one by one, each checked against every loop before it), which ``import codec`` need not pay for
    # torch tensors, the CLI's safetensors files or a process that only moves bytes
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name))


def layout_for(dtype) -> FloatLayout:
    """The layout of a NumPy dtype, a torch dtype or a dtype name (aliases and safetensors names
    too: :func:`layout_named`); ``TypeError`` if unsupported."""
    name = getattr(dtype, "name", None) if isinstance(dtype, np.dtype) else None
    if name is None:
        s = str(dtype)
        name = s[len("torch."):] if s.startswith("torch.") else s
    lay = _BY_NAME.get(name) or (layout_named(name) if isinstance(dtype, str) else None)
    if lay is None:
        raise TypeError(
            f"unsupported dtype {dtype!s}: zipccl compresses floating-point tensors of dtype "
            f"{', '.join(SUPPORTED)}"
        )
    return lay


def layout_by_code(code: int) -> FloatLayout | None:
    return _BY_CODE.get(code)


def layout_named(name: str) -> FloatLayout | None:
    """The layout a user-typed name stands for: canonical, alias or safetensors name, any case
    (``bf16``, ``BF16``, ``fp8_e4m3``...); None if it names none."""
    return _BY_ALIAS.get(name.strip().lower())


def is_torch(x) -> bool:
    """Whether ``x`` is a torch tensor (without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def host_array(t) -> np.ndarray:
    """A NumPy view of a CPU tensor's memory that leaves its storage resizable.  ``Tensor.numpy()``
    marks the storage not resizable for good, and a decode into such a tensor must then check the
    memory's permissions (``codec.api._writable_memory``: a read of /proc/self/maps, ~1 ms in a process
    with torch loaded): a buffer reused for frames and for decoded values (a collective's pool) paid
    it on every decode.  DLPack views do not mark the storage (older NumPy makes them read-only:
    then the plain view)."""
    try:
        a = np.from_dlpack(t)
    except (AttributeError, TypeError, BufferError, RuntimeError):
        return t.numpy()
    return a if a.flags.writeable else t.numpy()


def as_words(x) -> tuple[np.ndarray, FloatLayout, tuple[int, ...], bool]:
    """``(words, layout, shape, from_torch)``: a 1-D little-endian unsigned view (or copy) of the
    words of ``x`` (a NumPy array, anything ``np.asarray`` takes, or a torch tensor, copied to the CPU
    if it is elsewhere).  Never writes to ``x``."""
    if is_torch(x):
        lay = layout_for(x.dtype)
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        a = host_array(t.contiguous().view(lay.torch_view_ints)).view(lay.uint)
        return a.reshape(-1), lay, tuple(x.shape), True
    a = np.asarray(x)
    lay = layout_for(a.dtype)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return np.ascontiguousarray(a).view(lay.uint).reshape(-1), lay, a.shape, False


def split(words: np.ndarray, lay: FloatLayout) -> tuple[np.ndarray, np.ndarray]:
    """Split unsigned words into ``(exponent field, sign+mantissa field)``, both of the word's uint type."""
    w = words.astype(lay.uint, copy=False)
    E, M = lay.exp_bits, lay.man_bits
    exp = (w >> M) & ((1 << E) - 1)
    sm = ((w >> (E + M)) << M) | (w & ((1 << M) - 1))
    return exp.astype(lay.uint, copy=False), sm.astype(lay.uint, copy=False)


def join(exp: np.ndarray, sm: np.ndarray, lay: FloatLayout) -> np.ndarray:
    """Inverse of :func:`split`: words ``sign << (E+M) | exp << M | mantissa``."""
    E, M = lay.exp_bits, lay.man_bits
    e = exp.astype(lay.uint, copy=False)
    s = sm.astype(lay.uint, copy=False)
    return (((s >> M) << (E + M)) | (e << M) | (s & ((1 << M) - 1))).astype(lay.uint, copy=False)


def log2_magnitude(exp: np.ndarray, sm: np.ndarray, lay: FloatLayout) -> np.ndarray:
    """``floor(log2 |x|) + bias`` as an int64 in exponent-field units (``exp`` for normal numbers).

    For a subnormal (``exp == 0``, mantissa ``m > 0``) it is ``1 - M + floor(log2 m)``, which
    continues the binades below field 1; the model is fitted on this, so that subnormals do not
    bias the fit.  Meaningless where the magnitude is 0 (callers exclude those words).
    """
    e = exp.astype(np.int64)
    mant = (sm & ((1 << lay.man_bits) - 1)).astype(np.int64)
    sub_log = np.frexp(np.maximum(mant, 1).astype(np.float64))[1].astype(np.int64) - 1   # exact: m < 2**53
    return np.where(e == 0, 1 - lay.man_bits + sub_log, e)


def packed_nbytes(n: int, width: int) -> int:
    """Bytes of ``n`` values of ``width`` bits packed as the codec packs planes:
    ``width // 8`` whole byte planes (low byte first), then the remaining ``width % 8``
    bits of every value packed little-endian (value 0 in the lowest bits).  Element-wise
    for NumPy arrays and torch tensors of counts and widths."""
    full, rem = width // 8, width % 8
    return n * full + (n * rem + 7) // 8


def pack_bits(v: np.ndarray, width: int) -> bytes:
    """``width // 8`` byte planes (low byte first), then the remaining bits packed little-endian."""
    full, rem = divmod(width, 8)
    v = v.astype(np.uint32)
    parts = [((v >> (8 * b)) & 0xFF).astype(np.uint8).tobytes() for b in range(full)]
    if rem:
        bits = ((v[:, None] >> (8 * full + np.arange(rem, dtype=np.uint32))) & 1).astype(np.uint8)
        parts.append(np.packbits(bits.ravel(), bitorder="little").tobytes())
    return b"".join(parts)


def unpack_bits(plane: np.ndarray, n: int, width: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: ``n`` values as uint32."""
    full, rem = divmod(width, 8)
    v = np.zeros(n, dtype=np.uint32)
    for b in range(full):
        v |= plane[b * n:(b + 1) * n].astype(np.uint32) << (8 * b)
    if rem:
        bits = np.unpackbits(plane[full * n:], count=n * rem, bitorder="little").reshape(n, rem)
        v |= (bits.astype(np.uint32) << (8 * full + np.arange(rem, dtype=np.uint32))).sum(axis=1, dtype=np.uint32)
    return v
