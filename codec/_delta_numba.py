"""The delta coding's kernels (numba): the same sections as :mod:`reference.delta`, byte for byte, in one
counting pass and one emitting pass over the two versions, and a checking pass then an applying pass
over the sections on the way back (so a bad stream is refused before ``out`` is touched).

Words are unsigned integers of the dtype's width ``w``; arithmetic is in int64.  Compiled on first use
and cached on disk (``cache=True``)."""
from __future__ import annotations

import numpy as np
from numba import njit

ESCAPE = 255          # reference.delta.ESCAPE; spelled out: numba's cache does not see another module's constants

# _check's verdicts (0: the sections are a delta for a tensor of this length)
BAD_GAP_ESCAPES, BAD_GAP, BAD_END, BAD_STEP_ESCAPES, BAD_STEP = range(1, 6)
FAULTS = {
    BAD_GAP_ESCAPES: "the escaped gaps and the stored gap escapes disagree",
    BAD_GAP: "a gap runs past the end of the tensor",
    BAD_END: "a change lies past the end of the tensor",
    BAD_STEP_ESCAPES: "the escaped steps and the stored step escapes disagree",
    BAD_STEP: "a step is out of range",
}


@njit(cache=True)
def count_changes(new, base):
    n = 0
    for i in range(new.size):
        n += new[i] != base[i]
    return n


@njit(cache=True, inline="always")
def _key(u, w):
    sign = np.int64(1) << (w - 1)
    mask = (np.int64(1) << w) - 1
    return u ^ mask if u & sign else u | sign


@njit(cache=True, inline="always")
def _word(k, w):
    sign = np.int64(1) << (w - 1)
    mask = (np.int64(1) << w) - 1
    return k ^ sign if k & sign else k ^ mask


@njit(cache=True, inline="always")
def _low_bits(lowbits, bit, s):
    low = np.int64(0)
    for t in range(s):
        low |= np.int64((lowbits[(bit + t) >> 3] >> ((bit + t) & 7)) & 1) << t
    return low


@njit(cache=True, inline="always")
def _put(bytes_, escapes, j, n_esc, value):
    """``value`` as byte ``j``, or the escape byte and ``value - ESCAPE`` as escape ``n_esc``; the new count."""
    if value >= ESCAPE:
        bytes_[j] = ESCAPE
        escapes[n_esc] = value - ESCAPE
        return n_esc + 1
    bytes_[j] = value
    return n_esc


@njit(cache=True)
def emit(new, base, s, w, qbytes, lowbits, qesc, vbytes, vesc):
    """Fill the sections (sized for the counted changes; ``lowbits`` zeroed); (gap escapes, step escapes)."""
    mask = (np.int64(1) << w) - 1
    sign = np.int64(1) << (w - 1)
    lowmask = (np.int64(1) << s) - 1
    j = 0
    last = -1
    nq = 0
    nv = 0
    bit = 0
    for i in range(new.size):
        a = np.int64(new[i])
        b = np.int64(base[i])
        if a == b:
            continue
        g = i - last - 1
        last = i
        nq = _put(qbytes, qesc, j, nq, g >> s)
        low = g & lowmask
        for t in range(s):
            if (low >> t) & 1:
                lowbits[(bit + t) >> 3] |= np.uint8(1 << ((bit + t) & 7))
        bit += s
        d = (_key(a, w) - _key(b, w)) & mask
        if d & sign:
            d -= mask + 1
        nv = _put(vbytes, vesc, j, nv, 2 * d - 1 if d >= 0 else -2 * d - 2)
        j += 1
    return nq, nv


@njit(cache=True)
def check(numel, w, s, qbytes, lowbits, qesc, vbytes, vesc):
    """0 if the sections describe changes inside a tensor of ``numel`` values, else a fault code
    (``lowbits`` holds at least ``s`` bits per change: checked by the caller)."""
    limit = numel >> s
    nq = 0
    nv = 0
    pos = -1
    bit = 0
    top = (np.int64(1) << w) - 2
    for j in range(qbytes.size):
        q = np.int64(qbytes[j])
        if q == ESCAPE:
            if nq >= qesc.size:
                return BAD_GAP_ESCAPES
            e = qesc[nq]
            if e > np.uint64(limit):
                return BAD_GAP
            q += np.int64(e)
            nq += 1
        if q > limit:
            return BAD_GAP
        low = _low_bits(lowbits, bit, s)
        bit += s
        pos += ((q << s) | low) + 1
        if pos >= numel:
            return BAD_END
        v = np.int64(vbytes[j])
        if v == ESCAPE:
            if nv >= vesc.size:
                return BAD_STEP_ESCAPES
            v += np.int64(vesc[nv])
            nv += 1
        if v > top:
            return BAD_STEP
    if nq != qesc.size:
        return BAD_GAP_ESCAPES
    if nv != vesc.size:
        return BAD_STEP_ESCAPES
    return 0


@njit(cache=True)
def apply(out, w, s, qbytes, lowbits, qesc, vbytes, vesc):
    """Apply sections that passed :func:`check` to ``out`` (holding the base), in place."""
    mask = (np.int64(1) << w) - 1
    nq = 0
    nv = 0
    pos = -1
    bit = 0
    for j in range(qbytes.size):
        q = np.int64(qbytes[j])
        if q == ESCAPE:
            q += np.int64(qesc[nq])
            nq += 1
        low = _low_bits(lowbits, bit, s)
        bit += s
        pos += ((q << s) | low) + 1
        v = np.int64(vbytes[j])
        if v == ESCAPE:
            v += np.int64(vesc[nv])
            nv += 1
        z = v + 1
        d = -((z + 1) >> 1) if z & 1 else z >> 1
        out[pos] = _word((_key(np.int64(out[pos]), w) + d) & mask, w)
