"""The row filter's kernels (numba): :func:`codec.filters.forward` and :func:`codec.filters.inverse`, word
for word (tests/test_filters.py checks them against the NumPy ones).  Words are unsigned integers of at most 32
bits; the arithmetic is in uint32, masked to ``k = E + M`` magnitude bits.  Compiled on first use, cached on
disk."""
from __future__ import annotations

import numpy as np
from numba import njit

from .filters import COST_BITS, LOG2_TABLE, MM_BIAS
from .layouts import FloatLayout

_LOG2 = LOG2_TABLE.copy()
_LOG2.flags.writeable = False


# The numba backend's row filter (codec._numba re-exports these plain functions, not the kernels: a decoder's
# namespace copies _numba's globals, and read-only and writeable arrays would compile a kernel twice, so the
# words read are always passed as a read-only view).
def _read_only(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


def filter_forward(words: np.ndarray, lay: FloatLayout, chunk_size: int, width: int) -> np.ndarray:
    """codec.filters.forward by :func:`forward`."""
    out = np.empty_like(words)
    forward(_read_only(words), out, chunk_size, width, lay.exp_bits + lay.man_bits)
    return out


def filter_inverse(words: np.ndarray, lay: FloatLayout, chunk_size: int, width: int, chunks, first: int = 0) -> None:
    """codec.filters.inverse by :func:`inverse`."""
    inverse(words, chunk_size, width, lay.exp_bits + lay.man_bits, _read_only(np.ascontiguousarray(chunks, np.bool_)),
            first)


def filter_costs(words: np.ndarray, at: np.ndarray, width: int, k: int, M: int, nbins: int):
    """codec.filters.numpy_costs by :func:`costs` (the same integers)."""
    return costs(_read_only(words), _read_only(at), width, k, M, nbins, _LOG2, MM_BIAS, COST_BITS)


@njit(cache=True)
def forward(src, dst, chunk_size, width, k):
    """FILTER_UP of every chunk of ``src`` into ``dst`` (another array of the same length and type)."""
    mask = np.uint32((1 << k) - 1)
    sign = np.uint32(1 << k)
    km1 = np.uint32(k - 1)
    one = np.uint32(1)
    n = src.size
    for a in range(0, n, chunk_size):
        b = min(n, a + chunk_size)
        dst[a:min(b, a + width)] = src[a:min(b, a + width)]
        s = src[a:b - width]
        cur = src[a + width:b]
        out = dst[a + width:b]
        for i in range(cur.size):
            v = np.uint32(cur[i])
            d = (v - np.uint32(s[i])) & mask
            out[i] = (v & sign) | (((d << one) & mask) ^ ((d >> km1) * mask))


@njit(cache=True)
def inverse(words, chunk_size, width, k, chunks, first):
    """Undo FILTER_UP in place on the chunks of ``words`` (from chunk ``first``) with ``chunks[first + j]`` set:
    a row at a time, whose values depend on the row above only."""
    mask = np.uint32((1 << k) - 1)
    sign = np.uint32(1 << k)
    one = np.uint32(1)
    n = words.size
    for j in range(-(-n // chunk_size)):
        if not chunks[first + j]:
            continue
        a = j * chunk_size
        b = min(n, a + chunk_size)
        for r in range(a + width, b, width):
            above = words[r - width:r]
            row = words[r:min(b, r + width)]
            for i in range(row.size):
                z = np.uint32(row[i])
                d = ((z & mask) >> one) ^ ((z & one) * mask)
                row[i] = (z & sign) | ((np.uint32(above[i]) + d) & mask)


@njit(cache=True)
def counts(words, at, width, k, M, nbins):
    """codec.filters.sample_counts, the same integers in one pass over the sample."""
    mask = (np.int64(1) << k) - 1
    c = np.zeros((2, nbins), np.int64)
    nz = np.zeros(2, np.int64)
    pos = np.zeros(2, np.int64)
    neg = np.zeros(2, np.int64)
    for i in at:
        v = np.int64(words[i])
        mag = v & mask
        d = (mag - (np.int64(words[i - width]) & mask)) & mask
        up = ((d << 1) & mask) ^ ((d >> (k - 1)) * mask)
        negative = (v >> k) & 1
        for t in range(2):
            m = mag if t == 0 else up
            if m == 0:
                c[t, 0] += 1
            else:
                c[t, (m >> (M - 1)) + 1] += 1
                nz[t] += 1
                neg[t] += negative
                pos[t] += 1 - negative
    return c, nz, pos, neg


@njit(cache=True)
def costs(words, at, width, k, M, nbins, log2, bias, bits):
    """codec.filters.sample_costs of :func:`counts`: ``(raw, filtered)`` in 2^-bits bits."""
    c, nz, pos, neg = counts(words, at, width, k, M, nbins)
    out = np.zeros(2, np.int64)
    for t in range(2):
        n = 0
        seen = 0
        for j in range(nbins):
            n += c[t, j]
            seen += c[t, j] > 0
        ent = 0
        for j in range(nbins):
            if c[t, j]:
                ent += c[t, j] * (log2[n] - log2[c[t, j]])
        both = 1 if pos[t] and neg[t] else 0
        out[t] = ent + (seen - 1) * bias + nz[t] * ((M - 1 + both) << bits)
    return out[0], out[1]
