"""CPU fast path: numba kernels that produce exactly the reference's bytes.

Same contract as :mod:`reference` (``encode_chunks`` / ``decode_chunks``); the threads of a call
(:mod:`codec._threads`: plain threads around ``nogil`` kernels, safe under fork and under
concurrent callers) claim chunks through atomic counters; no per-value Python work, scratch per
chunk only.  Every offset and
count read from a stream is validated inside the kernel before it is used (numba does no
bounds checking): a bad chunk sets an error code, which becomes :class:`codec.FormatError`.

The kernels are compiled on first use and cached on disk (``cache=True``).
"""
from __future__ import annotations

import sys
import threading
from types import FunctionType

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import leading_zeros

from . import format as fmt
from .codebook import (_ESTIMATE_BIAS, LAYOUT_MARGIN_SHIFT, ESC_LENGTH, EXPLICIT_GATE, EXPLICIT_STEP, LAYOUT_MAX_EXTRA, LAYOUT_SIGN, LENGTH_FRAC_BITS, N_SYMBOLS, PHASES, PROB_BITS, REF_MIN, SAMPLE_MIN, SAMPLE_STEP, STAT_FRAC_BITS,
                       SYM_ESC, SYM_WINDOW0, SYM_ZERO, TOTAL, WINDOW, WINDOW_LOW, ZERO_FRAC_BITS, ZERO_LEVELS,
                       load_family, n_codebooks)
from .format import (CB_EXPLICIT, explicit_layouts, CHUNK_HEAD, EXPLICIT_MAX_BYTES, FAULT_BITMAP, FAULT_CODEBOOK, FAULT_COUNTS, FAULT_EMPTY, FAULT_EXPONENT,
                     FAULT_MODE, FAULT_RANS_END, FAULT_RANS_STATE, FAULT_SHIFT, FAULT_SHORT, FAULT_SIZE,
                     FAULT_SPARSE, FAULT_SYMBOLS, FAULT_TABLE, HEAD_FAULTS, KIND_CODED, KIND_CONST, KIND_RAW, KIND_SPARSE,
                     MAX_LANES, RANS_L, SPARSE_GAP_BYTES,
                     SIGN_NEGATIVE, SIGN_POSITIVE, SIGN_STORED, VALUES_PER_LANE, ZERO_BLOCK_MODES, Header,
                     chunk_fault, crc32c, explicit_tables, parse_chunk_head, parse_sparse, plane_width, sign_modes,
                     zero_block_modes)
from .layouts import FloatLayout
from ._filters_numba import filter_costs, filter_forward, filter_inverse  # noqa: F401  (this backend's row filter, format 10)
from ._threads import get_num_threads, kernel_options, run
from ._simd import (LANES, PERMUTE, ENCODE_PERMUTE, ENCODE_LOOKUPS, RANK_BUCKET, RANK_ENTRY, RANK_FINE, RANK_FINE_ROWS, RANK_NEXT, RANKED_AT, RANKED_LEN,
                    RANKED_SYMBOLS, ENCODE_RANKS, copy_bytes, frozen, encode_prepare16, encode_prepare16_window, encode_prepare16_zeros,
                    encode_prepare32_window, encode_prepare32_zeros, PAIR, fetch_add,
                    pack_fields16, prefetch, STREAM_MOVES, TABLE_LOOKUPS, _AVX2_ONLY,
                    PACK_CUM, PACK_F, rans_decode16, rans_decode16_values, rans_encode16, rans_encode16_packed, rans_encode16_ranked,
                    rans_encode_rounds,
                    stats16, stats_halves, fill16,
                    values16_escaped, values16_window, values16_window_escaped, rans_decode16_shifted, rans_decode16_window,
                    WINDOW_WP_BITS)

assert sys.byteorder == "little", "the numba backend stores u16/u32 fields with host byte order"

_HEAD = CHUNK_HEAD.size
# numba's cache keys on this file, not on the values it freezes from other modules: the fit's sample
# rule is spelled out here (a change in codec.codebook alone would leave stale kernels behind)
_SAMPLE_STEP, _SAMPLE_MIN = 17, 256
assert (_SAMPLE_STEP, _SAMPLE_MIN) == (SAMPLE_STEP, SAMPLE_MIN), "change codec._numba's copy of the sample rule too"
# the chunk head's field offsets (codec.format.CHUNK_HEAD); numba freezes them into the kernels
_CH_CODEBOOK, _CH_REF, _CH_SHIFT, _CH_MODE, _CH_SIGN, _CH_NARROW, _CH_NSM, _CH_NESC, _CH_NWORDS = (
    CHUNK_HEAD.offset[f] for f in ("codebook", "ref", "shift", "mode", "sign", "narrow", "n_sm", "n_esc",
                                   "n_words"))
_N_ZL = len(ZERO_LEVELS)
_ZB_MODES = ZERO_BLOCK_MODES
assert min(_ZB_MODES) >= 4, "_encode_chunk builds every zero-block mode's blocks from 16-value blocks"
# the order _encode_chunk codes the zero-block candidates in (indices into _ZB_MODES): the likeliest winners
# first, so that the tight lower bounds rule out more of the rest before they are coded (MiniLM gradients and
# their sums, bf16: 64-value blocks win 193-222 of their mostly-zero chunks, 256-value blocks 53-74,
# 16-value blocks 0-10, 1024-value blocks none); the choice does not depend on it (ties go to the finer mode)
_ZB_ORDER = (1, 2, 0, 3) if len(_ZB_MODES) == 4 else tuple(range(len(_ZB_MODES)))
_RENORM_SHIFT = 16 + 16 - PROB_BITS
_plane_width = njit(cache=True, inline="always")(plane_width)     # codec.format's, compiled
_MASK = (1 << PROB_BITS) - 1


@njit(cache=True, inline="always")
def _lanes(n):
    k = 1
    while k < MAX_LANES and 2 * k * VALUES_PER_LANE <= n:
        k *= 2
    return k


_PAD = 32      # elements (of 4 bytes or more: >= 128 bytes, two cache lines) kept clear on each side


