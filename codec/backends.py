"""The backend contract and registry: every implementation of the format that :mod:`codec.api`
dispatches to, registered by name and imported only when first used.

A host backend (``device=False``) codes NumPy word arrays on the CPU and satisfies :class:`Backend`;
it may provide only ``encode_chunks`` and ``decode_chunks`` (the NumPy reference does), and
:class:`_Complete` fills in the rest with the generic forms.  A device backend (``device=True``) runs
the generated kernels (:mod:`codegen.device`); :mod:`codec.api` hands it device tensors, and host data
only for ``decode_chunks``.

Every registered backend must produce the reference's bytes and accept exactly what it accepts:
``tests/test_backend_conformance.py`` runs the same round-trip, golden-stream and bad-stream checks on
each (see "Adding a backend" in README.md).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from . import filters
from . import format as fmt
from .format import Header
from .layouts import FloatLayout

__all__ = ["Backend", "register", "names", "get", "device_names", "ENCODE_GROUP_BYTES"]

ENCODE_GROUP_BYTES = 16 << 20   # input per encode_chunks call of the backends that return payloads


@runtime_checkable
class Backend(Protocol):
    """What :mod:`codec.api` calls on a host backend."""

    def encode_into(self, dst: np.ndarray, pos: int, words: np.ndarray, lay: FloatLayout, chunk_size: int,
                    checksum: bool) -> tuple[np.ndarray, np.ndarray, list | None]:
        """Code ``words`` (1-D unsigned, little-endian) in chunks of ``chunk_size`` into ``dst[pos:]``,
        which holds at least their raw size; return the chunks' kinds (uint8), payload sizes (int64) and
        CRC32C list (``None`` unless ``checksum``)."""

    def decode_chunks(self, h: Header, buf, chunks: range, out: np.ndarray) -> None:
        """Decode ``chunks`` of the stream ``buf`` (header ``h``, already validated) into ``out``
        (``h.layout.uint``, the chunks' values); raise :class:`codec.FormatError` on a bad payload."""

    def empty(self, n: int, dtype) -> np.ndarray:
        """A fresh array for decoded words (a backend may prefer aligned or pre-faulted memory)."""

    def reserve(self, buf: bytearray, n: int) -> None:
        """Lengthen the output ``buf`` to ``n`` bytes before :meth:`encode_into` fills it."""

    def shrink(self, buf: bytearray, n: int) -> None:
        """Cut ``buf`` to the ``n`` bytes written."""


@dataclass(frozen=True)
class Entry:
    name: str
    target: str          # "package.module" or "package.module:attribute"
    device: bool
    doc: str


_REGISTRY: dict[str, Entry] = {}
_LOADED: dict[str, object] = {}


def register(name: str, target: str, *, device: bool = False, doc: str = "") -> None:
    """Register a backend by name; ``target`` is imported on first use."""
    if name in _REGISTRY or name == "auto":
        raise ValueError(f"backend {name!r} is already registered")
    _REGISTRY[name] = Entry(name, target, device, doc)


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def device_names() -> tuple[str, ...]:
    return tuple(n for n, e in _REGISTRY.items() if e.device)


def get(name: str):
    """The backend registered as ``name`` (``auto``: numba), imported now if it was not yet."""
    name = "numba" if name == "auto" else name
    be = _LOADED.get(name)
    if be is not None:
        return be
    entry = _REGISTRY.get(name)
    if entry is None:
        raise ValueError(f"unknown backend {name!r}; available: auto, {', '.join(_REGISTRY)}")
    module, _, attr = entry.target.partition(":")
    obj = importlib.import_module(module)
    if attr:
        obj = getattr(obj, attr)
    be = _LOADED[name] = obj if entry.device else _Complete(obj)
    return be


class _Complete:
    """A host backend with the optional parts of :class:`Backend` filled in: ``encode_into`` from
    ``encode_chunks`` (payloads returned per group of chunks, copied into place), ``empty`` as
    ``np.empty``, ``reserve``/``shrink`` as plain resizes, ``filter_costs``/``filter_forward``/``filter_inverse``
    (format 10's row filter: the gate's sample costs, the transform, its inverse) as :mod:`codec.filters`'
    NumPy ones."""

    def __init__(self, impl):
        self.impl = impl
        for part in ("encode_into", "empty", "reserve", "shrink", "filter_costs", "filter_forward", "filter_inverse"):
            if hasattr(impl, part):
                setattr(self, part, getattr(impl, part))
        self.decode_chunks = impl.decode_chunks

    def encode_into(self, dst, pos, words, lay, chunk_size, checksum):
        group = max(1, ENCODE_GROUP_BYTES // (chunk_size * lay.itemsize)) * chunk_size
        kinds, sizes, crcs = [], [], []
        end = pos
        for start in range(0, len(words), group):
            k, payloads = self.impl.encode_chunks(words[start:start + group], lay, chunk_size)
            kinds.append(np.asarray(k, np.uint8))
            for p in payloads:
                dst[end:end + len(p)] = np.frombuffer(p, np.uint8)
                end += len(p)
                sizes.append(len(p))
                if checksum:
                    crcs.append(fmt.crc32c(p))
        kinds = np.concatenate(kinds) if kinds else np.zeros(0, np.uint8)
        return kinds, np.asarray(sizes, np.int64), (crcs if checksum else None)

    @staticmethod
    def empty(n, dtype):
        return np.empty(n, dtype)

    filter_costs = staticmethod(filters.numpy_costs)      # the row filter (format 10): NumPy's, the specification
    filter_forward = staticmethod(filters.forward)
    filter_inverse = staticmethod(filters.inverse)

    @staticmethod
    def reserve(buf, n):
        buf.extend(bytes(n - len(buf)))

    @staticmethod
    def shrink(buf, n):
        del buf[n:]


register("numba", "codec._numba", doc="the fast CPU path: numba kernels, byte-identical to the reference")
register("reference", "reference", doc="the NumPy reference: the format's specification, slow")
register("triton", "codegen.device:TRITON", device=True,
         doc="generated Triton kernels on a CUDA GPU (on the CPU under TRITON_INTERPRET=1, slowly)")
register("cuda", "codegen.device:CUDA", device=True,
         doc="generated CUDA kernels, NVRTC-compiled and launched with cuda.core on a CUDA GPU")
