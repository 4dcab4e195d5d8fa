"""Declared layouts: a byte record or a table row is written down once, as an ordered field table, and
everything else is derived from it.

* :class:`Record`: little-endian fixed-size fields in a byte stream (the stream header, a coded chunk's
  head).  Derived: the ``struct.Struct``, the NumPy structured dtype, each field's offset and width,
  the size, and the named constants the code generator injects into the kernels of both dialects
  (``<PREFIX>_<FIELD>`` = offset, ``<PREFIX>_SIZE``).
* :class:`Row`: a row of int64 columns that the host fills and a kernel reads by index (the device
  decoder's per-chunk meta rows, the device encoder's per-chunk rows).  Derived: the column indices,
  the width, the constants (``<PREFIX>_<COLUMN>`` = index, ``<PREFIX>_WIDTH``), and :meth:`Row.stack`,
  which builds the table from named columns, so no caller depends on the order.

This module imports nothing of the project: everything above it may use it.
"""
from __future__ import annotations

import struct
from collections import namedtuple

import numpy as np

__all__ = ["Record", "Row"]

# struct codes -> NumPy field types (little-endian)
_NP = {"B": "u1", "b": "i1", "H": "<u2", "h": "<i2", "I": "<u4", "i": "<i4", "Q": "<u8", "q": "<i8", "d": "<f8"}


class Record:
    """A fixed-size little-endian record: ``Record("chunk_head", [("codebook", "H"), ("ref", "h"), ...])``.

    Field codes are :mod:`struct` codes (``B b H h I i Q q d``, or ``Ns`` for ``N`` raw bytes)."""

    def __init__(self, name: str, fields, prefix: str):
        self.name = name
        self.prefix = prefix
        self.fields = tuple((f, c) for f, c in fields)
        self.names = tuple(f for f, _ in self.fields)
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"{name}: duplicate field names")
        self.struct = struct.Struct("<" + "".join(c for _, c in self.fields))
        self.size = self.struct.size
        self.offset, self.width = {}, {}
        at = 0
        for f, c in self.fields:
            self.offset[f], self.width[f] = at, struct.calcsize("<" + c)
            at += self.width[f]
        assert at == self.size, (name, at, self.size)          # no padding: "<" packs fields back to back
        self.dtype = np.dtype([(f, _NP.get(c, f"S{self.width[f]}")) for f, c in self.fields])
        assert self.dtype.itemsize == self.size
        self.tuple = namedtuple(name.title().replace("_", ""), self.names)

    def unpack_from(self, buf, at: int = 0):
        """The fields at ``buf[at:]`` as a named tuple (in declaration order)."""
        return self.tuple(*self.struct.unpack_from(buf, at))

    def pack(self, **values) -> bytes:
        missing = set(self.names) - set(values)
        extra = set(values) - set(self.names)
        if missing or extra:
            raise TypeError(f"{self.name}: missing fields {sorted(missing)}, unknown fields {sorted(extra)}")
        return self.struct.pack(*(values[f] for f in self.names))

    def pack_into(self, buf, at: int, **values) -> None:
        """:meth:`pack` written into ``buf`` at offset ``at``."""
        buf[at:at + self.size] = self.pack(**values)

    def constants(self) -> dict[str, int]:
        """``{PREFIX_FIELD: offset, ..., PREFIX_SIZE: size}`` for the kernels (field names upper-cased)."""
        out = {f"{self.prefix}_{f.upper()}": self.offset[f] for f in self.names}
        out[f"{self.prefix}_SIZE"] = self.size
        return out

    def __repr__(self) -> str:
        return f"Record({self.name!r}, {self.size} bytes: {', '.join(self.names)})"


class Row:
    """A table row of int64 columns shared by the host and a kernel: ``Row("decode_meta", [...], "META")``."""

    def __init__(self, name: str, columns, prefix: str):
        self.name = name
        self.prefix = prefix
        self.columns = tuple(columns)
        if len(set(self.columns)) != len(self.columns):
            raise ValueError(f"{name}: duplicate column names")
        self.index = {c: i for i, c in enumerate(self.columns)}
        self.width = len(self.columns)

    def constants(self) -> dict[str, int]:
        """``{PREFIX_COLUMN: index, ..., PREFIX_WIDTH: width}`` for the kernels."""
        out = {f"{self.prefix}_{c.upper()}": i for i, c in enumerate(self.columns)}
        out[f"{self.prefix}_WIDTH"] = self.width
        return out

    def order(self, **columns) -> list:
        """The given columns in row order; every column must be named exactly once."""
        missing = set(self.columns) - set(columns)
        extra = set(columns) - set(self.columns)
        if missing or extra:
            raise TypeError(f"{self.name}: missing columns {sorted(missing)}, unknown columns {sorted(extra)}")
        return [columns[c] for c in self.columns]

    def __repr__(self) -> str:
        return f"Row({self.name!r}: {', '.join(self.columns)})"
