"""The delta coding of a tensor against an earlier version of itself, in NumPy: the specification the
numba kernels (:mod:`codec._delta_numba`) must match byte for byte.

Values are handled as unsigned words of the dtype's width ``w`` (the bit patterns; NaN payloads, -0,
subnormals and infinities are words like any other).  Between ``base`` and ``new`` (same length):

* **positions**: the indices ``i_0 < i_1 < ...`` where the words differ, as gaps
  ``g_j = i_j - i_(j-1) - 1`` (``i_(-1) = -1``), split at a shift ``s``: the quotient ``g >> s`` as one
  byte (255 = escape: the quotient less 255 follows in the escape list, u64), the ``s`` low bits packed
  (little-endian bit order, ``s`` bits per change);
* **steps**: each changed word's move in float order.  ``key(u)`` maps a word to an unsigned integer
  that orders as the floats do (sign set: all bits flipped; clear: the sign bit set).  The step
  ``d = key(new) - key(base)`` mod ``2**w``, read as a signed ``w``-bit integer, is zigzagged
  (``z = 2d`` for ``d >= 0``, ``-2d - 1`` below) and ``v = z - 1`` (a change never has ``z = 0``) is
  stored as one byte (255 = escape: ``v - 255`` follows in the escape list, as a ``w``-bit word).

An optimizer step moves most changed values by one or two units in the last place, so the step bytes
are small and few-valued; the gaps are roughly geometric with mean ``numel / n_changed``.  The shift
``s = bit_length(numel // (32 * n_changed))`` leaves quotients of mean ~16-32 (rarely escaped) and
low bits that are close to uniform.  Byte streams are entropy-coded afterwards (:mod:`codec.delta`).
"""
from __future__ import annotations

import numpy as np

__all__ = ["shift_for", "keys", "from_keys", "split", "apply"]

ESCAPE = 255


def shift_for(numel: int, n_changed: int) -> int:
    """The gap shift the encoder uses: quotients of mean 16-32."""
    return int(numel // (32 * n_changed)).bit_length() if n_changed else 0


def _mask(w: int) -> int:
    return (1 << w) - 1


def keys(u: np.ndarray, w: int) -> np.ndarray:
    """``key(u)`` as int64: monotone in the float order of the words ``u``."""
    u = u.astype(np.int64)
    sign = 1 << (w - 1)
    return np.where(u & sign, u ^ _mask(w), u | sign)


def from_keys(k: np.ndarray, w: int) -> np.ndarray:
    """The inverse of :func:`keys` (int64 words)."""
    sign = 1 << (w - 1)
    return np.where(k & sign, k ^ sign, k ^ _mask(w))


def split(new: np.ndarray, base: np.ndarray, w: int):
    """The five raw sections of the delta from ``base`` to ``new`` (uint arrays of width ``w``):
    ``(shift, gap quotient bytes, packed low bits, gap escapes u64, step bytes, step escapes (w-bit))``."""
    idx = np.flatnonzero(new != base)
    n = idx.size
    s = shift_for(new.size, n)
    gaps = np.diff(idx, prepend=-1) - 1
    q = gaps >> s
    qbytes = np.minimum(q, ESCAPE).astype(np.uint8)
    qesc = (q[q >= ESCAPE] - ESCAPE).astype("<u8")
    low = ((gaps[:, None] >> np.arange(s)) & 1).astype(np.uint8).reshape(-1)
    lowbits = np.packbits(low, bitorder="little")
    d = (keys(new[idx], w) - keys(base[idx], w)) & _mask(w)
    d = np.where(d >> (w - 1), d - (1 << w), d)                           # signed w-bit
    v = np.where(d >= 0, 2 * d, -2 * d - 1) - 1
    vbytes = np.minimum(v, ESCAPE).astype(np.uint8)
    vesc = (v[v >= ESCAPE] - ESCAPE).astype(f"<u{w // 8}")
    return s, qbytes, lowbits, qesc, vbytes, vesc


class DeltaFault(ValueError):
    """The sections do not describe a delta for this base (a corrupted or forged stream)."""


def apply(base: np.ndarray, w: int, s: int, qbytes, lowbits, qesc, vbytes, vesc) -> np.ndarray:
    """``new`` from ``base`` and the sections of :func:`split` (checked; raises :class:`DeltaFault`)."""
    n = qbytes.size
    if vbytes.size != n or lowbits.size != -(-n * s // 8):
        raise DeltaFault("section sizes disagree with the number of changes")
    q = qbytes.astype(np.int64)
    esc = q == ESCAPE
    if int(esc.sum()) != qesc.size:
        raise DeltaFault(f"{int(esc.sum())} escaped gaps, {qesc.size} escapes stored")
    qe = qesc.astype(np.uint64)
    if qe.size and int(qe.max()) > base.size >> s:
        raise DeltaFault("an escaped gap runs past the end")
    q[esc] += qe.astype(np.int64)
    if n and int(q.max()) > base.size >> s:
        raise DeltaFault("a gap runs past the end of the tensor")
    low = np.unpackbits(lowbits, bitorder="little", count=n * s).reshape(n, s).astype(np.int64)
    gaps = (q << s) | (low << np.arange(s)).sum(axis=1) if s else q
    idx = np.cumsum(gaps + 1) - 1
    if n and idx[-1] >= base.size:
        raise DeltaFault("a change lies past the end of the tensor")
    v = vbytes.astype(np.int64)
    vesc_at = v == ESCAPE
    if int(vesc_at.sum()) != vesc.size:
        raise DeltaFault(f"{int(vesc_at.sum())} escaped steps, {vesc.size} escapes stored")
    v[vesc_at] += vesc.astype(np.int64)
    if n and int(v.max()) > _mask(w) - 1:
        raise DeltaFault("a step is out of range")
    z = v + 1
    d = np.where(z & 1, -((z + 1) >> 1), z >> 1)
    out = base.copy()
    out[idx] = from_keys((keys(base[idx], w) + d) & _mask(w), w).astype(base.dtype)
    return out