@njit(cache=True, inline="always")
def _aligned(n, dt):
    """An uninitialised array of ``n`` values starting on a 64-byte boundary: the tables the permutes
    load as whole registers (codec._simd), each load then on one cache line.  Numba aligns arrays to
    32 bytes; at an odd multiple every 64-byte load split across two lines, and decode ran 35% slower
    in such processes (bf16 2.0-2.1 instead of 3.2 GB/s on Zen 5)."""
    raw = np.empty(n + 64, dt)
    return raw[(-raw.ctypes.data % 64) // raw.itemsize:][:n]


@njit(cache=True, inline="always")
def _private(n, fill, dt):
    """A small array of ``n`` values ``fill`` on cache lines of its own, for state a hot loop writes
    (rANS states, statistics accumulators).  Small blocks of two threads' heaps can be neighbours:
    without the padding their lines bounce between the cores (false sharing: the statistics pass
    ran 1.7x slower on 2 threads than on 1).  It starts on a 64-byte boundary (see _aligned), so
    that the 16 rANS states a round loads and stores whole are one cache line."""
    a = _aligned(n + 2 * _PAD, dt)[_PAD:_PAD + n]
    a[:] = fill
    return a


@njit(cache=True, inline="always")
def _packed_nbytes(n, width):
    return n * (width // 8) + (n * (width % 8) + 7) // 8


@njit(cache=True, inline="always")
def _sample_bin(v, M, emask, nb):
    """The sample histogram's bin of word ``v`` (int64): ``field << 1 | leading bit``, +0 in the last bin."""
    return 2 * ((v >> M) & emask) + ((v >> (M - 1)) & 1) + (v == 0) * (nb - 1)


@njit(cache=True)
def _sample_hist(w, n, step, E, M):
    """codec.codebook.sample_histogram of ``w[:n:step]`` (four interleaved partial histograms: a run of
    equal bins does not wait on its own increments; branch-free bins), and the occupied bins other
    than +0's, in order: ``(hist, occupied, count)``."""
    nb = (2 << E) + 1
    emask = (1 << E) - 1
    part = np.zeros((4, nb), np.int32)
    i = 0
    while i + 3 * step < n:
        b0 = _sample_bin(np.int64(w[i]), M, emask, nb)
        b1 = _sample_bin(np.int64(w[i + step]), M, emask, nb)
        b2 = _sample_bin(np.int64(w[i + 2 * step]), M, emask, nb)
        b3 = _sample_bin(np.int64(w[i + 3 * step]), M, emask, nb)
        part[0, b0] += 1
        part[1, b1] += 1
        part[2, b2] += 1
        part[3, b3] += 1
        i += 4 * step
    while i < n:
        part[0, _sample_bin(np.int64(w[i]), M, emask, nb)] += 1
        i += step
    hist = np.empty(nb, np.int64)
    occ = np.empty(nb, np.int64)
    k = 0
    for b in range(nb):
        c = np.int64(part[0, b]) + part[1, b] + part[2, b] + part[3, b]
        hist[b] = c
        occ[k] = b
        k += (c > 0) & (b < nb - 1)
    return hist, occ, k


@njit(cache=True)
def _select(hist, occ, k, skipped_zeros, m, n_zero, n_log, s1, E, has_inf, freqs, mean_offsets, code_lengths,
            zero_thresholds, f, cum):
    """codec.codebook.select_codebook: per shape the mean-matched (phase, ref) and, where higher, the
    top one; the candidate whose clipped table codes the sample ``hist`` (``occ[:k]``: its occupied
    bins but +0's; less ``skipped_zeros`` +0 of skipped zero blocks) in the fewest bits.  A table that
    needs no clipping (the window inside the dtype's fields) is read in place; ``f``/``cum``: scratch
    for the others.  A candidate is dropped as soon as its partial length reaches the best (every term
    is >= 0)."""
    nb = (2 << E) + 1
    top = (1 << E) - 1
    zeros = hist[nb - 1] - skipped_zeros
    mq = 0
    if n_log > 0:
        mq = (s1 << STAT_FRAC_BITS) // n_log
    z = 0
    for t in zero_thresholds:
        if (n_zero << ZERO_FRAC_BITS) >= t * m:
            z += 1
    best_len = -1
    best_cb = 0
    best_ref = 0
    # codec.codebook.top_ref: the sample's highest field (occ is in order) at the window's top
    top_ref = REF_MIN
    if k > 0:
        top_ref = (occ[k - 1] >> 1) - (WINDOW - WINDOW_LOW - 1)
    for s in range(mean_offsets.shape[0]):
        bq = 0
        br = 0
        be = -1
        for q in range(PHASES):
            off = mean_offsets[s, q]
            ref = (mq - off + (1 << (STAT_FRAC_BITS - 1))) >> STAT_FRAC_BITS
            err = abs(mq - off - (ref << STAT_FRAC_BITS))
            if be < 0 or err < be:
                bq = q
                br = ref
                be = err
        br = max(br, REF_MIN)
        cb = (s * PHASES + bq) * _N_ZL + z
        for ci in range(2):
            r = br
            if ci == 1:
                if top_ref <= br:                # the top candidate only where it is above the mean's
                    break
                r = top_ref
            row = freqs[cb]
            if r - WINDOW_LOW < 0 or r - WINDOW_LOW + WINDOW - 1 > top:
                _tables(freqs, cb, r, E, has_inf, f, cum)
                row = f
            esc = code_lengths[row[SYM_ESC]] + ESC_LENGTH
            total = 0
            if zeros > 0:                   # +0: the ZERO symbol, or else field 0 with leading bit 0
                ln = esc
                if row[SYM_ZERO] > 0:
                    ln = code_lengths[row[SYM_ZERO]]
                elif 0 <= WINDOW_LOW - r < WINDOW and row[SYM_WINDOW0 + 2 * (WINDOW_LOW - r)] > 0:
                    ln = code_lengths[row[SYM_WINDOW0 + 2 * (WINDOW_LOW - r)]]
                total = zeros * ln
            for t in range(k):
                if best_len >= 0 and total >= best_len:
                    break
                b = occ[t]
                j = (b >> 1) - r + WINDOW_LOW
                ln = esc
                if 0 <= j < WINDOW:
                    fs = row[SYM_WINDOW0 + 2 * j + (b & 1)]
                    if fs > 0:
                        ln = code_lengths[fs]
                total += hist[b] * ln
            if best_len < 0 or total < best_len:
                best_len = total
                best_cb = cb
                best_ref = r
    return best_cb, best_ref


@njit(cache=True, inline="always")
def _wsym(field, ref, bit):
    return SYM_WINDOW0 + 2 * (field - ref + WINDOW_LOW) + bit


@njit(cache=True)
def _move(f, lo, hi, ref, target):
    """Move the mass of window fields [lo, hi) to ``target`` (ESC if outside the window)."""
    mass = 0
    any_sym = False
    for field in range(lo, hi):
        for b in range(2):
            s = _wsym(field, ref, b)
            if SYM_WINDOW0 <= s < N_SYMBOLS:
                mass += f[s]
                f[s] = 0
                any_sym = True
    if any_sym:
        if SYM_WINDOW0 <= target < N_SYMBOLS:
            f[target] += mass
        else:
            f[SYM_ESC] += mass


@njit(cache=True)
def _tables(freqs, cb, ref, exp_bits, has_inf, f, cum):
    """codec.codebook.clip_to_dtype + cumulative frequencies, into ``f``/``cum`` (int64)."""
    for s in range(N_SYMBOLS):
        f[s] = freqs[cb, s]
    top = (1 << exp_bits) - 1
    lo_field = ref - WINDOW_LOW
    hi_field = ref - WINDOW_LOW + WINDOW - 1
    below = np.int64(-1)        # (typed: a literal -1 or 0 would compile _move once more for each)
    if lo_field < below:
        _move(f, lo_field, below, ref, _wsym(0, ref, 0))
    if lo_field <= below and below <= hi_field:
        _move(f, below, below + 1, ref, _wsym(0, ref, 1))
    if hi_field > top:
        _move(f, max(top + 1, lo_field), hi_field + 1, ref, _wsym(top, ref, 0 if has_inf else 1))
    cum[0] = 0
    for s in range(N_SYMBOLS):
        cum[s + 1] = cum[s] + f[s]


@njit(cache=True, inline="always")
def _put16(out, p, v):
    out[p] = v & 0xFF
    out[p + 1] = (v >> 8) & 0xFF


@njit(cache=True, inline="always")
def _put32(out, p, v):
    out[p] = v & 0xFF
    out[p + 1] = (v >> 8) & 0xFF
    out[p + 2] = (v >> 16) & 0xFF
    out[p + 3] = (v >> 24) & 0xFF


@njit(cache=True, inline="always")
def _get16(buf, p):
    return np.int64(buf[p]) | (np.int64(buf[p + 1]) << 8)


@njit(cache=True, inline="always")
def _get32(buf, p):
    return (np.int64(buf[p]) | (np.int64(buf[p + 1]) << 8) | (np.int64(buf[p + 2]) << 16)
            | (np.int64(buf[p + 3]) << 24))


@njit(cache=True, inline="always")
def _put_escapes(out, p, vals, sym, lo, hi, E, M):
    """The escapes of values ``[lo, hi)`` (exponent field << 1 | leading mantissa bit) at ``p``; returns the new end."""
    for i in range(lo, hi):
        if sym[i] == SYM_ESC:
            w = np.int64(vals[i])
            _put16(out, p, (((w >> M) & ((1 << E) - 1)) << 1) | ((w >> (M - 1)) & 1))
            p += 2
    return p


@njit(cache=True, inline="always")
def _put_head(out, cb, ref, shift, mode, sign, narrow, n_sm, n_esc, n_words, table, ntab, bitmap, nbitmap, x, k):
    """A CODED payload's chunk header, explicit table, zero-block bitmap and final rANS states; returns the
    offset after them."""
    _put16(out, _CH_CODEBOOK, cb)
    _put16(out, _CH_REF, ref & 0xFFFF)
    out[_CH_SHIFT] = shift
    out[_CH_MODE] = mode
    out[_CH_SIGN] = sign
    out[_CH_NARROW] = narrow
    _put32(out, _CH_NSM, n_sm)
    _put32(out, _CH_NESC, n_esc)
    _put32(out, _CH_NWORDS, n_words)
    for b in range(ntab):
        out[_HEAD + b] = table[b]
    p = _HEAD + ntab
    for b in range(nbitmap):
        out[p + b] = bitmap[b]
    p += nbitmap
    for lane in range(k):
        _put32(out, p + 4 * lane, np.int64(x[lane]))
    return p + 4 * k


@njit(cache=True)
def _stats(vals, m, E, M):
    """The integer statistics the codebook is chosen from: ``(zeros, non-zero magnitudes, sum of their
    log2 in exponent units (a subnormal's from its bit length), OR of the low mantissa bits, set sign
    bits, values in all-+0 16-value blocks)`` (the last one the 16-value zero-block mode's skip, the
    last block the tail: the most any zero-block mode skips).  16 values at a time in one SIMD loop
    (per-lane sums, added up at the end), then the tail."""
    emask = (1 << E) - 1
    mmask = (1 << M) - 1
    lowmask = (1 << (M - 1)) - 1
    magmask = (1 << (E + M)) - 1
    acc32 = _private(6 * LANES, 0, np.int32)
    g16 = m - m % LANES
    em = (E << 8) | M
    done = stats_halves(vals, m, em, acc32)         # 16-bit words: 32 a step (0 done for others)
    stats16(vals, done, (g16 - done) // LANES, em, acc32)
    n_zero = 0
    n_log = 0
    s1 = 0
    orlow = 0
    n_neg = 0
    for j in range(LANES):
        n_neg += acc32[4 * LANES + j]
        n_zero += acc32[j]
        n_log += acc32[LANES + j]
        s1 += acc32[2 * LANES + j]
        orlow |= acc32[3 * LANES + j]
    skip16 = 16 * np.int64(acc32[5 * LANES])
    tail_zero = g16 < m
    for i in range(g16, m):
        w = np.int64(vals[i])
        tail_zero &= w == 0
        e = (w >> M) & emask
        sub = 64 - np.int64(leading_zeros(np.uint64((w & mmask) | 1))) - M
        nz = (w & magmask) != 0
        lg = (e if e != 0 else sub) if nz else 0
        n_zero += w == 0
        n_log += nz
        s1 += lg
        orlow |= w & lowmask
        n_neg += (w >> (E + M)) & 1
    return n_zero, n_log, s1, np.int64(orlow) & lowmask, n_neg, skip16 + (m - g16) * tail_zero


@njit(cache=True, inline="always")
def _sign_mode(n_neg, n_sm):
    """The chunk's sign mode (codec.format.SIGN_*) from its negative values and plane values: every
    negative value is in the plane (+0 is the only ZERO symbol)."""
    if n_neg == 0:
        return SIGN_POSITIVE
    return SIGN_NEGATIVE if n_neg == n_sm else SIGN_STORED


@njit(cache=True, inline="always")
def _narrow(orlow, shift, M, sign):
    """High residual bits left out (codec.format): those above the OR of the plane's low mantissa bits,
    where the sign is not stored on top of them."""
    if sign == SIGN_STORED:
        return 0
    bits = 64 - np.int64(leading_zeros(np.uint64(orlow >> shift)))      # bit length (0 for 0)
    return max(M - 1 - shift - bits, 0)


@njit(cache=True, inline="always")
def _symbol_residual(w, symtab, E, M, shift):
    """A non-ZERO word's (symbol or ESC, residual: sign and low mantissa bits less ``shift``)."""
    return (symtab[(w >> (M - 1)) & ((2 << E) - 1)],
            (((w >> (E + M)) & 1) << (M - 1 - shift)) | ((w & ((1 << (M - 1)) - 1)) >> shift))


@njit(cache=True)
def _prepare_scalar(vals, lo, hi, symtab, E, M, shift, sym, plane, n_sm, full, rem, kk):
    """Symbols and residuals of values ``[lo, hi)`` of a chunk with ZERO symbols one at a time (+0 is
    SYM_ZERO and takes no residual), residuals from plane index ``kk``; the remainder fields a byte
    each from index ``kk`` of the remainder plane, as encode_prepare16_zeros leaves them (packed at the
    end by _pack_fields).  Returns (escapes, new kk)."""
    remstart = full * n_sm
    n_esc = 0
    for i in range(lo, hi):
        w = np.int64(vals[i])
        if w == 0:
            sym[i] = SYM_ZERO
            continue
        sy, res = _symbol_residual(w, symtab, E, M, shift)
        sym[i] = sy
        n_esc += sy == SYM_ESC
        for b in range(full):
            plane[b * n_sm + kk] = (res >> (8 * b)) & 0xFF
        if rem:
            plane[remstart + kk] = (res >> (8 * full)) & ((1 << rem) - 1)
        kk += 1
    return n_esc, kk


@njit(cache=True, inline="always")
def _pack_fields(plane, remstart, n_sm, rem):
    """Pack the remainder plane's ``n_sm`` fields, a byte each from ``remstart`` (a chunk with ZERO
    symbols), in place into ``rem`` bits each; 16 spare bytes after them are zeroed first (the last
    group's padding, and a plane's padding bits are 0)."""
    for i in range(remstart + n_sm, remstart + n_sm + LANES):
        plane[i] = 0
    for g in range(0, n_sm, LANES):
        pack_fields16(plane, remstart + g, remstart + (g >> 3) * rem, rem)


@njit(cache=True, inline="always")
def _rans_put(x, lane, sy, f, cum, inv, wbuf, pos):
    """One rANS step of ``lane`` for symbol ``sy``, a flushed word stored downwards at ``wbuf[pos - 1]``
    (``pos > 0``: at most one word per value); returns the new ``pos``.  The flush is branch-free (a branch
    made the one-lane rounds 15x slower).  x // f via a double reciprocal: x < 2^32 and f <= 4096, so
    x * (1/f) is within 2^-19 of the true quotient and floor(x * (1/f) + 2^-14) is exact (a non-integer
    quotient is >= 2^-12 below the next integer)."""
    xl = np.int64(x[lane])
    need = xl >= (f[sy] << _RENORM_SHIFT)
    wbuf[pos - 1] = xl & 0xFFFF
    xl = xl >> (16 * need)
    qq = np.int64(xl * inv[sy] + 6.103515625e-05)
    x[lane] = (qq << PROB_BITS) + (xl - qq * f[sy]) + cum[sy]
    return pos - need


@njit(cache=True)
def _words_lower_bound(f, m, n_zero, k):
    """A lower bound of the rANS words :func:`_code_dense` flushes for ``m`` values over ``k`` lanes,
    ``n_zero`` of them the ZERO symbol, with table ``f`` (the others each cost at least the cheapest
    other symbol): a skipped candidate then costs no forward pass, and the bytes do not change.

    Why it holds (P = PROB_BITS): a step from state x (x >= 2^16, or >= 16 f right after a flush) to
    x' = (x // f) 2^P + x % f + cum is short of the ideal x 2^P / f by a factor at most 1 - (f - 1)
    (2^P - f) / (x 2^P), so log2 x grows by at least lb(f) = log2(2^P / f) + log2(1 - (f - 1) (2^P - f)
    / 2^(16+P)), or lb(f) - 0.0932 on a step right after a flush (factor >= 1 - 1/16).  A flush lowers
    log2 x by at most 16 + log2(1 + 1/16) (x >> 16 >= 16) and writes one word; every lane starts at
    2^16 and ends below 2^32.  So W words satisfy (16.0875 + 0.0932) W >= sum lb - 16 k."""
    total = np.float64(1 << PROB_BITS)
    cheapest = np.inf
    for t in range(N_SYMBOLS):
        if f[t] > 0 and t != SYM_ZERO:
            cheapest = min(cheapest, _step_bits(f[t], total))
    bits = (m - n_zero) * cheapest if m > n_zero and cheapest < np.inf else 0.0
    if n_zero > 0:
        bits += n_zero * _step_bits(f[SYM_ZERO], total)
    return _words_from_bits(bits, k)


@njit(cache=True, inline="always")
def _words_from_bits(bits, k):
    """The fewest words ``k`` lanes can flush for steps whose bounds sum to ``bits`` (see
    :func:`_words_lower_bound`'s proof), with a margin for the rounding of the sums."""
    w = (bits - 16.0 * k) / 16.1807 - 1e-6 * (bits + 1.0)
    return max(np.int64(0), np.int64(np.floor(w)))


@njit(cache=True)
def _words_lower_bound_bins(f, symtab, bins, n_zero, z, k):
    """:func:`_words_lower_bound` with every value at its own symbol's step bound instead of the cheapest
    one's: ``bins[key]`` values take ``symtab[key]``, the ``z`` +0 the ZERO symbol where ``n_zero`` (the
    payload codes them as ZERO) and key 0's symbol otherwise; the same proof, so the same guarantee, and
    tight (within the per-step slack) where the plain payload of a mostly-zero chunk only loses to a
    zero-block candidate after coding most of its symbols.  0 (no bound) where a key in use has no
    frequency (the payload then escapes it: its cost is not a step of that symbol)."""
    total = np.float64(1 << PROB_BITS)
    bits = 0.0
    for key in range(len(symtab)):
        c = bins[key]
        if c > 0:
            fs = f[symtab[key]]
            if fs <= 0:
                return np.int64(0)
            bits += c * _step_bits(fs, total)
    if z > 0:
        fs = f[SYM_ZERO] if n_zero > 0 else f[symtab[0]]
        if fs <= 0:
            return np.int64(0)
        bits += z * _step_bits(fs, total)
    return _words_from_bits(bits, k)


@njit(cache=True, inline="always")
def _step_bits(fs, total):
    return np.log2(total / fs) + np.log2(1.0 - (fs - 1.0) * (total - fs) / (total * 65536.0))


# Chunks of 8 lanes (8,192-16,383 values: zero-block payloads' kept values, tensors' last chunks, small
# chunk_size) run each rANS round as one masked 16-lane step, encode and decode: one lane at a time they
# coded at a third of a 16-lane chunk's speed (Zen 4, bf16, `python -m bench.probes.lane_counts`: encode
# 445-473 -> 606-666 MB/s, decode 635-649 -> 945-1,038, 16 lanes ~1,000 / 2,000).  With 4 lanes the masked
# step costs more per value than the scalar ones in the encoder (6.5 vs 5.4 ns) and saves 4 % in the
# decoder, whose values are assembled after the rounds: those keep the scalar rounds.  The same bytes.
_MASKED_MIN_LANES = 8


@njit(cache=True, inline="always")
def _push_masked(x, sym, ent, at, rk, ftab_r, inv_r, ftab, wbuf, pos, ranked, lanes):
    """A masked round of lanes ``0 .. lanes - 1`` (< LANES) for the values from ``at``, by the table form the
    chunk's rounds use (chunks of 16 or 32 lanes run theirs in one call: codec._simd.rans_encode_rounds)."""
    if ranked:
        return rans_encode16_ranked(x, 0, sym, at, rk, ftab_r, inv_r, wbuf, pos, lanes)
    if not ENCODE_PERMUTE:
        return rans_encode16_packed(x, 0, ent, at, wbuf, pos, lanes)
    return rans_encode16(x, 0, sym, at, ftab, wbuf, pos, lanes)


@njit(cache=True)
def _rans_rounds(x, sym, ent, m, k, f, cum, wbuf, fixed, limit, ahead):
    """The rANS rounds of a payload's ``m`` symbols ``sym`` (``ent``: their packed entries where there are no
    permutes) on ``k`` lanes from the states ``x``, backwards (16 lanes at a time in chunks of 16 or 32
    lanes, every round in one call, the states in registers; 8 as a masked 16-lane round, one lane at a
    time in smaller ones), the flushed words stored downwards from the end of
    ``wbuf``; returns where they start, or minus the payload's size (``fixed`` bytes besides the words)
    as soon as it passes ``limit`` (>= 0)."""
    # rANS.  x // f via a double reciprocal in the one-lane rounds (see _rans_put); the SIMD rounds divide in
    # single precision with an exact correction (codec._simd._divmod_f32), the ranked ones by table reciprocals
    full_rounds = m // k
    ftab = np.empty(N_SYMBOLS, np.uint32)
    for t in range(N_SYMBOLS):
        ftab[t] = f[t] | (cum[t] << 16)
    # the one-lane rounds' reciprocals, only where there are any: a partial last round, or a few lanes
    inv = np.empty(N_SYMBOLS if m > full_rounds * k or k < _MASKED_MIN_LANES else 0, np.float64)
    for t in range(len(inv)):
        inv[t] = 1.0 / f[t] if f[t] > 0 else 0.0
    # the same tables by rank among the used symbols, for permutes (codec._simd.RANKED_SYMBOLS)
    # (up to ENCODE_RANKS: the 16-lane rounds read 64, the masked ones 32)
    rk = _aligned(128, np.uint8)
    ftab_r = _aligned(ENCODE_RANKS, np.uint32)
    inv_r = _aligned(ENCODE_RANKS, np.float32)          # (f32: codec._simd._divmod_f32's reciprocals)
    rk[:] = 0
    ftab_r[:] = 0
    inv_r[:] = 0
    n_used = 0
    for t in range(N_SYMBOLS):
        if f[t] > 0:
            if n_used < ENCODE_RANKS:
                rk[t] = n_used
                ftab_r[n_used] = ftab[t]
                inv_r[n_used] = np.float32(1.0) / np.float32(f[t])
            n_used += 1
    # the rounds' table form: ranks in tables of 32 or 64 (permutes), else 0: by symbol (codec._simd)
    ranks = 0
    if ENCODE_PERMUTE and n_used <= ENCODE_RANKS:
        ranks = 32 if n_used <= 32 else ENCODE_RANKS
    ranked = ranks == 32
    cap = len(wbuf)
    pos = cap
    for lane in range(m - full_rounds * k - 1, -1, -1):     # a partial last round goes first
        pos = _rans_put(x, lane, sym[full_rounds * k + lane], f, cum, inv, wbuf, pos)
    # the rANS rounds do not touch the input: meanwhile, fetch the next chunk's (``ahead``) into the
    # cache, a line per round, so that its statistics pass does not wait on memory
    if k >= LANES:                  # all rounds in one call, the states in registers; stopped before a round
        stop = cap - (limit - fixed) // 2 if limit >= 0 else np.int64(-1)   # where the words pass the limit
        pos = rans_encode_rounds(x, sym, ent, rk, ftab_r, inv_r, ftab, wbuf, pos, full_rounds, k, stop, ahead, ranks)
        if limit >= 0 and fixed + 2 * (cap - pos) > limit:
            return -(fixed + 2 * (cap - pos))
        return pos
    pf = 0
    for r in range(full_rounds - 1, -1, -1):
        if limit >= 0 and fixed + 2 * (cap - pos) > limit:
            return -(fixed + 2 * (cap - pos))
        if k < _MASKED_MIN_LANES:                           # a few lanes: one at a time
            for lane in range(k - 1, -1, -1):
                pos = _rans_put(x, lane, sym[r * k + lane], f, cum, inv, wbuf, pos)
        else:                                               # fewer lanes than a register: a masked round
            pos = _push_masked(x, sym, ent, r * k, rk, ftab_r, inv_r, ftab, wbuf, pos, ranked, k)
        if pf < ahead.nbytes:                               # (a prefetch far past it costs a page walk)
            prefetch(ahead, pf)
            pf += 64
    return pos


@njit(cache=True, inline="always")
def _symbol_table(f, ref, E):
    """(field << 1 | leading bit) -> its window symbol under table ``f`` at ``ref``, or ESC."""
    symtab = np.empty(2 << E, np.int32)
    for key in range(2 << E):
        j = (key >> 1) - ref + WINDOW_LOW
        sy = SYM_ESC
        if 0 <= j < WINDOW:
            sy = SYM_WINDOW0 + 2 * j + (key & 1)
            if f[sy] == 0:
                sy = SYM_ESC
        symtab[key] = sy
    return symtab


@njit(cache=True, inline="always")
def _escaped_halves(esc_groups, n_groups, n_esc, at, c, bits):
    """A 32-value prepare's escape counts (``c``: those of values ``at .. at+15`` in its low ``bits`` bits,
    of ``at+16 .. at+31`` in the next ``bits``) noted per 16-value group: (groups, escapes) so far."""
    for h in range(2):
        ch = (c >> (bits * h)) & ((1 << bits) - 1)
        if ch:
            esc_groups[n_groups] = at + h * LANES
            n_groups += 1
            n_esc += ch
    return n_groups, n_esc


@njit(cache=True)
def _code_dense(vals, m, E, M, cb, ref, shift, f, cum, mode, bitmap, nbitmap, table, ntab, out, sym, wbuf, ahead,
                n_zero, sign, narrow, limit, bins, z):
    """_code_values's payload: symbols and residual plane in one forward SIMD pass, 16 values at a time,
    then the rANS rounds backwards (see :func:`_rans_rounds`) with the flushed words stored downwards from the end of ``wbuf`` (so they end in
    stream order).  ``n_zero``: the chunk's ZERO symbols
    (its +0 values, where the codebook codes them): their lanes are compressed out of the plane.
    ``sign``: the sign mode; the plane's width leaves out a sign it gives and ``narrow`` high bits (the
    residual's sign bit then sits just above the fields written, which never include it).
    ``limit`` >= 0: a payload longer than ``limit`` bytes is not wanted (another candidate is that
    short): the rANS rounds stop as soon as the words so far make it longer (they only grow), and a
    size above ``limit`` is returned with nothing written.  ``bins``: where not empty, the histogram of
    ``vals``' keys (:func:`_full_hist`: every value's ``field << 1 | leading bit``, +0 left out of bin 0),
    ``z`` the +0 among ``vals``: with a ``limit``, a tight lower bound of the words from them
    (:func:`_words_lower_bound_bins`) rules the payload out before any value is prepared."""
    k = _lanes(m)
    n_sm = m - n_zero
    symtab = _symbol_table(f, ref, E)
    # the same table as its window of 80 keys from 2 * (ref - WINDOW_LOW), for a permute (codec._simd)
    base = 2 * (ref - WINDOW_LOW)
    symwin = _aligned(128, np.uint8)
    symwin[:] = SYM_ESC
    for j in range(2 * WINDOW):
        if f[SYM_WINDOW0 + j] > 0:
            symwin[j] = SYM_WINDOW0 + j
    # where there are no permutes, the prepare pass looks up packed entries (symbol, f, cum: see
    # codec._simd.PACK_F) and stores them per value for the rANS rounds: by key, and by window index
    # (entry 2 * WINDOW: ESC's, for keys outside it)
    packsym = np.empty(N_SYMBOLS, np.uint32)
    for t in range(N_SYMBOLS):
        packsym[t] = t | (f[t] << PACK_F) | ((cum[t] & 0xFFF) << PACK_CUM)
    if ENCODE_PERMUTE:
        packtab = np.empty(0, np.uint32)
        packwin = np.empty(0, np.uint32)
        ent = np.empty(0, np.uint32)
    else:
        packtab = np.empty(2 << E, np.uint32)
        for key in range(2 << E):
            packtab[key] = packsym[symtab[key]]
        packwin = _aligned(2 * WINDOW + 1, np.uint32)
        for j in range(2 * WINDOW + 1):
            packwin[j] = packsym[symwin[j] if j < 2 * WINDOW else SYM_ESC]
        ent = np.empty(m + LANES, np.uint32)        # (a masked round of < 16 lanes reads 16 entries)
    width = _plane_width(M, shift, sign, narrow)
    full = width // 8
    rem = width % 8
    nplane = _packed_nbytes(n_sm, width)
    if limit >= 0:                          # a payload that cannot be short enough is not coded at all
        lb = _HEAD + ntab + nbitmap + 4 * k + nplane + 2 * _words_lower_bound(f, m, n_zero, k)
        if lb > limit:
            return lb
        if len(bins):
            lb = _HEAD + ntab + nbitmap + 4 * k + nplane + 2 * _words_lower_bound_bins(f, symtab, bins, n_zero, z, k)
            if lb > limit:
                return lb
    # with ZERO symbols the remainder fields are first stored a byte each (then packed in place)
    plane = np.empty((n_sm * (full + 1) if n_zero and rem else nplane) + 32, np.uint8)
    esc_groups = np.empty(m // LANES + 1, np.int64)
    n_groups = 0
    n_esc = 0
    g16 = m - m % LANES
    em = (E << 8) | M
    vec_end = g16                               # values from here on were prepared one at a time
    if n_zero:
        kk = np.int64(0)        # (typed: a literal 0 would compile the helpers it reaches once more, for Literal[int])
        at0 = 0
        if ENCODE_PERMUTE:                             # 16-bit words 32 at a time (-1: not here, done below)
            for at in range(0, g16 - g16 % PAIR, PAIR):
                if kk + PAIR > n_sm:
                    break
                c = encode_prepare32_zeros(vals, at, symwin, em, shift, sym, plane, 0, n_sm, full, rem, base, kk)
                if c < 0:
                    break
                kk += c >> 32
                n_groups, n_esc = _escaped_halves(esc_groups, n_groups, n_esc, at, c, 16)
                at0 = at + PAIR
        for at in range(at0, g16, LANES):
            if kk + LANES <= n_sm:
                if ENCODE_PERMUTE:
                    c = encode_prepare16_zeros(vals, at, symwin, em, shift, sym, plane, 0, n_sm, full, rem, base, kk,
                                               ent, 0)
                else:
                    c = encode_prepare16_zeros(vals, at, packwin, em, shift, sym, plane, 0, n_sm, full, rem, base, kk,
                                               ent, packsym[SYM_ZERO])
                kk += c >> 32
                c &= 0xFFFFFFFF
            else:                               # the last residuals: a 16-byte store would pass the plane
                vec_end = min(vec_end, at)
                c, kk = _prepare_scalar(vals, at, at + LANES, symtab, E, M, shift, sym, plane, n_sm, full, rem, kk)
            if c:
                esc_groups[n_groups] = at
                n_groups += 1
                n_esc += c
        c, kk = _prepare_scalar(vals, g16, m, symtab, E, M, shift, sym, plane, n_sm, full, rem, kk)
        if c:
            esc_groups[n_groups] = g16
            n_groups += 1
            n_esc += c
        if rem:
            _pack_fields(plane, full * n_sm, n_sm, rem)
    else:
        at0 = 0
        if ENCODE_PERMUTE:                             # 16-bit words 32 at a time (-1: other words, done below)
            for at in range(0, g16 - g16 % PAIR, PAIR):
                c = encode_prepare32_window(vals, at, symwin, em, shift, sym, plane, 0, m, full, rem, base)
                if c < 0:
                    break
                n_groups, n_esc = _escaped_halves(esc_groups, n_groups, n_esc, at, c, 32)
                at0 = at + PAIR
        for at in range(at0, g16, LANES):
            if ENCODE_PERMUTE:
                c = encode_prepare16_window(vals, at, symwin, em, shift, sym, plane, 0, m, full, rem, base)
            else:
                c = encode_prepare16(vals, at, packtab, em, shift, sym, plane, 0, m, full, rem, ent)
            if c:
                esc_groups[n_groups] = at
                n_groups += 1
                n_esc += c
        # the last m % 16 values one at a time (the remainder plane is byte-aligned at g16)
        acc = 0
        nacc = 0
        q = full * m + g16 * rem // 8
        tail_esc = 0
        for i in range(g16, m):
            w = np.int64(vals[i])
            sy, res = _symbol_residual(w, symtab, E, M, shift)
            sym[i] = sy
            tail_esc += sy == SYM_ESC
            for b in range(full):
                plane[b * m + i] = (res >> (8 * b)) & 0xFF
            acc |= ((res >> (8 * full)) & ((1 << rem) - 1)) << nacc
            nacc += rem
            if nacc >= 8:                            # up to 15 x 7 bits: flush as they fill, not at the end
                plane[q] = acc & 0xFF
                q += 1
                acc >>= 8
                nacc -= 8
        while nacc > 0:
            plane[q] = acc & 0xFF
            q += 1
            acc >>= 8
            nacc -= 8
        if tail_esc:
            esc_groups[n_groups] = g16
            n_groups += 1
            n_esc += tail_esc
    if not ENCODE_PERMUTE:
        for i in range(vec_end, m):
            ent[i] = packsym[sym[i]]
    x = _private(k, RANS_L, np.uint32)
    cap = len(wbuf)
    fixed = _HEAD + ntab + nbitmap + 4 * k + nplane + 2 * n_esc       # all but the words
    pos = _rans_rounds(x, sym, ent, m, k, f, cum, wbuf, fixed, limit, ahead)
    if pos < 0:
        return -pos
    n_words = cap - pos
    size = _HEAD + ntab + nbitmap + 4 * k + 2 * n_words + nplane + 2 * n_esc
    if size > len(out):                     # does not fit: the caller stores the chunk raw
        return size
    # payload: header, bitmap, states, words, plane, escapes
    p = _put_head(out, cb, ref, shift, mode, sign, narrow, n_sm, n_esc, n_words, table, ntab, bitmap, nbitmap, x,
                  k)
    copy_bytes(out, p, wbuf, 2 * pos, 2 * n_words)      # u16 words are stored little-endian
    p += 2 * n_words
    copy_bytes(out, p, plane, 0, nplane)
    p += nplane
    for g in range(n_groups):
        p = _put_escapes(out, p, vals, sym, esc_groups[g], min(m, esc_groups[g] + LANES), E, M)
    return p


@njit(cache=True)
def _full_hist(vals, m, E, M, n_zero):
    """codec.codebook.sample_histogram of ``vals[:m:EXPLICIT_STEP]`` (``n_zero``: the +0 among ``vals[:m]``):
    the bins are the words' bits ``field << 1 | leading bit`` (+0 counted in bin 0, then moved to the
    last), in eight interleaved partial histograms (a run of equal bins, as a ReLU's +0, waits on no
    increment: two partials took 1.3x as long there), indexed unsigned (no negative-index fix-up).  The
    +0 are the statistics' where every value is counted (a test in this loop was a fifth of its time)."""
    nb = (2 << E) + 1
    mask = np.uint64((2 << E) - 1)
    sh = np.uint64(M - 1)
    st = EXPLICIT_STEP
    u = np.uint64(nb)
    part = np.zeros(8 * nb, np.int32)
    zeros = 0
    i = 0
    while i + 8 * st <= m:
        v0 = np.uint64(vals[i])
        v1 = np.uint64(vals[i + st])
        v2 = np.uint64(vals[i + 2 * st])
        v3 = np.uint64(vals[i + 3 * st])
        v4 = np.uint64(vals[i + 4 * st])
        v5 = np.uint64(vals[i + 5 * st])
        v6 = np.uint64(vals[i + 6 * st])
        v7 = np.uint64(vals[i + 7 * st])
        part[(v0 >> sh) & mask] += 1
        part[u + ((v1 >> sh) & mask)] += 1
        part[np.uint64(2) * u + ((v2 >> sh) & mask)] += 1
        part[np.uint64(3) * u + ((v3 >> sh) & mask)] += 1
        part[np.uint64(4) * u + ((v4 >> sh) & mask)] += 1
        part[np.uint64(5) * u + ((v5 >> sh) & mask)] += 1
        part[np.uint64(6) * u + ((v6 >> sh) & mask)] += 1
        part[np.uint64(7) * u + ((v7 >> sh) & mask)] += 1
        if st > 1:
            zeros += (v0 == 0) + (v1 == 0) + (v2 == 0) + (v3 == 0) + (v4 == 0) + (v5 == 0) + (v6 == 0) + (v7 == 0)
        i += 8 * st
    while i < m:
        v = np.uint64(vals[i])
        part[(v >> sh) & mask] += 1
        if st > 1:
            zeros += v == 0
        i += st
    if st == 1:
        zeros = n_zero
    hist = np.zeros(nb, np.int64)
    for k in range(8):
        for b in range(nb - 1):
            hist[b] += part[k * nb + b]
    hist[0] -= zeros
    hist[nb - 1] = zeros
    return hist


@njit(cache=True)
def _key_hist(vals, m, zeros, w, n, n_zero, E, M):
    """:func:`_full_hist` of the chunk ``w[:n]`` (``n_zero`` +0), from ``vals[:m]`` where it can be: the values a
    payload codes (the chunk's, or a zero-block candidate's, which leaves out only +0 of skipped blocks: every
    other value is there), ``zeros`` +0 among them.  With EXPLICIT_STEP 1 (every value counted) their
    histogram is the chunk's but for the +0 count: the same bins from fewer values (a 99 %-zero chunk's
    candidate keeps a few hundred of its 65,536; the chunk's histogram took 22 us of its 80-110)."""
    if EXPLICIT_STEP != 1:
        return _full_hist(w, n, E, M, n_zero)
    h = _full_hist(vals, m, E, M, zeros)
    h[len(h) - 1] = n_zero
    return h


@njit(cache=True)
def _fitted_length(hist, skipped, f, ref, code_lengths, M):
    """codec.codebook.fitted_length: sample_length of ``hist`` (less ``skipped`` +0) under the fitted ``f``,
    plus the plane bits of +0 where ``f`` has no ZERO symbol."""
    nb = len(hist)
    zeros = hist[nb - 1] - skipped
    esc = code_lengths[f[SYM_ESC]] + ESC_LENGTH
    total = 0
    z0 = 0                                   # +0 coded as field 0 with leading bit 0 (bin 0)
    if f[SYM_ZERO] > 0:
        total += zeros * code_lengths[f[SYM_ZERO]]
    else:
        z0 = zeros
        total += (zeros * M) << LENGTH_FRAC_BITS
    for b in range(nb - 1):
        c = hist[b] + (z0 if b == 0 else 0)
        if c == 0:
            continue
        j = (b >> 1) - ref + WINDOW_LOW
        ln = esc
        if 0 <= j < WINDOW:
            fs = f[SYM_WINDOW0 + 2 * j + (b & 1)]
            if fs > 0:
                ln = code_lengths[fs]
        total += c * ln
    return total


@njit(cache=True)
def _explicit_counts(hist, skipped, ref, c):
    """codec.codebook.explicit_counts into ``c``."""
    nb = len(hist)
    for s in range(N_SYMBOLS):
        c[s] = 0
    c[SYM_ZERO] = hist[nb - 1] - skipped
    c[SYM_ESC] = EXPLICIT_STEP > 1
    for b in range(nb - 1):
        j = (b >> 1) - ref + WINDOW_LOW
        if 0 <= j < WINDOW:
            c[SYM_WINDOW0 + 2 * j + (b & 1)] += hist[b]
        else:
            c[SYM_ESC] += hist[b]


@njit(cache=True)
def _explicit_frequencies(c, code_lengths, f):
    """codec.codebook.explicit_frequencies of counts ``c`` into ``f`` (same integer steps, same ties)."""
    n = 0
    for s in range(N_SYMBOLS):
        n += c[s]
    total = 0
    for s in range(N_SYMBOLS):
        f[s] = max(c[s] * TOTAL // n, 1) if c[s] > 0 else 0
        total += f[s]
    while total < TOTAL:
        best = -1
        bs = 0
        for s in range(N_SYMBOLS):
            if c[s] > 0:
                g = c[s] * (code_lengths[f[s]] - code_lengths[min(f[s] + 1, TOTAL)])
                if g > best:
                    best = g
                    bs = s
        f[bs] += 1
        total += 1
    while total > TOTAL:
        best = -1
        bs = 0
        for s in range(N_SYMBOLS):
            if f[s] > 1:
                g = c[s] * (code_lengths[f[s] - 1] - code_lengths[f[s]])
                if best < 0 or g < best:
                    best = g
                    bs = s
        f[bs] -= 1
        total -= 1


@njit(cache=True, inline="always")
def _window_range(f):
    """The first and last window symbol (relative to SYM_WINDOW0) with a frequency; (-1, -1): none."""
    lo = -1
    hi = -1
    for j in range(2 * WINDOW):
        if f[SYM_WINDOW0 + j] > 0:
            if lo < 0:
                lo = j
            hi = j
    return lo, hi


@njit(cache=True)
def _explicit_nbytes(f):
    """codec.codebook.explicit_table_nbytes."""
    lo, hi = _window_range(f)
    nbytes = 2 + (1 + (f[SYM_ZERO] >= 128)) + (1 + (f[SYM_ESC] >= 128))
    if lo >= 0:
        for j in range(lo, hi + 1):
            nbytes += 1 + (f[SYM_WINDOW0 + j] >= 128)
    return nbytes


@njit(cache=True)
def _explicit_symbol_length(c, f, code_lengths):
    """codec.codebook.explicit_length less the table's bytes."""
    total = c[SYM_ESC] * ESC_LENGTH
    for s in range(N_SYMBOLS):
        total += c[s] * code_lengths[f[s]]
    return total


_TABLE_BYTE = 8 << LENGTH_FRAC_BITS


@njit(cache=True)
def _explicit_gate(m, hist, skipped, f, ref, code_lengths, M, fe):
    """codec.codebook.explicit_may_pay (``fe``: scratch)."""
    c = np.empty(N_SYMBOLS, np.int64)
    _explicit_counts(hist, skipped, ref, c)
    ns = 0
    for s in range(N_SYMBOLS):
        ns += c[s]
    if ns == 0:
        return False
    for s in range(N_SYMBOLS):
        fe[s] = max(c[s] * TOTAL // ns, 1) if c[s] > 0 else 0
    tb = _explicit_nbytes(fe) * _TABLE_BYTE
    saved = _fitted_length(hist, skipped, f, ref, code_lengths, M) - _explicit_symbol_length(c, fe, code_lengths)
    return saved * m > EXPLICIT_GATE * tb * ns


@njit(cache=True)
def _choose_explicit(vals, m, zeros, hist, skipped, w, n, E, full, full_state, full_skipped, f, ref, code_lengths, M,
                     fe):
    """Format 7: the explicit table ``fe`` for the ``m`` coded values ``vals`` (``zeros`` +0 among them) where it
    pays against the fitted ``f`` (codec.codebook.explicit_may_pay on the sample ``hist`` less ``skipped``
    sampled +0, then explicit_pays on ``full``, the histogram of every EXPLICIT_STEP-th of the chunk's ``n``
    values ``w``, less ``full_skipped`` +0 of skipped zero blocks: made once per chunk (:func:`_key_hist`), when
    first wanted (``full_state[0]``), and shared by the chunk's candidates); returns whether it does."""
    if not _explicit_gate(m, hist, skipped, f, ref, code_lengths, M, fe):
        return False
    c = np.empty(N_SYMBOLS, np.int64)
    if full_state[0] == 0:
        full[:] = _key_hist(vals, m, zeros, w, n, full_state[1], E, M)
        full_state[0] = 1
    _explicit_counts(full, full_skipped, ref, c)
    _explicit_frequencies(c, code_lengths, fe)
    tb = _explicit_nbytes(fe) * _TABLE_BYTE
    return (EXPLICIT_STEP * _explicit_symbol_length(c, fe, code_lengths) + tb
            < EXPLICIT_STEP * _fitted_length(full, full_skipped, f, ref, code_lengths, M))


# --------------------------------------- format 8's symbol layouts (a draft; codec.codebook's twins)
# The layout choice's numba twins, tested against codec.codebook.  Not yet called by the encoder: wired in, they
# and the layout chunks' coder added ~35 s to each cold compile of the encode kernel (per word type), which the
# test run cannot afford; until the encode kernel compiles them only where format 8 is written, the reference
# writes format 8 (codec.api).
@njit(cache=True)
def _fine_hist(vals, m, step, E, M):
    """codec.codebook.fine_histogram of ``vals[:m:step]``, in four interleaved partial counts."""
    x = min(LAYOUT_MAX_EXTRA, M - 1)
    nb = (1 << (E + 2 + x)) + 1
    u = np.uint64(nb)
    sh = np.uint64(M - 1 - x)
    mag = np.uint64((1 << (E + M)) - 1)
    sgn = np.uint64(E + M)
    zb = np.uint64(nb - 1)
    part = np.zeros(4 * nb, np.int32)
    i = 0
    while i + 4 * step <= m:
        for t in range(4):
            v = np.uint64(vals[i + t * step])
            key = (((v & mag) >> sh) << np.uint64(1)) | (v >> sgn)
            part[np.uint64(t) * u + (zb if v == 0 else key)] += 1
        i += 4 * step
    while i < m:
        v = np.uint64(vals[i])
        key = (((v & mag) >> sh) << np.uint64(1)) | (v >> sgn)
        part[zb if v == 0 else key] += 1
        i += step
    hist = np.zeros(nb, np.int64)
    for t in range(4):
        for b in range(nb):
            hist[b] += part[t * nb + b]
    return hist


@njit(cache=True)
def _layout_keys(fine, E, M, layout, keys):
    """codec.codebook.layout_histogram of ``fine`` into ``keys[:2^(E + b)]``."""
    x = min(LAYOUT_MAX_EXTRA, M - 1)
    k = layout & 3
    s = (layout >> 2) & 1
    nk = 1 << (E + 1 + k + s)
    for t in range(nk):
        keys[t] = 0
    for b in range(len(fine) - 1):
        field = b >> (2 + x)
        top = ((b >> 1) & ((2 << x) - 1)) >> (x - k)
        key = ((field << (1 + k)) | top)
        if s:
            key = (key << 1) | (b & 1)
        keys[key] += fine[b]
    return nk


@njit(cache=True)
def _layout_counts(keys, nk, zeros, layout, c):
    """codec.codebook._layout_counts into ``c``; returns the ref."""
    bits = 1 + (layout & 3) + ((layout >> 2) & 1)
    per = (2 * WINDOW) >> bits
    nf = nk >> bits
    fields = np.zeros(nf, np.int64)
    total = 0
    for t in range(nk):
        fields[t >> bits] += keys[t]
        total += keys[t]
    cover = 0
    for t in range(min(per, nf)):
        cover += fields[t]
    best = cover
    f0 = 0
    for t in range(1, nf):
        cover -= fields[t - 1]
        if t + per - 1 < nf:
            cover += fields[t + per - 1]
        if cover > best:
            best = cover
            f0 = t
    for sy in range(N_SYMBOLS):
        c[sy] = 0
    c[SYM_ZERO] = zeros
    inside = 0
    for j in range(min(2 * WINDOW, nk - (f0 << bits))):
        c[SYM_WINDOW0 + j] = keys[(f0 << bits) + j]
        inside += keys[(f0 << bits) + j]
    c[SYM_ESC] = total - inside
    return f0 + WINDOW_LOW


@njit(cache=True)
def _plane_bits(fine, M, layout, orlow):
    """codec.codebook._plane_bits."""
    pos = 0
    neg = 0
    for b in range(0, len(fine) - 1, 2):
        pos += fine[b]
        neg += fine[b + 1]
    stored = pos > 0 and neg > 0 and not (layout >> 2) & 1
    mk = M - (layout & 3)
    low = orlow & ((1 << (mk - 1)) - 1)
    shift = 0
    while shift < mk - 1 and ((low >> shift) & 1) == 0:
        shift += 1
    narrow = 0
    if not stored:
        narrow = max(mk - 1 - shift - (64 - np.int64(leading_zeros(np.uint64(low >> shift)))), 0)
    return mk - shift - (0 if stored else 1) - narrow


@njit(cache=True)
def _best_layout(fine, E, M, code_lengths, zeros, orlow, c):
    """codec.codebook._best_layout: ``(estimate, layout, ref, table length)``, the layout's counts in ``c``."""
    x = min(LAYOUT_MAX_EXTRA, M - 1)
    n_nz = 0
    for b in range(len(fine) - 1):
        n_nz += fine[b]
    keys = np.empty(1 << (E + 2 + x), np.int64)
    ct = np.empty(N_SYMBOLS, np.int64)
    f = np.empty(N_SYMBOLS, np.int64)
    best = -1
    best_layout = 0
    best_ref = 0
    best_tb = 0
    est0 = 0
    for k in range(x + 1):
        for s in range(2):
            layout = k | (s * LAYOUT_SIGN)
            nk = _layout_keys(fine, E, M, layout, keys)
            r = _layout_counts(keys, nk, zeros, layout, ct)
            ns = 0
            for sy in range(N_SYMBOLS):
                ns += ct[sy]
            for sy in range(N_SYMBOLS):
                f[sy] = max(ct[sy] * TOTAL // ns, 1) if ct[sy] > 0 else 0
            tb = (_explicit_nbytes(f) + 1) * _TABLE_BYTE
            used = 0
            for sy in range(N_SYMBOLS):
                used += ct[sy] > 0
            est = (_explicit_symbol_length(ct, f, code_lengths) + tb + _ESTIMATE_BIAS * (used - 1)
                   + ((n_nz * _plane_bits(fine, M, layout, orlow)) << LENGTH_FRAC_BITS))
            if layout == 0:
                est0 = est
            if (best < 0 or est < best) and (layout == 0 or est + (est0 >> LAYOUT_MARGIN_SHIFT) < est0):
                best = est
                best_layout = layout
                best_ref = r
                best_tb = tb
                c[:] = ct
    return best, best_layout, best_ref, best_tb


@njit(cache=True)
def _fitted_total(fine, f, ref, code_lengths, E, M, skipped, orlow):
    """codec.codebook._fitted_total."""
    x = min(LAYOUT_MAX_EXTRA, M - 1)
    hist = np.zeros((2 << E) + 1, np.int64)
    n_nz = 0
    for b in range(len(fine) - 1):
        hist[(b >> (2 + x)) * 2 + ((b >> (1 + x)) & 1)] += fine[b]
        n_nz += fine[b]
    hist[len(hist) - 1] = fine[len(fine) - 1]
    return _fitted_length(hist, skipped, f, ref, code_lengths, M) + ((n_nz * _plane_bits(fine, M, 0, orlow)) << LENGTH_FRAC_BITS)


@njit(cache=True)
def _explicit_choice_may_pay(sample, f, ref, n, code_lengths, E, M, skipped, orlow):
    """codec.codebook.explicit_choice_may_pay."""
    zeros = sample[len(sample) - 1] - skipped
    ns = zeros
    for b in range(len(sample) - 1):
        ns += sample[b]
    if ns == 0:
        return False
    c = np.empty(N_SYMBOLS, np.int64)
    est, layout, r, tb = _best_layout(sample, E, M, code_lengths, zeros, orlow, c)
    saved = _fitted_total(sample, f, ref, code_lengths, E, M, skipped, orlow) - (est - tb)
    return saved * n > EXPLICIT_GATE * tb * ns


@njit(cache=True)
def _explicit_choice(fine, f, ref, code_lengths, E, M, skipped, orlow, fe):
    """codec.codebook.explicit_choice: ``(layout, ref)`` with the frequencies in ``fe``, or (-1, 0)."""
    c = np.empty(N_SYMBOLS, np.int64)
    _, layout, r, _ = _best_layout(fine, E, M, code_lengths, fine[len(fine) - 1] - skipped, orlow, c)
    _explicit_frequencies(c, code_lengths, fe)
    n_nz = 0
    for b in range(len(fine) - 1):
        n_nz += fine[b]
    length = (_explicit_symbol_length(c, fe, code_lengths) + (_explicit_nbytes(fe) + 1) * _TABLE_BYTE
              + ((n_nz * _plane_bits(fine, M, layout, orlow)) << LENGTH_FRAC_BITS))
    if length < _fitted_total(fine, f, ref, code_lengths, E, M, skipped, orlow):
        return layout, r
    return -1, 0


@njit(cache=True)
def _pack_table(f, out):
    """codec.format.pack_explicit_table into ``out``; returns its length."""
    lo, hi = _window_range(f)
    cnt = hi - lo + 1 if lo >= 0 else 0
    lo = max(lo, 0)
    out[0] = lo
    out[1] = cnt
    p = 2
    for t in range(cnt + 2):
        v = f[SYM_ZERO] if t == 0 else (f[SYM_ESC] if t == 1 else f[SYM_WINDOW0 + lo + t - 2])
        if v >= 128:
            out[p] = (v & 0x7F) | 0x80
            out[p + 1] = v >> 7
            p += 2
        else:
            out[p] = v
            p += 1
    return p


@njit(cache=True)
def _code_values(vals, m, stats, hist, occ, k_occ, skipped_zeros, E, M, has_inf, freqs, mean_offsets, code_lengths,
                 zero_thresholds, explicit, w_all, n_all, full, full_state, full_skipped, mode, bitmap, nbitmap, out, sym, wbuf, ahead, limit):
    """Write a CODED payload for ``vals[:m]`` into ``out``; return its size (nothing is written
    when it exceeds ``len(out)``, or ``limit`` when that is >= 0: see :func:`_code_dense`).
    ``stats``: :func:`_stats` of ``vals[:m]``.

    ``sym`` (uint8, >= m) and ``wbuf`` (uint16, >= m + 64) are scratch; ``ahead``: the input that
    will be coded next (prefetched while the rANS rounds run).
    """
    n_zero, n_log, s1, orlow, n_neg, _ = stats
    f = np.empty(N_SYMBOLS, np.int64)
    cum = np.empty(N_SYMBOLS + 1, np.int64)
    cb, ref = _select(hist, occ, k_occ, skipped_zeros, m, n_zero, n_log, s1, E, has_inf, freqs, mean_offsets,
                      code_lengths, zero_thresholds, f, cum)
    _tables(freqs, cb, ref, E, has_inf, f, cum)
    table = np.empty(EXPLICIT_MAX_BYTES, np.uint8)
    ntab = 0
    if explicit:
        fe = np.empty(N_SYMBOLS, np.int64)
        if _choose_explicit(vals, m, n_zero, hist, skipped_zeros, w_all, n_all, E, full, full_state, full_skipped,
                            f, ref, code_lengths, M, fe):
            cb = CB_EXPLICIT
            ntab = _pack_table(fe, table)
            for s in range(N_SYMBOLS):
                f[s] = fe[s]
                cum[s + 1] = cum[s] + f[s]
    shift = 0
    while shift < M - 1 and ((orlow >> shift) & 1) == 0:
        shift += 1
    zero_ok = f[SYM_ZERO] > 0
    sign = _sign_mode(n_neg, m - n_zero if zero_ok else m)
    narrow = _narrow(orlow, shift, M, sign)
    # the keys' histogram, where the chunk's is made (format 7's gate, or a candidate before the plain payload):
    # the candidates' values are the chunk's less +0 in skipped blocks, so the non-zero keys are the chunk's
    bins = full[:2 << E] if full_state[0] == 1 and limit >= 0 else full[:0]
    return _code_dense(vals, m, E, M, cb, ref, shift, f, cum, mode, bitmap, nbitmap, table, ntab, out, sym, wbuf,
                       ahead, n_zero if zero_ok else 0, sign, narrow, limit, bins, n_zero)


@njit(cache=True)
def _nonzero_blocks16(w, n):
    """Per 16-value block of ``w[:n]`` (the last one partial), 1 where it holds a non-zero word: the
    zero-block modes' blocks are unions of these (every mode's block is 16 << j values)."""
    nb = (n + 15) >> 4
    out = np.empty(nb, np.uint8)
    for b in range(n >> 4):
        acc = w[16 * b]
        for i in range(1, 16):
            acc |= w[16 * b + i]
        out[b] = acc != 0
    if nb > n >> 4:
        acc = w[16 * (nb - 1)]
        for i in range(16 * (nb - 1) + 1, n):
            acc |= w[i]
        out[nb - 1] = acc != 0
    return out


@njit(cache=True)
def _zero_blocks(nzb, n, mode, bitmap):
    """How many of the ``n`` values lie in all-zero blocks of ``1 << mode`` values (``nzb``: from
    :func:`_nonzero_blocks16`); their bits are set in ``bitmap`` (zeroed, at least one bit per block)."""
    bs = 1 << mode
    per = bs >> 4
    skipped = 0
    for blk in range((n + bs - 1) // bs):
        allzero = True
        for b in range(blk * per, min(len(nzb), blk * per + per)):
            if nzb[b]:
                allzero = False
                break
        if allzero:
            skipped += min(n, blk * bs + bs) - blk * bs
            bitmap[blk >> 3] |= 1 << (blk & 7)
    return skipped


@njit(cache=True, inline="always")
def _is_const(w, n):
    """Whether ``w[:n]`` is one word repeated: 64 values a block, OR-ed differences (a loop the compiler
    vectorises; value by value, an all-zero chunk of a gradient took 30 us of its 64K values)."""
    first = w[0]
    i = 0
    while i + 64 <= n:
        acc = w[i] ^ first
        for j in range(1, 64):
            acc |= w[i + j] ^ first
        if acc != 0:
            return False
        i += 64
    for j in range(i, n):
        if w[j] != first:
            return False
    return True


@njit(cache=True, inline="always")
def _word_bits(w, n, n_neg, itemsize):
    """The bit length of the OR of ``w[:n]``: a SPARSE payload's width (all of them with a sign bit)."""
    if n_neg > 0:
        return 8 * itemsize
    acc = np.int64(0)
    for i in range(n):                      # (a loop the compiler vectorises)
        acc |= np.int64(w[i])
    return 64 - np.int64(leading_zeros(np.uint64(acc)))


@njit(cache=True, inline="always")
def _varint_nbytes(v):
    return 1 + (v >= 128) + (v >= 16384)


@njit(cache=True, inline="always")
def _width_bound(stats, M, itemsize):
    """A lower bound of a SPARSE payload's width from a chunk's statistics (:func:`_stats`): every bit
    with a sign bit set; else the bit length of the largest exponent field, at least the mean ``s1 /
    n_log`` (a subnormal counts at most 0 in ``s1``), above the M mantissa bits."""
    n_log, s1, n_neg = stats[1], stats[2], stats[4]
    if n_neg > 0:
        return 8 * itemsize
    if n_log == 0 or s1 < n_log:
        return 1
    return M + 64 - np.int64(leading_zeros(np.uint64(s1 // n_log)))


@njit(cache=True, inline="always")
def _nonzero_at(w, n, at):
    """The positions of the non-zero words of ``w[:n]`` into ``at``; return their count.  16-value
    blocks of +0 are passed over by one OR of the block (as :func:`_nonzero_blocks16`)."""
    k = 0
    i = 0
    while i + 16 <= n:
        acc = w[i]
        for j in range(1, 16):
            acc |= w[i + j]
        if acc != 0:
            for j in range(i, i + 16):
                if w[j] != 0:
                    at[k] = j
                    k += 1
        i += 16
    for j in range(i, n):
        if w[j] != 0:
            at[k] = j
            k += 1
    return k


@njit(cache=True)
def _sparse_nbytes(w, n, k, width):
    """Bytes of the SPARSE payload (codec.format) of ``w[:n]``, which has ``k`` non-zero words whose OR
    is ``width`` bits long: a byte a gap, one more for each gap of 128 or more, another from 16384."""
    at = np.empty(k, np.int64)
    _nonzero_at(w, n, at)
    size = _varint_nbytes(k) + 1 + _packed_nbytes(k, width) + k
    prev = -1
    for j in range(k):
        g = at[j] - prev - 1
        size += (g >= 128) + (g >= 16384)
        prev = at[j]
    return size


@njit(cache=True)
def _put_sparse(w, n, k, width, out):
    """Write the SPARSE payload of ``w[:n]`` (``k`` non-zero words, their OR ``width`` bits long) to
    ``out``; return its size."""
    p = 0
    v = k
    while v >= 128:
        out[p] = (v & 127) | 128
        v >>= 7
        p += 1
    out[p] = v
    out[p + 1] = width
    p += 2
    at = np.empty(k, np.int64)
    _nonzero_at(w, n, at)
    prev = -1
    for j in range(k):
        g = at[j] - prev - 1
        while g >= 128:
            out[p] = (g & 127) | 128
            g >>= 7
            p += 1
        out[p] = g
        p += 1
        prev = at[j]
    full = width >> 3
    rem = width & 7
    for b in range(full):
        for j in range(k):
            out[p + b * k + j] = (np.int64(w[at[j]]) >> (8 * b)) & 0xFF
    p += full * k
    if rem:
        nb = (k * rem + 7) >> 3
        out[p:p + nb] = 0
        for j in range(k):
            r = (np.int64(w[at[j]]) >> (8 * full)) & ((1 << rem) - 1)
            bit = j * rem
            out[p + (bit >> 3)] |= (r << (bit & 7)) & 0xFF
            if (bit & 7) + rem > 8:
                out[p + (bit >> 3) + 1] |= r >> (8 - (bit & 7))
        p += nb
    return p


@njit(cache=True, nogil=True)
def _sparse_chunks(buf, starts, ends, kinds, first, chunk_size, numel, itemsize, out, errors):
    """Decode the SPARSE chunks among ``kinds`` (outside the parallel kernel, whose code stays as it was:
    SPARSE chunks hold few values)."""
    for j in range(len(kinds)):
        if kinds[j] == KIND_SPARSE:
            lo = (first + j) * chunk_size
            n = min(chunk_size, numel - lo)
            errors[j] = _sparse_chunk(buf, starts[j], ends[j], n, itemsize, out[j * chunk_size:j * chunk_size + n])


@njit(cache=True, inline="always")
def _varint3(buf, p, end):
    """``(value, next offset)`` of the varint at ``buf[p:end]`` (at most SPARSE_GAP_BYTES bytes, in its
    shortest form), or ``(-1, p)`` where it is not one."""
    v = 0
    for d in range(SPARSE_GAP_BYTES):
        if p + d >= end:
            return -1, p
        c = np.int64(buf[p + d])
        v |= (c & 127) << (7 * d)
        if c < 128:
            if d > 0 and c == 0:
                return -1, p
            return v, p + d + 1
    return -1, p


@njit(cache=True, inline="always")
def _sparse_chunk(buf, a, b, n, itemsize, dst):
    """Decode the SPARSE chunk ``buf[a:b]`` (codec.format; the same checks as codec.format.parse_sparse)
    into ``dst[:n]``; return 0 or FAULT_SPARSE."""
    k, p = _varint3(buf, a, b)
    if k < 1 or k > n or p >= b:
        return FAULT_SPARSE
    width = np.int64(buf[p])
    p += 1
    if width < 1 or width > 8 * itemsize:
        return FAULT_SPARSE
    gaps_end = b - _packed_nbytes(k, width)
    if gaps_end < p + k or gaps_end > p + SPARSE_GAP_BYTES * k:
        return FAULT_SPARSE
    rem = width & 7
    if rem and (k * rem) & 7 and np.int64(buf[b - 1]) >> ((k * rem) & 7):
        return FAULT_SPARSE
    for i in range(n):
        dst[i] = 0
    full = width >> 3
    q = gaps_end
    rq = q + full * k
    pos = -1
    for j in range(k):
        g, p = _varint3(buf, p, gaps_end)
        if g < 0:
            return FAULT_SPARSE
        pos += g + 1
        if pos >= n:
            return FAULT_SPARSE
        v = 0
        for bb in range(full):
            v |= np.int64(buf[q + bb * k + j]) << (8 * bb)
        if rem:
            bit = j * rem
            r = np.int64(buf[rq + (bit >> 3)]) >> (bit & 7)
            if (bit & 7) + rem > 8:
                r |= np.int64(buf[rq + (bit >> 3) + 1]) << (8 - (bit & 7))
            v |= (r & ((1 << rem) - 1)) << (8 * full)
        dst[pos] = v
    if p != gaps_end:
        return FAULT_SPARSE
    return 0


@njit(cache=True)
def _encode_chunk(w, n, itemsize, E, M, has_inf, freqs, mean_offsets, code_lengths, zero_thresholds, explicit, best,
                  ahead):
    """Encode one chunk into ``best`` (``n * itemsize`` bytes, the chunk's slot); return (kind, size).

    The payload is the smallest of the plain coded one and the zero-block candidates (the plain one on a
    tie, then the finer mode: the reference's order).  Where there are candidates they are coded first,
    likeliest winners first (_ZB_ORDER), into scratch (the smallest so far copied to the slot), and the
    plain payload last, each told how short it must be to win: its rANS rounds stop once its words pass
    that (a 95 %-zero gradient chunk then codes a fraction of its 64K ZERO symbols), and a payload whose
    tight lower bound (from the chunk's key histogram, :func:`_words_lower_bound_bins`) already passes it is
    not coded at all.  Without candidates the plain payload is coded straight
    into the slot, stopping once it is as long as the raw chunk (which is then stored raw)."""
    first = w[0]
    if _is_const(w, n):
        v = np.int64(first)
        for b in range(itemsize):
            best[b] = (v >> (8 * b)) & 0xFF
        return KIND_CONST, itemsize
    sym = np.empty(n + LANES, np.uint8)          # (a masked round of < 16 lanes reads 16 symbols)
    wbuf = np.empty(n + 2 * MAX_LANES, np.uint16)
    nobits = np.empty(0, np.uint8)
    step = min(_SAMPLE_STEP, max(1, n // _SAMPLE_MIN))
    hist, occ, k_occ = _sample_hist(w, n, step, E, M)     # the fit's sample, shared by every candidate payload
    full = np.empty((2 << E) + 1, np.int64)               # format 7: every value's histogram, once, if wanted
    full_state = np.zeros(2, np.int64)                    # [made?, the chunk's +0]
    stats = _stats(w, n, E, M)
    n_zero = stats[0]
    full_state[1] = n_zero
    raw = n * itemsize
    # SPARSE (codec.format, version 6): a lower bound first, from the statistics (a byte a gap; the words'
    # width at least that of the largest exponent field, which is at least the mean one).  A nearly empty
    # chunk (the bound 128x below the raw size) is sized now, and its size then stops the coding below early
    # (a 99.8 %-zero chunk's rANS rounds); any other only after coding, where the bound leaves it room
    k_nz = n - n_zero
    sp_lb = 2 + k_nz + _packed_nbytes(k_nz, _width_bound(stats, M, itemsize))
    width = 0
    sp = -1
    if 128 * sp_lb < raw:
        width = _word_bits(w, n, stats[4], itemsize)
        sp = _sparse_nbytes(w, n, k_nz, width)
    sp_cap = sp if 0 <= sp < raw else raw
    cand_size = np.int64(-1)                    # the smallest candidate so far (in the slot), -1: none
    scratch = np.empty(0, np.uint8)
    # zero-block candidates only where 16-value blocks skip 1/32 of the chunk (they skip the most: a coarser
    # block is a run of them); else (zeros scattered, as a ReLU's) no candidate is coded and no scratch is
    # needed, and the blocks are not looked at (they were a fifth of a ReLU chunk's encode)
    if 32 * stats[5] >= n:
        nzb = _nonzero_blocks16(w, n)        # every mode's blocks from one pass over 16-value blocks
        n_modes = len(_ZB_MODES)
        skips = np.empty(n_modes, np.int64)
        row = (len(nzb) + 7) // 8                 # bytes of the longest bitmap (16-value blocks)
        bitmaps = np.zeros(n_modes * row, np.uint8)          # one row per mode (flat: slices stay contiguous)
        for mi in range(n_modes):
            skips[mi] = _zero_blocks(nzb, n, _ZB_MODES[mi], bitmaps[mi * row:(mi + 1) * row])
        vals = np.empty(n, w.dtype)
        scratch = np.empty(n * itemsize, np.uint8)
        best_mi = n_modes                   # the mode of the smallest candidate so far
        for oi in range(n_modes):
            mi = _ZB_ORDER[oi]
            mode = _ZB_MODES[mi]
            bs = 1 << mode
            nb = (n + bs - 1) // bs
            # a coarser mode that skips as many values skips the same ones (its blocks are unions of these):
            # the same payload, so where its bitmap is smaller this one cannot be the smallest (where both
            # bitmaps take as many bytes, the sizes tie and the finer mode is the choice)
            if mi + 1 < n_modes and skips[mi] == skips[mi + 1]:
                coarse = 1 << _ZB_MODES[mi + 1]
                if ((n + coarse - 1) // coarse + 7) // 8 < (nb + 7) // 8:
                    continue
            bitmap = bitmaps[mi * row:mi * row + (nb + 7) // 8]
            skipped = skips[mi]
            skipped_samples = np.int64(0)        # the fit's sampled positions in skipped blocks
            skipped_x = np.int64(0)              # and the explicit table's (format 7)
            for blk in range(nb):
                if (bitmap[blk >> 3] >> (blk & 7)) & 1:
                    lo = blk * bs
                    hi = min(n, lo + bs)
                    skipped_samples += (hi + step - 1) // step - (lo + step - 1) // step
                    skipped_x += (hi + EXPLICIT_STEP - 1) // EXPLICIT_STEP - (lo + EXPLICIT_STEP - 1) // EXPLICIT_STEP
            kept = n - skipped
            if 32 * skipped < n or kept == 0:
                continue
            kept = np.int64(0)
            for blk in range(nb):
                if not (bitmap[blk >> 3] >> (blk & 7)) & 1:
                    lo = blk * bs
                    hi = min(n, lo + bs)
                    vals[kept:kept + hi - lo] = w[lo:hi]
                    kept += hi - lo
            # the kept values' statistics: the chunk's, less the skipped +0 (which add to no other sum); the
            # zero-block count (last) only gates the candidates and is not read by the coding
            kstats = (n_zero - skipped, stats[1], stats[2], stats[3], stats[4], np.int64(0))
            kvals = frozen(vals)            # (typed as the tensor is: the helpers compile once per word type)
            if full_state[0] == 0:          # every value's keys, for the tight lower bounds that rule out
                full[:] = _key_hist(kvals, kept, n_zero - skipped, w, n, n_zero, E, M)   # candidates (and the
                full_state[0] = 1           # plain payload) that cannot beat the best so far
            # a candidate is kept only when smaller than the best so far, or as small and of a finer mode (the
            # reference's order: finer modes first, a later one kept only when strictly smaller); it stops once
            # it cannot be, or is not coded at all where its tight lower bound already says so
            lim = len(scratch)
            if cand_size >= 0:
                lim = cand_size if mi < best_mi else cand_size - 1
            lim = min(lim, sp_cap)
            size = _code_values(kvals, kept, kstats, hist, occ, k_occ, skipped_samples, E, M, has_inf, freqs,
                                mean_offsets, code_lengths, zero_thresholds, explicit, w, n, full, full_state, skipped_x,
                                mode, bitmap, len(bitmap), scratch, sym,
                                wbuf, ahead, lim)
            if size <= lim:
                cand_size = size
                best_mi = mi
                best[:size] = scratch[:size]
    zero = np.int64(0)                      # (typed: literal 0s would compile _code_values and what it calls again)
    if cand_size < 0:                       # as long as the raw chunk or longer: stored raw, whatever its size
        best_size = _code_values(w, n, stats, hist, occ, k_occ, zero, E, M, has_inf, freqs, mean_offsets, code_lengths,
                                 zero_thresholds, explicit, w, n, full, full_state, zero, zero, nobits, zero, best, sym, wbuf, ahead, min(raw - 1, sp_cap))
    else:                                   # the plain payload wins a tie: it must be at most cand_size
        best_size = _code_values(w, n, stats, hist, occ, k_occ, zero, E, M, has_inf, freqs, mean_offsets, code_lengths,
                                 zero_thresholds, explicit, w, n, full, full_state, zero, zero, nobits, zero, scratch, sym, wbuf, ahead, cand_size)
        if best_size <= cand_size:
            best[:best_size] = scratch[:best_size]
        else:
            best_size = cand_size
    coded = min(best_size, raw)             # (a payload that stopped at its limit is above it)
    if sp < 0 and sp_lb < coded:
        width = _word_bits(w, n, stats[4], itemsize)
        if 2 + k_nz + _packed_nbytes(k_nz, width) < coded:
            sp = _sparse_nbytes(w, n, k_nz, width)
    if sp >= 0 and sp < coded:              # the coded payload wins a tie, and so does the raw chunk
        return KIND_SPARSE, _put_sparse(w, n, k_nz, width, best)
    if best_size >= n * itemsize:
        for i in range(n):
            v = np.int64(w[i])
            for b in range(itemsize):
                best[i * itemsize + b] = (v >> (8 * b)) & 0xFF
        return KIND_RAW, n * itemsize
    return KIND_CODED, best_size


_CLAIMED, _BACK, _COPIED, _THREADS = 0, 8, 16, 24     # claim counters (``ctl``), a cache line apart;
# _THREADS: the threads the call was started with (the helpers' scratch margin)


@njit(cache=True, inline="always")
def _code_chunk_at(words, c, chunk_size, itemsize, E, M, has_inf, freqs, mean_offsets, code_lengths, zero_thresholds,
                   explicit, dst, at, ahead_lo, kinds, sizes):
    numel = len(words)
    lo = c * chunk_size
    n = min(chunk_size, numel - lo)
    kind, size = _encode_chunk(words[lo:lo + n], n, itemsize, E, M, has_inf, freqs, mean_offsets, code_lengths,
                               zero_thresholds, explicit, dst[at:at + n * itemsize],
                               words[ahead_lo:min(numel, ahead_lo + chunk_size)])
    kinds[c] = kind
    sizes[c] = size
    return size


@njit(cache=True, nogil=True, **kernel_options())
def _encode_window(t, words, chunk_size, itemsize, E, M, has_inf, freqs, mean_offsets, code_lengths, zero_thresholds,
                   explicit, c0, c1, dst, pos, scratch, prev, prev_c1, prev_first, prev_at, kinds, sizes, ctl):
    """Thread ``t``'s part of one window of chunks ``[c0, c1)`` (:func:`codec._threads.run` runs it on
    every thread; they end together): every chunk is
    claimed through the shared counter ``ctl[_CLAIMED]``.  Thread 0 codes from ``c0`` upwards straight
    into ``dst[pos:]`` (its payloads' offsets are known as it goes); the others code from ``c1``
    downwards into ``scratch`` (the b-th chunk from the back, ``c1 - 1 - b``, at byte ``b * chunk_size *
    itemsize``), whose offsets are known only when the window is done, and stop claiming once ``scratch``
    is nearly full (at most ``len(scratch) // raw`` chunks: the window may hold more chunks than the
    scratch, the rest then thread 0's).  Before that, they copy the previous window's
    scratch chunks (``prev_first + j`` from ``prev``, which ended at chunk ``prev_c1``) to
    ``dst[prev_at[j]:]``: the copy overlaps thread 0's coding instead of following it.  The number
    of chunks coded downwards is left in ``ctl[_BACK]``.  Any interleaving of the threads (or one
    thread running them all) gives the same bytes: the split only decides where a payload is coded."""
    n = c1 - c0
    raw = chunk_size * itemsize
    if t == 0:
        at = pos
        c = c0
        while fetch_add(ctl, _CLAIMED, 1) < n:
            at += _code_chunk_at(words, c, chunk_size, itemsize, E, M, has_inf, freqs, mean_offsets, code_lengths,
                                 zero_thresholds, explicit, dst, at, (c + 1) * chunk_size, kinds, sizes)
            c += 1
    j = fetch_add(ctl, _COPIED, 1)
    while j < len(prev_at):
        c = prev_first + j
        copy_bytes(dst, prev_at[j], prev, (prev_c1 - 1 - c) * raw, sizes[c])
        j = fetch_add(ctl, _COPIED, 1)
    if t != 0:
        # the _BACK read and the claim are not one atomic step: every helper may pass the check with one
        # slot left, so the caller gives scratch threads - 2 chunks beyond the check's bound
        room = len(scratch) // raw - (ctl[_THREADS] - 2)
        while fetch_add(ctl, _BACK, 0) < room and fetch_add(ctl, _CLAIMED, 1) < n:
            b = fetch_add(ctl, _BACK, 1)
            c = c1 - 1 - b
            _code_chunk_at(words, c, chunk_size, itemsize, E, M, has_inf, freqs, mean_offsets, code_lengths,
                           zero_thresholds, explicit, scratch, b * raw, max(0, c - 1) * chunk_size, kinds, sizes)


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view: numba types read-only and writeable arrays apart and would compile each
    kernel twice (bytes vs bytearray streams, tensors vs arrays), about 15 s each."""
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


_SCRATCH = threading.local()


def _scratch(nbytes: int) -> np.ndarray:
    """This thread's reusable scratch (fresh pages cost a page fault each: ~0.25 ns/value)."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or len(buf) < nbytes:
        buf = _SCRATCH.buf = np.empty(nbytes, np.uint8)
    return buf[:nbytes]


def _family64():
    global _FAMILY64
    if _FAMILY64 is None:
        fam = load_family()
        _FAMILY64 = tuple(np.ascontiguousarray(a, dtype=np.int64)
                          for a in (fam.freqs, fam.mean_offsets, fam.code_lengths, fam.zero_thresholds))
    return _FAMILY64


_FAMILY64 = None


def encode_chunks(words: np.ndarray, lay: FloatLayout, chunk_size: int) -> tuple[np.ndarray, list]:
    """Same contract and bytes as :func:`reference.encode_chunks` (payloads as views of one buffer)."""
    out = bytearray()
    reserve(out, len(words) * lay.itemsize)
    dst = np.frombuffer(out, np.uint8)
    kinds, sizes, _ = encode_into(dst, 0, words, lay, chunk_size, False)
    del dst
    ends = np.cumsum(sizes).tolist()
    shrink(out, ends[-1] if ends else 0)
    mv = memoryview(out)
    return kinds, [mv[a:b] for a, b in zip([0] + ends[:-1], ends)]


def _libc_fns():
    try:
        return _libc_fns.fns
    except AttributeError:
        pass
    try:
        import ctypes

        resize = ctypes.pythonapi.PyByteArray_Resize
        resize.argtypes = [ctypes.py_object, ctypes.c_ssize_t]
        resize.restype = ctypes.c_int
        madvise = ctypes.CDLL(None).madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        madvise.restype = ctypes.c_int
    except (ImportError, AttributeError, OSError):       # not CPython / no libc: zero-fill, no advice
        resize = madvise = None
    _libc_fns.fns = resize, madvise
    return _libc_fns.fns


_HUGE = 2 << 20
_MADV_HUGEPAGE = 14


_MADV_POPULATE_WRITE = 23
_ALIGNED_MIN = 16 << 20


def empty(n: int, dtype) -> np.ndarray:
    """An uninitialised array for a decoder to fill.  Large ones start and end on 2 MiB boundaries of
    a huge-page allocation (NumPy advises huge pages for its large arrays; an unaligned head and tail
    would fault 4 KiB at a time: MiniLM bf16, 45 MB, 360 faults -> 23).  With one numba thread they
    are also populated by one ``madvise`` call instead of a fault per huge page from inside the
    kernel (decode 21.4 -> 19.5 ms); with more, the threads' own faults zero the pages in parallel."""
    dtype = np.dtype(dtype)
    nbytes = n * dtype.itemsize
    _, madvise = _libc_fns()
    if nbytes < _ALIGNED_MIN or madvise is None or not sys.platform.startswith("linux"):
        return np.empty(n, dtype)
    span = -(-nbytes // _HUGE) * _HUGE
    raw = np.empty(span + _HUGE, np.uint8)
    addr = raw.ctypes.data
    off = -addr % _HUGE
    if get_num_threads() == 1:
        madvise(addr + off, span, _MADV_POPULATE_WRITE)    # advice only: older kernels refuse it
    return raw[off:off + nbytes].view(dtype)


def reserve(out: bytearray, n: int) -> None:
    """Lengthen ``out`` to ``n`` bytes without writing the new bytes (``PyByteArray_Resize`` leaves
    them uninitialised; untouched pages cost nothing) and ask Linux for transparent huge pages for
    the new span, as NumPy does for its large arrays: a fresh output's 4 KiB page faults cost about
    as much as coding it (42 MiB: 14.6 ms with 4 KiB pages, 4.6 ms with 2 MiB pages, here).  Reserve
    once and shrink once: resizing a huge-page buffer again and again splits its pages."""
    resize, madvise = _libc_fns()
    old = len(out)
    if resize is None or resize(out, n) != 0:
        out.extend(bytes(n - len(out)))
        return
    if madvise is not None and n - old >= 2 * _HUGE and sys.platform.startswith("linux"):
        view = np.frombuffer(out, np.uint8)
        addr = view.ctypes.data
        del view
        lo = -(-(addr + old) // _HUGE) * _HUGE
        hi = (addr + n) // _HUGE * _HUGE
        if hi > lo:
            madvise(lo, hi - lo, _MADV_HUGEPAGE)         # advice only: any failure is harmless


def shrink(out: bytearray, n: int) -> None:
    """``del out[n:]`` after :func:`encode_into`.  The kernels' views of ``out`` are released by then,
    but a view can outlive its call inside a reference cycle (seen once while numba compiled on a
    first call): collect, then retry."""
    try:
        del out[n:]
    except BufferError:
        import gc

        gc.collect()
        del out[n:]


SCRATCH_BYTES = 16 << 20    # bound on the per-thread scratch of encode_into (several numba threads)


_COUNTERS = threading.local()
_MAX_COUNTERS = 4


def _counters(n: int) -> np.ndarray:
    """``n`` zeroed int64 claim counters, each on a 64-byte cache line of its own (counter ``i`` at
    index ``8 * i``), shared by the threads of one call.  The calling thread's own array, reused from
    call to call (nothing uses a call's counters once :func:`codec._threads.run` has returned; a fresh
    array a call was ~2 us of a small tensor's ~60)."""
    ctl = getattr(_COUNTERS, "ctl", None)
    if ctl is None:
        raw = np.zeros(8 * _MAX_COUNTERS + 8, np.int64)
        ctl = _COUNTERS.ctl = raw[-raw.ctypes.data % 64 // 8:][:8 * _MAX_COUNTERS]
    ctl[:8 * n] = 0
    return ctl[:8 * n]


def _windows(n_chunks: int, raw: int, threads: int) -> tuple[int, int]:
    """The back chunks a scratch half holds and the chunks in each window of :func:`encode_into`.

    Each half of a helper's scratch holds the back chunks of a window: ``back`` (at least one), plus
    threads - 2 for the helpers' claims past their check (:func:`_encode_window`), together what
    SCRATCH_BYTES / 2 allows.  A window holds enough chunks for the helpers' expected share
    ((threads - 1) / threads) to stay 1/16 below ``back``: on 2 threads 1.9x as many chunks as a half
    holds, and so fewer windows (each costs the helpers' start and the threads' wait at its end, ~0.2
    ms).  The windows are of equal size (a short last one would cost a whole window's start and wait
    for a few chunks): as many as that size gives to the nearest, one more where the helpers' expected
    share would pass ``back`` (the chunks past it are thread 0's).  One thread: one window."""
    back = max(1, SCRATCH_BYTES // 2 // raw - (threads - 2))
    if threads == 1:
        return back, max(1, n_chunks)
    cap = back * threads // (threads - 1)           # the most chunks a window may hold
    n_win = max(1, round(n_chunks / max(1, cap * 15 // 16)))
    if -(-n_chunks // n_win) > cap:
        n_win += 1
    return back, max(1, -(-n_chunks // n_win))


def encode_into(dst: np.ndarray, pos: int, words: np.ndarray, lay: FloatLayout, chunk_size: int, checksum: bool):
    """Encode ``words`` into ``dst[pos:]`` (a writeable uint8 array), which must hold their raw size
    (the caller's buffer, or a bytearray grown by :func:`reserve`); return the chunks' kinds, payload
    sizes and CRC32C (``None`` unless ``checksum``).

    One numba thread: every payload is coded in place, in one call.  More: the chunks go in windows
    of about SCRATCH_BYTES * threads / (threads - 1) / 2 (raw); in each, thread 0 codes in place from
    the front while the others code from the back into one half of this thread's scratch (of about
    SCRATCH_BYTES / 2) and copy the previous window's back chunks out of the other half into place
    (see :func:`_encode_window`); a last call copies the last window's."""
    words = _readonly(np.ascontiguousarray(words))
    numel = len(words)
    w = lay.itemsize
    n_chunks = -(-numel // chunk_size)
    kinds = np.zeros(n_chunks, np.uint8)
    sizes = np.zeros(n_chunks, np.int64)
    if len(dst) < pos + numel * w:
        raise ValueError(f"out holds {len(dst) - pos} bytes after offset {pos}, {numel * w} needed")
    threads = min(get_num_threads(), max(1, n_chunks))
    raw = chunk_size * w
    back, win = _windows(n_chunks, raw, threads)
    halves = (_scratch(2 * (back + threads - 2) * raw).reshape(2, -1) if threads > 1 else np.empty((2, 0), np.uint8))
    ctl = _counters(4)
    consts = (words, chunk_size, w, lay.exp_bits, lay.man_bits, lay.has_inf, *_family64(),
              explicit_tables(fmt.WRITE_VERSION))      # format 7's explicit tables, where it is written
    no_prev = np.empty(0, np.int64)
    prev_c1 = prev_first = 0
    prev_at = no_prev
    at = pos                        # where the previous window's back chunks go; this one's front follows
    if threads == 1:                # every payload in place, in one call (no windows, no copies)
        run(_encode_window, 1, *consts, 0, n_chunks, dst, pos, halves[0], halves[1], 0, 0, no_prev, kinds, sizes, ctl)
        return kinds, sizes, _crcs(dst, pos, sizes) if checksum else None
    for r, c0 in enumerate(range(0, n_chunks, win)):
        c1 = min(n_chunks, c0 + win)
        front = at + int(sizes[prev_first:prev_first + len(prev_at)].sum())
        ctl[:] = 0
        ctl[_THREADS] = threads
        run(_encode_window, threads, *consts, c0, c1, dst, front, halves[r % 2], halves[(r - 1) % 2], prev_c1,
            prev_first, prev_at, kinds, sizes, ctl)
        first_back = c1 - int(ctl[_BACK])
        at = front + int(sizes[c0:first_back].sum())
        prev_c1, prev_first = c1, first_back
        prev_at = at + np.concatenate([[0], np.cumsum(sizes[first_back:c1 - 1])]).astype(np.int64) \
            if first_back < c1 else no_prev
        last = r
    if len(prev_at):            # the last window's back chunks
        ctl[:] = 0
        ctl[_THREADS] = threads
        run(_encode_window, threads, *consts, n_chunks, n_chunks, dst, at, halves[(last + 1) % 2], halves[last % 2],
            prev_c1, prev_first, prev_at, kinds, sizes, ctl)
    return kinds, sizes, _crcs(dst, pos, sizes) if checksum else None


def _crcs(dst, pos, sizes) -> list:
    """CRC32C of each payload, coded one after another from ``dst[pos]``."""
    ends = (pos + np.cumsum(sizes)).tolist()
    return [crc32c(dst[a:b]) for a, b in zip([pos] + ends[:-1], ends)]


# fields of a coded chunk's decode parameters (``prm``), filled by _open_chunk
(_P_N, _P_NCODED, _P_K, _P_WP, _P_WEND, _P_PLANE, _P_ESC, _P_NSM, _P_NESC, _P_FULL, _P_REM, _P_SHIFT, _P_REF,
 _P_MODE, _P_BS, _P_BITMAP, _P_DENSE, _P_VSAFE, _P_FAST, _P_RANKED, _P_NEG, _P_LAYOUT) = range(22)
_N_PRM = 22


@njit(cache=True, inline="always")
def _ranked_slots(f, cum, rt):
    """The ranked slot table (codec._simd.RANK_ENTRY) of a chunk's frequencies into ``rt`` (u32);
    False when the chunk has more than RANKED_SYMBOLS used symbols or more crowded buckets than
    RANK_FINE_ROWS (the rounds then read the slot table by gathers)."""
    starts = np.empty(RANKED_SYMBOLS + 2, np.int64)
    n_used = 0
    for sy in range(N_SYMBOLS):
        if f[sy] > 0:
            if n_used == RANKED_SYMBOLS:
                return False
            starts[n_used] = cum[sy]
            rt[RANK_ENTRY + n_used] = ((sy | (f[sy] << 19)) - (cum[sy] << 7)) & 0xFFFFFFFF
            n_used += 1
    starts[n_used] = 0xFFFF
    starts[n_used + 1] = 0xFFFF
    for r in range(RANKED_SYMBOLS):
        rt[RANK_NEXT + r] = (starts[r + 1] | (starts[r + 2] << 16)) if r < n_used else 0xFFFFFFFF
    tb = rt.view(np.uint8)
    rows = 0
    r = 0                                       # the rank owning slot lo
    for b in range(TOTAL // 32):
        lo = 32 * b
        while starts[r + 1] <= lo:
            r += 1
        inside = 0
        while r + 1 + inside < n_used and starts[r + 1 + inside] < lo + 32:
            inside += 1
        if inside <= 2:
            tb[4 * RANK_BUCKET + b] = r
            continue
        if rows == RANK_FINE_ROWS:
            return False
        tb[4 * RANK_BUCKET + b] = 0x80 | (rows << 5)
        q = r
        for j in range(32):
            while starts[q + 1] <= lo + j:
                q += 1
            tb[4 * RANK_FINE + 32 * rows + j] = q
        rows += 1
    return True


_MASK62 = (1 << 62) - 1
# chunks with ZERO symbols and no zero blocks take the dense assembly with residuals from any index, a
# group with a ZERO or ESC lane redone (_open_chunk's dense 3), where f[ZERO] + f[ESC] <= this (of TOTAL
# 4096: a group of 16 holds one in at most 1 of 4); else the window path (dense 2).  Measured on Zen 4,
# bf16, one thread, +0 scattered at random: 0.09 % (a sum's cancellations) 2,247 -> 2,610 MB/s, 0.3 %
# 2,131 -> 2,412, 1 % 1,859 -> 1,976, 3 % even, 10 % 1,528 -> 1,398, 50 % 1,883 -> 1,607
_SHIFTED_MAX = 64
_WP_MASK = (1 << WINDOW_WP_BITS) - 1
# a decoder's row of tables (u32): the slot table (+ LANES: see _open_chunk), then the ranked table;
# rows a multiple of 64 bytes, so both rows' ranked tables start on 64-byte boundaries (see _aligned)
_TAB_ROW = -(-(RANKED_AT + RANKED_LEN) // 16) * 16


@njit(cache=True)
def _read_table(buf, p, b, ref, E, M, layouts, f, lay):
    """Read the explicit table at ``buf[p:b]`` into ``f`` (and, with ``layouts``, format 8's symbol layout
    into ``lay[0]``); the offset after it, or -1 where it is malformed (the checks of
    codec.format.parse_explicit_table, which then says what is wrong)."""
    lay[0] = 0
    if layouts:
        if b - p < 1:
            return -1
        lay[0] = np.int64(buf[p])
        p += 1
        if lay[0] & ~(3 | LAYOUT_SIGN) or (lay[0] & 3) > min(LAYOUT_MAX_EXTRA, M - 1):
            return -1
    bits = 1 + (lay[0] & 3) + ((lay[0] >> 2) & 1)
    if b - p < 2:
        return -1
    lo = np.int64(buf[p])
    cnt = np.int64(buf[p + 1])
    p += 2
    if lo + cnt > 2 * WINDOW:
        return -1
    for s in range(N_SYMBOLS):
        f[s] = 0
    total = 0
    for t in range(cnt + 2):
        if p >= b:
            return -1
        v = np.int64(buf[p])
        p += 1
        if v >= 0x80:
            if p >= b:
                return -1
            v2 = np.int64(buf[p])
            p += 1
            if v2 >= 0x80 or v2 == 0:
                return -1
            v = (v & 0x7F) | (v2 << 7)
        s = SYM_ZERO if t == 0 else (SYM_ESC if t == 1 else SYM_WINDOW0 + lo + t - 2)
        f[s] = v
        total += v
    if total != TOTAL:
        return -1
    for j in range(2 * WINDOW):
        field = ref - WINDOW_LOW + (j >> bits)
        if f[SYM_WINDOW0 + j] > 0 and (field < 0 or field > (1 << E) - 1):
            return -1
    return p


@njit(cache=True)
def _open_chunk(buf, a, b, n, E, M, has_inf, freqs, prm, tab, x, limits):
    """Validate coded payload ``buf[a:b]`` of ``n`` values (``limits``: the stream version's highest sign
    mode, its family's codebook count, the bitmask of its zero-block modes, explicit tables: :func:`_limits`); fill
    ``prm``, the slot table ``tab``
    (TOTAL + LANES entries, then the ranked table where the rounds use it) and the states ``x``.  Return an error code (0 = ok).  Every offset later used is checked here."""
    if b - a < _HEAD:
        return FAULT_SHORT
    cb = _get16(buf, a + _CH_CODEBOOK)
    ref = _get16(buf, a + _CH_REF)
    if ref >= 32768:
        ref -= 65536
    shift = np.int64(buf[a + _CH_SHIFT])
    mode = np.int64(buf[a + _CH_MODE])
    sign = np.int64(buf[a + _CH_SIGN])
    narrow = np.int64(buf[a + _CH_NARROW])
    n_sm = _get32(buf, a + _CH_NSM)
    n_esc = _get32(buf, a + _CH_NESC)
    n_words = _get32(buf, a + _CH_NWORDS)
    if ((mode != 0 and (mode > 62 or not (limits[2] >> mode) & 1)) or sign > limits[0]
            or (narrow != 0 and sign == SIGN_STORED)):
        return FAULT_MODE
    if shift + narrow > M - 1:
        return FAULT_SHIFT
    explicit = cb == CB_EXPLICIT and limits[3] != 0
    if cb >= limits[1] and not explicit:
        return FAULT_CODEBOOK
    p = a + _HEAD
    f = np.empty(N_SYMBOLS, np.int64)
    cum = np.empty(N_SYMBOLS + 1, np.int64)
    lay = np.zeros(1, np.int64)
    if explicit:                        # format 7: the chunk's own table (codec.format.parse_explicit_table)
        p = _read_table(buf, p, b, ref, E, M, limits[4], f, lay)
        if p < 0:
            return FAULT_TABLE
        if (lay[0] & LAYOUT_SIGN) and sign != SIGN_POSITIVE:     # format 8: the sign in the symbols
            return FAULT_TABLE
        if shift + narrow > M - 1 - (lay[0] & 3):
            return FAULT_SHIFT
        cum[0] = 0
        for s in range(N_SYMBOLS):
            cum[s + 1] = cum[s] + f[s]
    else:
        _tables(freqs, cb, ref, E, has_inf, f, cum)
    n_coded = n
    nbm = 0
    bs = 1
    if mode != 0:
        bs = 1 << mode
        nb = (n + bs - 1) // bs
        nbm = (nb + 7) // 8
        if b - p < nbm:
            return FAULT_BITMAP
        n_coded = 0
        for blk in range(nb):
            if not (buf[p + (blk >> 3)] >> (blk & 7)) & 1:
                n_coded += min(n, (blk + 1) * bs) - blk * bs
        if n_coded == 0:
            return FAULT_EMPTY
    bitmap_at = p
    p += nbm
    if n_sm > n_coded or n_esc > n_sm or n_words > n_coded:
        return FAULT_COUNTS
    k = _lanes(n_coded)
    width = _plane_width(M - (lay[0] & 3), shift, sign, narrow)
    plane = _packed_nbytes(n_sm, width)
    if p + 4 * k + 2 * n_words + plane + 2 * n_esc != b:
        return FAULT_SIZE
    # one lookup per symbol: slot -> sym | (slot - cum[sym]) << 7 | freq[sym] << 19  (7 + 12 + 13 bits)
    # = (slot << 7) + a constant per symbol, written 16 slots at a time in increasing order: a run's
    # last vector spills into the next run, which overwrites it (``tab`` has LANES spare slots)
    for sy in range(N_SYMBOLS):
        lo = cum[sy]
        c = (sy | (f[sy] << 19)) - (lo << 7)
        for t in range(lo, cum[sy + 1], LANES):
            fill16(tab, t, c)
    # by permutes for 1- and 2-byte values; 4-byte values keep the gathers, measured faster there
    # (Zen 5, one thread: float32 decode 4.0 GB/s by permutes, 4.3 by gathers; bf16 2.4 -> 3.3-3.5);
    # only chunks the SIMD rounds decode (k a multiple of LANES) read it
    ranked = PERMUTE and M < 16 and k % LANES == 0 and _ranked_slots(f, cum, tab[RANKED_AT:])
    for lane in range(k):
        x[lane] = _get32(buf, p + 4 * lane)
    wend = p + 4 * k + 2 * n_words
    full = width // 8
    rem = width % 8
    # (format 8's layouts assemble their values one at a time, in _finish_chunk's general pass)
    # 1: dense (value i = residual i); 2: ZERO symbols but no zero blocks (the rounds assemble values
    # with residuals read from any index); 3: as 2, where ZERO and ESC symbols are rare enough for the
    # dense assembly with a group redone where it has one to be faster; 0: the rest, values in
    # _finish_chunk's general pass
    dense = 0
    if mode == 0 and lay[0] == 0:
        dense = 1 if n_sm == n_coded else (3 if f[SYM_ZERO] + f[SYM_ESC] <= _SHIFTED_MAX else 2)
    # dense: values below v_safe may be assembled 16 at a time (the residual reader loads 16 bytes from
    # the first remainder byte of the 16 values, which must stay inside ``buf``); ZERO symbols: groups
    # whose residuals start at or below v_safe
    v_safe = 0
    if dense == 1:
        v_safe = ((len(buf) - 16 - wend - full * n_sm) // max(rem, 1)) * 8 + LANES if rem else n_coded
    elif dense >= 2:
        v_safe = min(_kk_safe(len(buf), wend, n_sm, full, rem), n_sm - LANES)
        if rem:          # the specialised readers load 16 bytes from the first field's byte
            v_safe = min(v_safe, (len(buf) - 16 - wend - full * n_sm) * 8 // rem)
    prm[_P_N] = n
    prm[_P_NCODED] = n_coded
    prm[_P_K] = k
    prm[_P_WP] = p + 4 * k
    prm[_P_WEND] = wend
    prm[_P_PLANE] = wend
    prm[_P_ESC] = wend + plane
    prm[_P_NSM] = n_sm
    prm[_P_NESC] = n_esc
    prm[_P_FULL] = full
    prm[_P_REM] = rem
    prm[_P_SHIFT] = shift
    prm[_P_REF] = ref
    prm[_P_MODE] = mode
    prm[_P_BS] = bs
    prm[_P_BITMAP] = bitmap_at
    prm[_P_DENSE] = dense
    prm[_P_VSAFE] = v_safe
    # full rounds the SIMD path may take (16 lanes a step; 8-lane chunks: a masked step; k is a power of two)
    prm[_P_FAST] = n_coded // k if k >= _MASKED_MIN_LANES else 0
    prm[_P_RANKED] = ranked
    prm[_P_NEG] = sign == SIGN_NEGATIVE      # the sign the decoder puts back (codec._simd: em's flag)
    prm[_P_LAYOUT] = lay[0]
    return 0


@njit(cache=True, inline="always")
def _decode16_values(x, h, tab, buf, wp, sym, at, plane, n_sm, full, rem, shift, ref, em, E, M, out, ranked):
    """rans_decode16_values, specialised (literal layout arguments) for each dtype's unshifted plane,
    with the sign stored or (bf16, fp16, fp32) positive; ``em``: E << 8 | M, | 1 << 16 for negative chunks.
    The calls are spelled out: each must pass its plane layout as literals for numba to specialise on."""
    if shift == 0 and em == (E << 8) | M and full * 8 + rem == M - 1:
        if E == 8 and M == 7:
            return rans_decode16_values(x, h, tab, buf, wp, sym, at, plane, n_sm, 0, 6, 0, ref, 0x807, out, ranked)
        if E == 5 and M == 10:
            return rans_decode16_values(x, h, tab, buf, wp, sym, at, plane, n_sm, 1, 1, 0, ref, 0x50A, out, ranked)
        if E == 8 and M == 23:
            return rans_decode16_values(x, h, tab, buf, wp, sym, at, plane, n_sm, 2, 6, 0, ref, 0x817, out, ranked)
    if shift == 0 and em == (E << 8) | M and full * 8 + rem == M:
        if E == 8 and M == 7:
            return rans_decode16_values(x, h, tab, buf, wp, sym, at, plane, n_sm, 0, 7, 0, ref, 0x807, out, ranked)
        if E == 5 and M == 10:
            return rans_decode16_values(x, h, tab, buf, wp, sym, at, plane, n_sm, 1, 2, 0, ref, 0x50A, out, ranked)
        if E == 8 and M == 23:
            return rans_decode16_values(x, h, tab, buf, wp, sym, at, plane, n_sm, 2, 7, 0, ref, 0x817, out, ranked)
        if E == 4 and M == 3:
            return rans_decode16_values(x, h, tab, buf, wp, sym, at, plane, n_sm, 0, 3, 0, ref, 0x403, out, ranked)
        if E == 5 and M == 2:
            return rans_decode16_values(x, h, tab, buf, wp, sym, at, plane, n_sm, 0, 2, 0, ref, 0x502, out, ranked)
    return rans_decode16_values(x, h, tab, buf, wp, sym, at, plane, n_sm, full, rem, shift, ref, em, out, ranked)


@njit(cache=True, inline="always")
def _decode16_window(x, h, tab, buf, wp, sym, at, kk, plane, n_sm, full, rem, shift, ref, em, E, M, out, esc, ke,
                     n_esc, ranked):
    """rans_decode16_window, specialised (literal plane layouts) for bf16's unshifted planes, with the
    sign stored or positive; other dtypes' chunks with ZERO symbols take the generic residual reader.
    Each specialised call site costs compile time in every dtype's kernel (about 0.6 s a site, cold),
    and bf16 is where such chunks are common (sums, ReLU outputs and gradients in training)."""
    if E == 8 and M == 7 and shift == 0 and em == 0x807:
        if full == 0 and rem == 6:
            return rans_decode16_window(x, h, tab, buf, wp, sym, at, kk, plane, n_sm, 0, 6, 0, ref, 0x807, out, esc,
                                        ke, n_esc, ranked)
        if full == 0 and rem == 7:
            return rans_decode16_window(x, h, tab, buf, wp, sym, at, kk, plane, n_sm, 0, 7, 0, ref, 0x807, out, esc,
                                        ke, n_esc, ranked)
    return rans_decode16_window(x, h, tab, buf, wp, sym, at, kk, plane, n_sm, full, rem, shift, ref, em, out, esc, ke,
                                n_esc, ranked)


@njit(cache=True, inline="always")
def _decode16_shifted(x, h, tab, buf, wp, sym, at, kk, plane, n_sm, full, rem, shift, ref, em, E, M, out, ranked):
    """rans_decode16_shifted, specialised as :func:`_decode16_window` is (bf16's unshifted planes)."""
    if E == 8 and M == 7 and shift == 0 and em == 0x807:
        if full == 0 and rem == 6:
            return rans_decode16_shifted(x, h, tab, buf, wp, sym, at, kk, plane, n_sm, 0, 6, 0, ref, 0x807, out,
                                         ranked)
        if full == 0 and rem == 7:
            return rans_decode16_shifted(x, h, tab, buf, wp, sym, at, kk, plane, n_sm, 0, 7, 0, ref, 0x807, out,
                                         ranked)
    return rans_decode16_shifted(x, h, tab, buf, wp, sym, at, kk, plane, n_sm, full, rem, shift, ref, em, out, ranked)


@njit(cache=True, inline="always")
def _fast_round(buf, tab, x, sym, r, wp, done, ke, kk, k, dense, v_safe, plane, n_sm, full, rem, shift, ref, em, prm,
                E, M, out, ranked):
    """Round ``r`` of a chunk opened by _open_chunk, 16 lanes at a time (the caller checked that the
    round's 2k stream bytes are inside ``buf`` and that it starts inside the words).  Dense chunks
    (``dense`` 1) also assemble the round's values while they stay below v_safe; chunks with ZERO
    symbols (``dense`` 2) while the residuals they read start at or below v_safe (``kk``: the residuals
    the values before ``done`` took).  Scalars come unpacked from ``prm`` so they stay in registers.
    Returns (wp, done, ke, kk); ke < 0 is minus an error code.  A chunk of 8 lanes decodes its round's
    symbols as one masked 16-lane step (see :func:`_rans_rounds`); its values are assembled after the rounds,
    16 at a time (:func:`_finish_chunk`)."""
    base = r * k
    if k < LANES:
        return rans_decode16(x, 0, tab, buf, wp, sym, base, ranked, k), done, ke, kk
    for h in range(0, k, LANES):
        at = base + h
        if dense == 1 and done == at and at + LANES <= v_safe:
            ret = _decode16_values(x, h, tab, buf, wp, sym, at, plane, n_sm, full, rem, shift, ref, em, E, M, out,
                                   ranked)
            wp = ret & _MASK62
            if ret >> 62:            # ESC or ZERO lanes: escapes by SIMD, the rest one value at a time
                ke_esc = values16_escaped(buf, sym, at, plane, n_sm, full, rem, shift, ref, em, out, prm[_P_ESC], ke,
                                          prm[_P_NESC])
                if ke_esc >= 0:
                    ke = ke_esc
                else:
                    ke = _values_dense(buf, sym, at, at + LANES, prm, ke, E, M, out)
                    if ke < 0:
                        return wp, done, ke, kk
            done = at + LANES
        elif dense == 2 and done == at and kk <= v_safe:
            ret = _decode16_window(x, h, tab, buf, wp, sym, at, kk, plane, n_sm, full, rem, shift, ref, em, E, M, out,
                                   prm[_P_ESC], ke, prm[_P_NESC], ranked)
            wp = ret & _WP_MASK
            if not ret >> 62:        # else this group and the rest go symbol by symbol (_finish_chunk)
                kk += (ret >> WINDOW_WP_BITS) & 63
                ke += (ret >> (WINDOW_WP_BITS + 6)) & 63
                done = at + LANES
        elif dense == 3 and done == at and kk <= v_safe:
            ret = _decode16_shifted(x, h, tab, buf, wp, sym, at, kk, plane, n_sm, full, rem, shift, ref, em, E, M,
                                    out, ranked)
            wp = ret & _MASK62
            if not ret >> 62:
                kk += LANES
                done = at + LANES
            else:                    # ZERO or ESC lanes: redone as the window path does them
                took = values16_window_escaped(buf, sym, at, kk, plane, n_sm, full, rem, shift, ref, em, out,
                                               prm[_P_ESC], ke, prm[_P_NESC])
                if took >= 0:        # else this group and the rest go symbol by symbol (_finish_chunk)
                    kk += took & 63
                    ke += took >> 8
                    done = at + LANES
        else:
            wp = rans_decode16(x, h, tab, buf, wp, sym, at, ranked, LANES)
    return wp, done, ke, kk


@njit(cache=True, inline="always")
def _kk_safe(buflen, plane, n_sm, full, rem):
    """The highest residual index from which _residual16 may read 16 residuals of a plane at ``plane``
    (``full`` byte planes of ``n_sm`` bytes, then ``rem``-bit fields) inside a buffer of ``buflen`` bytes."""
    kk_safe = (buflen - 8 - plane - full * n_sm) * 8 // max(rem, 1) - 8 - 16 if rem else n_sm
    if full:
        kk_safe = min(kk_safe, buflen - 16 - plane - (full - 1) * n_sm)
    return kk_safe


@njit(cache=True)
def _finish_chunk(buf, prm, tab, x, sym, r0, wp, done, ke, kk, E, M, out):
    """Rounds ``r0..`` one lane at a time, the stream checks, then the values not yet assembled.
    Returns an error code (0 = ok)."""
    k = prm[_P_K]
    n_coded = prm[_P_NCODED]
    wend = prm[_P_WEND]
    if wp > wend:                        # the SIMD rounds ran past the words (first: it explains the rest)
        return FAULT_RANS_END
    if ke < 0:
        return -ke
    # the refill reads a word unconditionally (clamped inside the payload) and keeps it only when
    # needed; overrunning the words is detected after each round
    wend_safe = max(wend, prm[_P_WP] + 2) - 2 if wend > prm[_P_WP] else prm[_P_WP] - 4 * k
    rounds = (n_coded + k - 1) // k
    last = n_coded - (rounds - 1) * k
    for r in range(r0, rounds):
        active = k if r < rounds - 1 else last
        base = r * k
        for lane in range(active):
            xl = np.int64(x[lane])
            ent = np.int64(tab[xl & _MASK])
            xl = (ent >> 19) * (xl >> PROB_BITS) + ((ent >> 7) & 0xFFF)
            need = xl < RANS_L                                 # branch-free refill
            rp = min(wp, wend_safe)
            word = np.int64(buf[rp]) | (np.int64(buf[rp + 1]) << 8)
            xl = (xl << 16) | word if need else xl
            wp += 2 * need
            x[lane] = xl
            sym[base + lane] = ent & 0x7F
        if wp > wend:
            return FAULT_RANS_END
    if wp != wend:
        return FAULT_RANS_STATE
    for lane in range(k):
        if x[lane] != RANS_L:
            return FAULT_RANS_STATE
    if prm[_P_DENSE] == 1:
        # the values the SIMD rounds did not assemble (all of a chunk of fewer than 16 lanes), 16 at a
        # time as the rounds do, escapes included; a group with a fault is redone one value at a time
        em = (E << 8) | M | (prm[_P_NEG] << 16)
        i = done
        while i + LANES <= min(n_coded, prm[_P_VSAFE]):
            ke_esc = values16_escaped(buf, sym, i, prm[_P_PLANE], prm[_P_NSM], prm[_P_FULL], prm[_P_REM],
                                      prm[_P_SHIFT], prm[_P_REF], em, out, prm[_P_ESC], ke, prm[_P_NESC])
            if ke_esc < 0:
                ke = _values_dense(buf, sym, i, i + LANES, prm, ke, E, M, out)
                if ke < 0:
                    return -ke
            else:
                ke = ke_esc
            i += LANES
        ke = _values_dense(buf, sym, i, n_coded, prm, ke, E, M, out)
        if ke < 0:
            return -ke
        return 0 if ke == prm[_P_NESC] else FAULT_SYMBOLS
    # pass 2, general chunk: zero blocks and ZERO symbols
    n = prm[_P_N]
    mode = prm[_P_MODE]
    bs = prm[_P_BS]
    bitmap_at = prm[_P_BITMAP]
    n_sm = prm[_P_NSM]
    n_esc = prm[_P_NESC]
    top = (1 << E) - 1
    plane = prm[_P_PLANE]
    full = prm[_P_FULL]
    rem = prm[_P_REM]
    shift = prm[_P_SHIFT]
    ref = prm[_P_REF]
    em = (E << 8) | M | (prm[_P_NEG] << 16)
    layout = prm[_P_LAYOUT]
    mk = M - (layout & 3)                              # the plane's mantissa: below the symbol's bits
    sb = (layout >> 2) & 1                             # the sign is the key's low bit
    bits = 1 + (layout & 3) + sb
    kbase = (ref - WINDOW_LOW) << bits                 # window symbol j: key kbase + j
    negbit = prm[_P_NEG] << (mk - 1 - shift)           # a negative chunk's sign, where the residual has it
    # groups of 16 symbols (window or ZERO) whose residuals kk..kk+15 can be read 16 at a time inside buf
    kk_safe = _kk_safe(len(buf), plane, n_sm, full, rem)
    # a chunk with ZERO symbols and no zero blocks: the rounds assembled the values before ``done``,
    # which took ``kk`` residuals and ``ke`` escapes (elsewhere done, kk and ke are 0)
    blk = 0
    oi = done
    i = done
    scalar_to = 0                     # values before this index go one at a time (a group had an ESC)
    while i < n_coded:
        if mode != 0 and (oi == 0 or oi % bs == 0):
            # entering a new block: skip (and zero) the all-zero blocks
            blk = oi // bs
            while (buf[bitmap_at + (blk >> 3)] >> (blk & 7)) & 1:
                for t in range(blk * bs, min(n, (blk + 1) * bs)):
                    out[t] = 0
                blk += 1
            oi = blk * bs
        if (layout == 0 and i >= scalar_to and i + LANES <= n_coded and kk + LANES <= n_sm and kk <= kk_safe
                and (mode == 0 or oi % bs + LANES <= bs) and oi + LANES <= n):
            took = values16_window(buf, sym, i, kk, plane, n_sm, full, rem, shift, ref, em, out, oi)
            if took >= 0:
                i += LANES
                kk += took
                oi += LANES
                continue
            scalar_to = i + LANES
        sy = np.int64(sym[i])
        i += 1
        if sy == SYM_ZERO:
            out[oi] = 0
            oi += 1
            continue
        if kk >= n_sm:
            return FAULT_SYMBOLS
        if sy == SYM_ESC:
            if ke >= n_esc:
                return FAULT_SYMBOLS
            key = _get16(buf, prm[_P_ESC] + 2 * ke)
            ke += 1
        else:
            key = sy - SYM_WINDOW0 + kbase
        e = key >> bits
        if e < 0 or e > top:
            return FAULT_EXPONENT
        sub = key & ((1 << bits) - 1)
        out[oi] = (_value(_residual(buf, plane, n_sm, full, rem, kk) | negbit, e, sub >> sb, E, M, mk, shift)
                   | ((sub & sb) << (E + M)))
        kk += 1
        oi += 1
    if kk != n_sm or ke != n_esc:
        return FAULT_SYMBOLS
    if mode != 0:
        blk = (oi + bs - 1) // bs
        while blk * bs < n:
            for t in range(blk * bs, min(n, (blk + 1) * bs)):
                out[t] = 0
            blk += 1
    return 0


@njit(cache=True, inline="always")
def _residual(buf, plane_at, n_sm, full, rem, i):
    """Residual ``i`` of a plane: ``full`` byte planes of ``n_sm`` bytes, then ``rem``-bit fields
    packed little-endian (field i at bit ``i * rem``)."""
    res = 0
    for b in range(full):
        res |= np.int64(buf[plane_at + b * n_sm + i]) << (8 * b)
    if rem:
        bit = i * rem
        q = plane_at + full * n_sm + (bit >> 3)
        v = np.int64(buf[q]) >> (bit & 7)
        if (bit & 7) + rem > 8:
            v |= np.int64(buf[q + 1]) << (8 - (bit & 7))
        res |= (v & ((1 << rem) - 1)) << (8 * full)
    return res


@njit(cache=True, inline="always")
def _value(res, e, top, E, M, mk, shift):
    """A value from its residual ``res`` (sign, then the ``mk - 1 - shift`` mantissa bits below the symbol's),
    exponent field ``e`` and the symbol's ``M - mk + 1`` high mantissa bits ``top``."""
    ssr = mk - 1 - shift
    return ((res >> ssr) << (E + M)) | (e << M) | (top << ssr << shift) | ((res & ((1 << ssr) - 1)) << shift)


@njit(cache=True)
def _values_dense(buf, sym, lo, hi, prm, ke, E, M, out):
    """Values ``[lo, hi)`` of a dense chunk (value i = residual i), one at a time; ``ke`` escapes
    are consumed before ``lo``.  Returns the escapes consumed by ``hi``, or minus an error code."""
    top = (1 << E) - 1
    shift = prm[_P_SHIFT]
    negbit = prm[_P_NEG] << (M - 1 - shift)
    for i in range(lo, hi):
        sy = np.int64(sym[i])
        if sy == SYM_ESC:
            if ke >= prm[_P_NESC]:
                return -FAULT_SYMBOLS
            ev = _get16(buf, prm[_P_ESC] + 2 * ke)
            ke += 1
            e = ev >> 1
            lead = ev & 1
        elif sy == SYM_ZERO:
            return -FAULT_EXPONENT
        else:
            e = ((sy - SYM_WINDOW0) >> 1) + prm[_P_REF] - WINDOW_LOW
            lead = (sy - SYM_WINDOW0) & 1
        if e < 0 or e > top:
            return -FAULT_EXPONENT
        out[i] = _value(_residual(buf, prm[_P_PLANE], prm[_P_NSM], prm[_P_FULL], prm[_P_REM], i) | negbit, e, lead,
                        E, M, M, shift)
    return ke


@njit(cache=True, inline="always")
def _copy_chunk(buf, a, kind, n, itemsize, dst):
    """RAW and CONST chunks."""
    if kind == KIND_RAW:
        for i in range(n):
            v = 0
            for bb in range(itemsize):
                v |= np.int64(buf[a + i * itemsize + bb]) << (8 * bb)
            dst[i] = v
    else:
        v = 0
        for bb in range(itemsize):
            v |= np.int64(buf[a + bb]) << (8 * bb)
        for i in range(n):
            dst[i] = v


@njit(cache=True, inline="always")
def _decode_pair(pair, buf, starts, ends, kinds, first, chunk_size, numel, itemsize, E, M, has_inf, freqs, out,
                 errors, limits, paired):
    """Chunks ``2*pair`` and ``2*pair + 1``: where ``paired`` (:func:`pair_rounds`) the SIMD rounds of both
    alternate in one loop, so one chunk's table gathers and multiplies fill the other's latency (1.7x
    faster than one chunk at a time), else one chunk's rounds, then the other's.  Inlined into a kernel
    per dtype, where ``itemsize``/``E``/``M``/``paired`` are constants and only that dtype's value assembly
    is compiled (fewer registers spilled in the round loop)."""
    n_chunks = len(kinds)
    prm = np.zeros((2, _N_PRM), np.int64)
    tab = _aligned(2 * _TAB_ROW, np.uint32).reshape(2, _TAB_ROW)
    x = _private(2 * MAX_LANES, 0, np.uint32)
    sym = np.empty((2, min(chunk_size, numel)), np.uint8)     # (a small tensor: not a whole chunk's)
    coded = np.zeros(2, np.bool_)
    for t in range(2):
        j = 2 * pair + t
        if j >= n_chunks:
            continue
        lo = (first + j) * chunk_size
        n = min(chunk_size, numel - lo)
        dst = out[j * chunk_size:j * chunk_size + n]
        if kinds[j] != KIND_CODED:
            if kinds[j] != KIND_SPARSE:         # (SPARSE chunks: _sparse_chunks, after this kernel)
                _copy_chunk(buf, starts[j], kinds[j], n, itemsize, dst)
            continue
        err = _open_chunk(buf, starts[j], ends[j], n, E, M, has_inf, freqs, prm[t], tab[t],
                          x[t * MAX_LANES:(t + 1) * MAX_LANES], limits)
        errors[j] = err
        coded[t] = err == 0
    j0 = 2 * pair
    o0 = out[j0 * chunk_size:(j0 + 1) * chunk_size]
    o1 = out[(j0 + 1) * chunk_size:(j0 + 2) * chunk_size] if j0 + 1 < n_chunks else o0
    p0 = prm[0]
    p1 = prm[1]
    x0 = x[:MAX_LANES]
    x1 = x[MAX_LANES:]
    t0 = tab[0]
    t1 = tab[1]
    s0 = sym[0]
    s1 = sym[1]
    em0 = (E << 8) | M | (p0[_P_NEG] << 16)     # with the negative chunk's flag (codec._simd)
    em1 = (E << 8) | M | (p1[_P_NEG] << 16)
    # chunk 0 / chunk 1 parameters, unpacked into locals
    wp0, wend0, fast0, k0_, dense0, vs0, pl0, nsm0, full0, rem0, sh0, ref0 = (
        p0[_P_WP], p0[_P_WEND], p0[_P_FAST], p0[_P_K], p0[_P_DENSE], p0[_P_VSAFE], p0[_P_PLANE], p0[_P_NSM],
        p0[_P_FULL], p0[_P_REM], p0[_P_SHIFT], p0[_P_REF])
    wp1, wend1, fast1, k1_, dense1, vs1, pl1, nsm1, full1, rem1, sh1, ref1 = (
        p1[_P_WP], p1[_P_WEND], p1[_P_FAST], p1[_P_K], p1[_P_DENSE], p1[_P_VSAFE], p1[_P_PLANE], p1[_P_NSM],
        p1[_P_FULL], p1[_P_REM], p1[_P_SHIFT], p1[_P_REF])
    rk0 = p0[_P_RANKED]
    rk1 = p1[_P_RANKED]
    # (typed zeros: a literal 0 reaching _finish_chunk or _values_dense while the loops' types are inferred
    # compiles them once more, for Literal[int](0))
    r0 = r1 = d0 = d1 = e0 = e1 = kk0 = kk1 = np.int64(0)
    # a SIMD round reads at most 2k stream bytes from wp (a masked round of 8 lanes: 32 with "shuffle" stream
    # moves): it may start while wp is inside the words and those bytes inside buf (a valid stream then never
    # passes the words' end; a corrupted one that does is caught after the loop), so only a chunk at the very
    # end of buf finishes by scalar rounds
    wl0 = min(wend0, len(buf) - 2 * max(k0_, LANES))
    wl1 = min(wend1, len(buf) - 2 * max(k1_, LANES))
    go0 = coded[0] and r0 < fast0 and wp0 <= wl0
    go1 = coded[1] and r1 < fast1 and wp1 <= wl1
    while paired and go0 and go1:
        wp0, d0, e0, kk0 = _fast_round(buf, t0, x0, s0, r0, wp0, d0, e0, kk0, k0_, dense0, vs0, pl0, nsm0,
                                           full0, rem0, sh0, ref0, em0, p0, E, M, o0, rk0)
        wp1, d1, e1, kk1 = _fast_round(buf, t1, x1, s1, r1, wp1, d1, e1, kk1, k1_, dense1, vs1, pl1, nsm1,
                                           full1, rem1, sh1, ref1, em1, p1, E, M, o1, rk1)
        r0 += 1
        r1 += 1
        go0 = r0 < fast0 and wp0 <= wl0 and e0 >= 0
        go1 = r1 < fast1 and wp1 <= wl1 and e1 >= 0
    while go0:
        wp0, d0, e0, kk0 = _fast_round(buf, t0, x0, s0, r0, wp0, d0, e0, kk0, k0_, dense0, vs0, pl0, nsm0,
                                           full0, rem0, sh0, ref0, em0, p0, E, M, o0, rk0)
        r0 += 1
        go0 = r0 < fast0 and wp0 <= wl0 and e0 >= 0
    while go1:
        wp1, d1, e1, kk1 = _fast_round(buf, t1, x1, s1, r1, wp1, d1, e1, kk1, k1_, dense1, vs1, pl1, nsm1,
                                           full1, rem1, sh1, ref1, em1, p1, E, M, o1, rk1)
        r1 += 1
        go1 = r1 < fast1 and wp1 <= wl1 and e1 >= 0
    if coded[0]:
        errors[j0] = _finish_chunk(buf, p0, t0, x0, s0, r0, wp0, d0, e0, kk0, E, M, o0)
    if coded[1]:
        errors[j0 + 1] = _finish_chunk(buf, p1, t1, x1, s1, r1, wp1, d1, e1, kk1, E, M, o1)


_DECODERS = {}
_NAMESPACES: dict = {}


def _layout_namespace(lay: FloatLayout) -> dict:
    """This module's globals with each of its numba functions replaced by a copy of its own for ``lay``
    (same code, qualname ``<name>.<dtype>``), which the layout's decode kernel and its helpers call.

    The helpers a decoder calls are compiled for that dtype's literal widths, and numba keeps a function's
    compiled signatures in one index file beside numbered data files, written apart: two processes saving
    different signatures of one function at once can leave an index entry naming the other's code
    (numba/numba#10128's kind of race).  With a copy per layout, the decoders of two dtypes share no cache
    file with each other or with the encoders, so they can be compiled side by side (tests/helpers.warm:
    the test suite's cold start splits them over two processes).  Copies are made on a layout's first
    decode and compile as before; the machine code is the same."""
    ns = _NAMESPACES.get(lay.code)
    if ns is None:
        ns = dict(globals())
        # (not codec.format's _plane_width: inlined, and its globals are its module's)
        for name, f in own_functions(globals()).items():
            opts = {k: v for k, v in f.targetoptions.items() if k != "nopython"}
            ns[name] = njit(cache=True, locals=f.locals, **opts)(_rebound(f.py_func, ns, lay.name))
        ns = _NAMESPACES.setdefault(lay.code, ns)       # (two threads' first decodes: one namespace wins)
    return ns


def own_functions(space: dict) -> dict:
    """The numba functions in ``space`` (this module's globals or a :func:`_layout_namespace`) whose globals
    it is: those a layout's namespace has copies of."""
    from numba.core.registry import CPUDispatcher

    return {name: f for name, f in space.items() if isinstance(f, CPUDispatcher) and f.py_func.__globals__ is space}


def _rebound(py, ns: dict, tag: str):
    """Python function ``py`` with globals ``ns`` and qualname ``<qualname>.<tag>`` (numba names its cache
    files by qualname)."""
    g = FunctionType(py.__code__, ns, py.__name__, py.__defaults__, py.__closure__)
    g.__qualname__ = f"{py.__qualname__}.{tag}"
    g.__doc__ = py.__doc__
    return g


def pair_rounds(lay: FloatLayout) -> bool:
    """Whether ``lay``'s decoder alternates the SIMD rounds of two chunks (:func:`_decode_pair`), or decodes
    one chunk at a time: the same bytes either way.  Alternating pays where the registers hold two chunks'
    state (AVX-512: 32 registers of 16 lanes); on AVX2-only targets (16 registers of 8 lanes, so two per
    16-lane vector) 2-byte dtypes decode faster one chunk at a time (measured on Zen 3, one thread,
    alternating processes: fp16 +11-14 %, bf16 +6 % into a reused buffer), float32 slower (-13 %), so it
    keeps the pairs, as do 1-byte dtypes (not measured).  With the AVX2 gathers (TABLE_LOOKUPS "gather":
    no per-lane extracts and inserts holding registers) the pairs pay again: measured on an Intel Xeon,
    haswell build, 4 alternating rounds, bf16 decode 2,342 -> 2,542 MB/s, fp16 2,350 -> 2,538.
    tests/isa.sh's haswell build runs the single-chunk kernels on any host, its gather build and AVX-512 or
    SSE2 builds the paired ones."""
    return not (_AVX2_ONLY and lay.itemsize == 2 and TABLE_LOOKUPS != "gather")


def _decoder(lay: FloatLayout):
    """The parallel decode kernel of one layout, its constants baked in (compiled and cached per layout,
    from the layout's own copies of the helpers: :func:`_layout_namespace`)."""
    kernel = _DECODERS.get(lay.code)
    if kernel is None:
        itemsize, E, M, has_inf = lay.itemsize, lay.exp_bits, lay.man_bits, lay.has_inf
        paired = pair_rounds(lay)       # (a closure constant: numba's cache key holds it)

        def decode_all(t, ctl, buf, starts, ends, kinds, first, chunk_size, numel, freqs, out, errors, limits):
            # every thread claims the next pair of chunks until none is left
            n_pairs = (len(kinds) + 1) // 2
            pair = fetch_add(ctl, 0, 1)
            while pair < n_pairs:
                _decode_pair(pair, buf, starts, ends, kinds, first, chunk_size, numel, itemsize, E, M, has_inf,
                             freqs, out, errors, limits, paired)
                pair = fetch_add(ctl, 0, 1)

        own = _rebound(decode_all, _layout_namespace(lay), lay.name)
        kernel = _DECODERS[lay.code] = njit(cache=True, nogil=True, **kernel_options())(own)
    return kernel


def decode_chunks(h: Header, buf, chunks: range, out: np.ndarray) -> None:
    """Same contract as :func:`reference.decode_chunks`; raises the same :class:`FormatError`."""
    if not len(chunks):
        return
    lay = h.layout
    mv = _readonly(np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8))
    c0, c1 = chunks.start, chunks.stop
    ends = h.ends[c0:c1].astype(np.int64) + h.payload_start
    starts = np.empty_like(ends)
    starts[0] = (int(h.ends[c0 - 1]) if c0 else 0) + h.payload_start
    starts[1:] = ends[:-1]
    errors = np.zeros(c1 - c0, np.int64)
    threads = min(get_num_threads(), (c1 - c0 + 1) // 2)
    kinds = _readonly(np.ascontiguousarray(h.kinds[c0:c1]))
    run(_decoder(lay), threads, _counters(1), mv, starts, ends, kinds, c0, h.chunk_size, h.numel, _freqs64(),
        out, errors, _limits(h))
    if int(kinds.max()) == KIND_SPARSE:
        _layout_namespace(lay)["_sparse_chunks"](mv, starts, ends, kinds, c0, h.chunk_size, h.numel, lay.itemsize,
                                                 out, errors)
    if errors.any():
        bad = np.flatnonzero(errors)
        i, code = chunks.start + int(bad[0]), int(errors[bad[0]])
        if code in HEAD_FAULTS or code == FAULT_TABLE:
            parse_chunk_head(h, mv, i)          # raises the fault with its values (the kernel has only the code)
        if code == FAULT_SPARSE:                # says what is wrong
            a, b = h.chunk_span(i)
            parse_sparse(mv[a:b], h.chunk_len(i), lay.itemsize, i)
        raise chunk_fault(i, code, dtype=lay.name)


def chunk_path(buf, i: int) -> int:
    """How the SIMD rounds assemble coded chunk ``i`` of stream ``buf`` (:func:`_open_chunk`'s ``dense``:
    1 dense, 2 the window path, 3 dense with a group holding a ZERO or ESC lane redone, 0 after the
    rounds); for tests and probes."""
    h = fmt.parse_header(buf)
    a, b = h.chunk_span(i)
    lay = h.layout
    prm = np.zeros(_N_PRM, np.int64)
    err = _open_chunk(_readonly(np.frombuffer(memoryview(buf).cast("B"), np.uint8)), a, b, h.chunk_len(i),
                      lay.exp_bits, lay.man_bits, lay.has_inf, _freqs64(), prm, np.zeros(_TAB_ROW, np.uint32),
                      np.zeros(MAX_LANES, np.uint32), _limits(h))
    if err:
        raise chunk_fault(i, err, dtype=lay.name)
    return int(prm[_P_DENSE])


def _limits(h: Header) -> np.ndarray:
    """What a chunk head of ``h``'s stream may say: highest sign mode, codebook count, zero-block modes,
    explicit tables or not (one read-only array per format version and codebook family)."""
    key = (h.version, h.family_version)
    lim = _LIMITS.get(key)
    if lim is None:
        lim = _LIMITS[key] = _readonly(np.array([max(sign_modes(h.version)), n_codebooks(h.family_version),
                                                 sum(1 << m for m in zero_block_modes(h.version)),
                                                 explicit_tables(h.version), explicit_layouts(h.version)], np.int64))
    return lim


_LIMITS: dict = {}


def _freqs64():
    return _family64()[0]


# ----------------------------------------------------------------------- split-send planes
@njit(cache=True, nogil=True)
def pack_low_bits(words, width, out):
    """The low ``width`` bits of every word, packed as the codec packs planes (``width // 8`` byte
    planes, low byte first, then the remaining bits little-endian); ``out`` has packed_nbytes bytes."""
    n = words.shape[0]
    full = width // 8
    rem = width % 8
    for b in range(full):
        for i in range(n):
            out[b * n + i] = (np.int64(words[i]) >> (8 * b)) & 0xFF
    if rem:
        q = full * n
        acc = 0
        nacc = 0
        mask = (1 << rem) - 1
        for i in range(n):
            acc |= ((np.int64(words[i]) >> (8 * full)) & mask) << nacc
            nacc += rem
            if nacc >= 32:
                _put32(out, q, acc & 0xFFFFFFFF)
                q += 4
                acc >>= 32
                nacc -= 32
        while nacc > 0:
            out[q] = acc & 0xFF
            q += 1
            acc >>= 8
            nacc -= 8


@njit(cache=True, nogil=True)
def or_low_bits(buf, width, words):
    """Inverse of :func:`pack_low_bits`: OR the packed low bits back into ``words`` in place."""
    n = words.shape[0]
    full = width // 8
    rem = width % 8
    for b in range(full):
        for i in range(n):
            words[i] |= np.int64(buf[b * n + i]) << (8 * b)
    if rem:
        q = full * n
        acc = 0
        nacc = 0
        mask = (1 << rem) - 1
        for i in range(n):
            while nacc < rem:
                acc |= np.int64(buf[q]) << nacc
                q += 1
                nacc += 8
            words[i] |= (acc & mask) << (8 * full)
            acc >>= rem
            nacc -= rem


# numba 0.68 keys its on-disk cache on a hash of the jitted function's own file (this one): the intrinsics
# of _simd.py, the constants of codebook/format/layouts and the kernel variants chosen at import are
# compiled in but not part of the key, so after an edit there the old kernels kept loading (found
# 2026-12-05: tests and a benchmark table ran kernels compiled before an edit of _simd.py; touching this
# file does not help, the key is its content).  The cache directory records what its kernels were
# compiled from; on a mismatch this module's index files are dropped and the kernels compiled again.
_KERNEL_SOURCES = ("_simd.py", "_threads.py", "codebook.py", "format.py", "layouts.py")


def _kernel_stamp() -> str:
    import hashlib
    import os

    h = hashlib.sha256(f"{STREAM_MOVES},{TABLE_LOOKUPS},{ENCODE_LOOKUPS}".encode())
    here = os.path.dirname(os.path.abspath(__file__))
    for name in _KERNEL_SOURCES:
        with open(os.path.join(here, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def drop_stale_cache(cache_dir, prefix: str, stamp: str) -> bool:
    """Remove numba's index files ``prefix*.nbi`` in ``cache_dir`` unless its file ``prefix + "sources"``
    holds ``stamp``, then record ``stamp`` there.  True when indexes were dropped.  An unwritable
    directory is left alone (numba then does not cache there either)."""
    import os

    mark = os.path.join(cache_dir, prefix + "sources")
    try:
        with open(mark) as f:
            if f.read() == stamp:
                return False
    except OSError:
        pass
    try:
        for name in os.listdir(cache_dir):
            if name.startswith(prefix) and name.endswith(".nbi"):
                os.remove(os.path.join(cache_dir, name))
        tmp = f"{mark}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(stamp)
        os.replace(tmp, mark)
    except OSError:
        return False
    return True


_cache_path = getattr(getattr(_encode_window, "_cache", None), "_cache_path", None)
if _cache_path is not None:
    drop_stale_cache(_cache_path, "_numba.", _kernel_stamp())
