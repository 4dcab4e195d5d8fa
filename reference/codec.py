"""NumPy reference codec: the specification every fast path must match byte for byte.

Plain NumPy, vectorised across lanes (and across the equal-length chunks of a tensor),
with one Python-level loop over rANS rounds.  Read with :mod:`codec.format` (the byte
layout) and :mod:`codec.codebook` (the tables and the model fit).

Per chunk of ``n`` words (``codec.format`` has the payload layout):

1. ``(e, sm) = split(word)``; if all words are equal the chunk is CONST.
2. statistics over the words that are not +0: count, ``sum e``, and the histogram of a sample
   (every ``sample_step(n)``-th value; a zero-block payload's leaves out the skipped blocks)
   -> ``(codebook, ref) = select_codebook(...)``.
3. symbol of each word: ZERO if it is +0 and the codebook has a ZERO slot; else
   ``2 + 2 (e - ref + WINDOW_LOW) + leading mantissa bit`` if inside the window with a
   non-zero frequency; else ESC.
   The window symbols carry the exponent *and* the leading mantissa bit.
4. rANS-encode the symbols with ``K = lanes(n)`` interleaved states; store the sign and
   the remaining mantissa bits of the non-ZERO words (minus the low bits that are zero in
   all of them) and the raw exponent + leading bit of the ESC words.  When every non-ZERO
   word has the same sign, the sign mode says which and the plane leaves the sign out.
5. the same with a zero-block bitmap (blocks of 16 or 64 values that are all +0 are
   skipped, the rest coded as above), where at least 1/32 of the values would be skipped;
   the smallest payload is kept (the plain one on ties), and if that is not smaller than
   ``n * itemsize`` bytes, the chunk is RAW.
6. (format 6) the chunk's non-zero words and their positions (SPARSE), where that is smaller than
   the coded payload and than the raw chunk.
7. (format 7) in step 3, where the sample says the chunk's own table may pay, the histogram of every
   EXPLICIT_STEP-th value (less those in skipped blocks, as the fit's sample); its quantised table
   replaces the fitted one where it is estimated smaller, table included (codec.codebook.explicit_may_pay /
   explicit_pays), and follows the chunk head.
"""
from __future__ import annotations

import numpy as np

from codec import format as fmt
from codec.codebook import (PROB_BITS, SYM_ESC, SYM_WINDOW0, SYM_ZERO, WINDOW, WINDOW_LOW, chunk_tables,
                            EXPLICIT_STEP, explicit_choice, explicit_choice_may_pay, fine_histogram, layout_parts,
                            symbol_bits, explicit_may_pay, explicit_pays, frequency_tables, load_family, sample_histogram,
                            sample_step, select_codebook)
from codec.format import (CHUNK_HEAD, KIND_CODED, KIND_CONST, KIND_RAW, KIND_SPARSE, RANS_L, SIGN_NEGATIVE,
                          SIGN_POSITIVE, SIGN_STORED, ZERO_BLOCK_MODES, FormatError, Header, lanes, pack_sparse,
                          parse_chunk_head, parse_sparse, plane_width, sparse_nbytes)
from codec.layouts import FloatLayout, join, log2_magnitude, pack_bits, packed_nbytes, split, unpack_bits

__all__ = ["encode_chunks", "decode_chunks", "pack_bits", "unpack_bits"]

_RENORM_SHIFT = 16 + 16 - PROB_BITS     # encoder flushes 16 bits when x >= freq << 20
_MASK = (1 << PROB_BITS) - 1


# ----------------------------------------------------------------------------- rANS
def rans_encode(sym: np.ndarray, freq: np.ndarray, cum: np.ndarray, k: int):
    """Encode ``sym`` ``(C, n)`` with per-chunk tables ``freq``/``cum`` ``(C, S)`` on ``k`` lanes.

    Returns final states ``(C, k)`` uint32 and, per chunk, its words in stream order.
    Symbols are pushed last-first (rANS is a stack); within a round, lane ``k-1`` first.
    """
    c, n = sym.shape
    rounds = -(-n // k)
    padded = np.full((c, rounds * k), -1, dtype=np.int64)
    padded[:, :n] = sym
    x = np.full((c, k), RANS_L, dtype=np.uint64)
    emitted = np.zeros((c, n + k), dtype=np.uint16)      # at most one word per symbol
    count = np.zeros(c, dtype=np.int64)
    rows = np.broadcast_to(np.arange(c)[:, None], (c, k))
    for r in range(rounds - 1, -1, -1):
        s = padded[:, r * k:(r + 1) * k]
        active = s >= 0
        s = np.where(active, s, 0)
        f = np.take_along_axis(freq, s, axis=1).astype(np.uint64)
        cm = np.take_along_axis(cum, s, axis=1).astype(np.uint64)
        emit = active & (x >= (f << np.uint64(_RENORM_SHIFT)))
        rev = emit[:, ::-1]
        pos = count[:, None] + np.cumsum(rev, axis=1) - 1
        emitted[rows[rev], pos[rev]] = (x[:, ::-1][rev] & np.uint64(0xFFFF)).astype(np.uint16)
        count += emit.sum(axis=1)
        x = np.where(emit, x >> np.uint64(16), x)
        fs = np.maximum(f, np.uint64(1))
        x = np.where(active, ((x // fs) << np.uint64(PROB_BITS)) + x % fs + cm, x)
    return x.astype(np.uint32), [emitted[i, :count[i]][::-1] for i in range(c)]


def rans_decode(states: np.ndarray, words: list[np.ndarray], n: int, tables: list, chunk_ids) -> np.ndarray:
    """Decode ``n`` symbols per chunk; ``states`` ``(C, k)``, ``words[i]`` chunk i's u16 words,
    ``tables[i]`` its ``(freq, cum, slot_symbol)``."""
    c, k = states.shape
    x = states.astype(np.uint64)
    n_words = np.array([len(w) for w in words], dtype=np.int64)
    base = np.concatenate([[0], np.cumsum(n_words)])
    flat = np.concatenate(words + [np.zeros(1, np.uint16)]).astype(np.uint64)
    freq = np.stack([t[0] for t in tables]).astype(np.uint64)
    cum = np.stack([t[1] for t in tables]).astype(np.uint64)
    slot_sym = np.stack([t[2] for t in tables])
    ptr = np.zeros(c, dtype=np.int64)
    rounds = -(-n // k)
    out = np.zeros((c, rounds * k), dtype=np.uint8)
    for r in range(rounds):
        active = np.arange(r * k, (r + 1) * k) < n
        slot = x & np.uint64(_MASK)
        s = np.take_along_axis(slot_sym, slot.astype(np.int64), axis=1)
        f = np.take_along_axis(freq, s.astype(np.int64), axis=1)
        cm = np.take_along_axis(cum, s.astype(np.int64), axis=1)
        nx = f * (x >> np.uint64(PROB_BITS)) + slot - cm
        refill = active & (nx < np.uint64(RANS_L))
        idx = ptr[:, None] + np.cumsum(refill, axis=1) - 1
        over = refill & (idx >= n_words[:, None])
        if over.any():
            bad = chunk_ids[int(np.flatnonzero(over.any(axis=1))[0])]
            raise FormatError(f"chunk {bad}: rANS stream ends early")
        w = flat[np.where(refill, base[:-1, None] + idx, len(flat) - 1)]
        nx = np.where(refill, (nx << np.uint64(16)) | w, nx)
        x = np.where(active, nx, x)
        ptr += refill.sum(axis=1)
        out[:, r * k:(r + 1) * k] = s
    bad = np.flatnonzero((ptr != n_words) | np.any(x != RANS_L, axis=1))
    if len(bad):
        raise FormatError(f"chunk {chunk_ids[int(bad[0])]}: rANS stream inconsistent "
                          "(final state or word count wrong: corrupted payload)")
    return out[:, :n]


# ------------------------------------------------------------------------ symbols
def _keys(e: np.ndarray, sm: np.ndarray, M: int, layout: int) -> np.ndarray:
    """Each value's key under symbol ``layout`` (codec.format, version 8): ``field << b | top << s | sign``
    (layout 0: ``field << 1 | leading mantissa bit``)."""
    k, s = layout_parts(layout)
    top = (sm.astype(np.int64) >> (M - 1 - k)) & ((2 << k) - 1)
    key = (e.astype(np.int64) << (1 + k)) | top
    return (key << 1) | (sm.astype(np.int64) >> M) if s else key


def _symbols(key: np.ndarray, b: int, zero: np.ndarray, ref: int, freq: np.ndarray) -> np.ndarray:
    j = key - ((ref - WINDOW_LOW) << b)
    inside = (j >= 0) & (j < 2 * WINDOW)
    sym = np.where(inside, SYM_WINDOW0 + np.clip(j, 0, 2 * WINDOW - 1), SYM_ESC)
    sym = np.where(freq[sym] > 0, sym, SYM_ESC)
    if freq[SYM_ZERO] > 0:
        sym = np.where(zero, SYM_ZERO, sym)
    return sym


def _trailing_zeros(v: int, limit: int) -> int:
    t = 0
    while t < limit and not (v >> t) & 1:
        t += 1
    return t


def encode_chunks(words: np.ndarray, lay: FloatLayout, chunk_size: int, *, rans=None) -> tuple[np.ndarray, list[bytes]]:
    """Kinds and payloads of every chunk of the 1-D unsigned ``words``.  ``rans``: an implementation of
    :func:`rans_encode` with the same contract (the generated GPU kernels plug in here)."""
    rans = rans or rans_encode
    fam = load_family()
    numel = len(words)
    n_chunks = -(-numel // chunk_size)
    kinds = np.zeros(n_chunks, dtype=np.uint8)
    payloads: list[bytes] = [b""] * n_chunks
    n_full = numel // chunk_size
    groups = [(0, n_full, chunk_size)] if n_full else []
    if n_full < n_chunks:
        groups.append((n_full, n_chunks, numel - n_full * chunk_size))
    for first, last, n in groups:
        block = words[first * chunk_size:first * chunk_size + (last - first) * n].reshape(last - first, n)
        const = np.all(block == block[:, :1], axis=1)
        for i in np.flatnonzero(const):
            kinds[first + i] = KIND_CONST
            payloads[first + i] = block[i, :1].astype(lay.uint.newbyteorder("<")).tobytes()
        rows = np.flatnonzero(~const)
        if not len(rows):
            continue
        step = sample_step(n)
        hists = [sample_histogram(row, lay.exp_bits, lay.man_bits, step) for row in block[rows]]
        if fmt.explicit_layouts(fmt.WRITE_VERSION):     # format 8: the finer histograms its layouts need
            xhists = [(fine_histogram(row, lay.exp_bits, lay.man_bits, step), fine_histogram(row, lay.exp_bits, lay.man_bits))
                      for row in block[rows]]
        else:
            xhists = [sample_histogram(row, lay.exp_bits, lay.man_bits, EXPLICIT_STEP) for row in block[rows]]
        candidates = [_coded_payloads(block[rows], lay, fam, hists=hists, xhists=xhists, rans=rans)]
        for mode in ZERO_BLOCK_MODES:
            candidates.append(_sparse_payloads(block[rows], mode, lay, fam, rans, hists, xhists, step))
        for j, row in enumerate(rows):
            best = min((c[j] for c in candidates if c[j] is not None), key=len)   # first on ties
            sparse = sparse_nbytes(block[row])
            if sparse < len(best) and sparse < n * lay.itemsize:     # (coded wins a tie, raw wins one too)
                kinds[first + row] = KIND_SPARSE
                payloads[first + row] = pack_sparse(block[row])
            elif len(best) >= n * lay.itemsize:
                kinds[first + row] = KIND_RAW
                payloads[first + row] = block[row].astype(lay.uint.newbyteorder("<")).tobytes()
            else:
                kinds[first + row] = KIND_CODED
                payloads[first + row] = best
    return kinds, payloads


def _sparse_payloads(block: np.ndarray, mode: int, lay: FloatLayout, fam, rans, hists, xhists, step) -> list[bytes | None]:
    """Payloads with a zero-block bitmap of ``2^mode``-value blocks, where it may pay (else None); the
    fit's sample is the chunk's (``hists``) less its positions in skipped blocks (all +0)."""
    n = block.shape[1]
    size = 1 << mode
    out: list[bytes | None] = []
    for row, hist, xhist in zip(block, hists, xhists):
        zero_blocks = zero_block_flags(row, size)
        kept = np.repeat(~zero_blocks, size)[:n]
        if 32 * (n - int(kept.sum())) < n or not kept.any():   # < 1/32 of the values skipped: not worth trying
            out.append(None)
            continue
        bitmap = np.packbits(zero_blocks.astype(np.uint8), bitorder="little").tobytes()
        hist = hist.copy()
        hist[-1] -= int((~kept[::step]).sum())
        if isinstance(xhist, tuple):              # format 8: fine sample and full histograms
            a, f = xhist[0].copy(), xhist[1].copy()
            a[-1] -= int((~kept[::step]).sum())
            f[-1] -= int((~kept).sum())
            xhist = (a, f)
        else:
            xhist = xhist.copy()
            xhist[-1] -= int((~kept[::EXPLICIT_STEP]).sum())
        out.append(_coded_payloads(row[kept][None, :], lay, fam, hists=[hist], xhists=[xhist], mode=mode, bitmaps=[bitmap],
                                   rans=rans)[0])
    return out


def zero_block_flags(row: np.ndarray, size: int) -> np.ndarray:
    """True for each ``size``-value block of ``row`` (the last one may be short) that is all +0."""
    n = len(row)
    nb = -(-n // size)
    padded = np.zeros(nb * size, dtype=row.dtype)
    padded[:n] = row
    return ~padded.reshape(nb, size).any(axis=1)


def _coded_payloads(sub: np.ndarray, lay: FloatLayout, fam, *, hists, xhists, mode: int = 0, bitmaps=None,
                    rans=rans_encode) -> list[bytes]:
    """CODED payloads of the equal-length rows of ``sub`` (the values that are entropy coded; ``hists``:
    each row's sample histogram for the fit)."""
    n = sub.shape[1]
    M = lay.man_bits
    e, sm = split(sub, lay)
    sm = sm.astype(np.uint32)
    low = sm & ((1 << (M - 1)) - 1)
    sign = sm >> M
    zero = sub == 0
    magnitude_mask = (1 << (8 * lay.itemsize - 1)) - 1
    has_log = (sub & lay.uint.type(magnitude_mask)) != 0
    lg = np.where(has_log, log2_magnitude(e, sm, lay), 0)
    stats = zip(hists, zero.sum(axis=1), has_log.sum(axis=1), lg.sum(axis=1))
    heads = [select_codebook(n, int(z), int(nl), int(s1), hist, lay.exp_bits, lay.has_inf, fam)
             for hist, z, nl, s1 in stats]
    tables = [chunk_tables(cb, ref, lay.exp_bits, lay.has_inf) for cb, ref in heads]
    explicit = [b""] * len(heads)
    layouts = [0] * len(heads)
    if fmt.explicit_layouts(fmt.WRITE_VERSION):      # format 8: the chunk's own table and symbol layout
        for j, (cb, ref) in enumerate(heads):
            sample, full = xhists[j]
            orlow = int(np.bitwise_or.reduce(low[j]))
            if not (explicit_may_pay(hists[j], tables[j][0], ref, n, fam.code_lengths, M)     # format 7's gate, or
                    or explicit_choice_may_pay(sample, tables[j][0], ref, n, fam.code_lengths, lay.exp_bits, M, 0, orlow)):
                continue
            got = explicit_choice(full, tables[j][0], ref, fam.code_lengths, lay.exp_bits, M, 0, orlow)
            if got is not None:
                f, layouts[j], r = got
                heads[j] = (fmt.CB_EXPLICIT, r)
                tables[j] = frequency_tables(f)
                explicit[j] = fmt.pack_explicit_table(f, layouts[j])
    elif fmt.explicit_tables(fmt.WRITE_VERSION):       # format 7: the chunk's own table where it pays
        for j, ((cb, ref), hist) in enumerate(zip(heads, hists)):
            if not explicit_may_pay(hist, tables[j][0], ref, n, fam.code_lengths, M):
                continue
            f = explicit_pays(xhists[j], tables[j][0], ref, fam.code_lengths, M)
            if f is not None:
                heads[j] = (fmt.CB_EXPLICIT, ref)
                tables[j] = frequency_tables(f)
                explicit[j] = fmt.pack_explicit_table(f)
    keys = [_keys(e[j], sm[j], M, layouts[j]) for j in range(len(heads))]
    sym = np.stack([_symbols(keys[j], symbol_bits(layouts[j]), zero[j], ref, tables[j][0])
                    for j, (cb, ref) in enumerate(heads)])
    freq = np.stack([t[0] for t in tables]).astype(np.int64)
    cum = np.stack([t[1][:-1] for t in tables]).astype(np.int64)
    states, words = rans(sym, freq, cum, lanes(n))
    out = []
    for j, (cb, ref) in enumerate(heads):
        keep = sym[j] != SYM_ZERO
        is_esc = sym[j] == SYM_ESC
        xk, xs = layout_parts(layouts[j])
        mk = M - xk                            # the plane's mantissa: below the symbol's bits
        lowk = low[j][keep] & ((1 << (mk - 1)) - 1)
        shift = _trailing_zeros(int(np.bitwise_or.reduce(lowk)), mk - 1)
        signs = sign[j][keep]
        mode_s = SIGN_POSITIVE if xs else sign_mode(signs)
        residual = (np.where(mode_s == SIGN_STORED, signs, 0) << (mk - 1 - shift)) | (lowk >> shift)
        # without the sign on top, the high bits that every residual leaves zero go too (small subnormals)
        narrow = 0 if mode_s == SIGN_STORED else mk - 1 - shift - int(np.bitwise_or.reduce(residual, initial=0)).bit_length()
        narrow = max(narrow, 0)
        esc = keys[j][is_esc].astype(np.uint16)
        out.append(b"".join([CHUNK_HEAD.pack(codebook=cb, ref=ref, shift=shift, mode=mode, sign=mode_s, narrow=narrow,
                                             n_sm=int(keep.sum()), n_esc=len(esc), n_words=len(words[j])),
                             explicit[j], bitmaps[j] if mode else b"",
                             states[j].astype("<u4").tobytes(), words[j].astype("<u2").tobytes(),
                             pack_bits(residual, plane_width(mk, shift, mode_s, narrow)), esc.astype("<u2").tobytes()]))
    return out


def sign_mode(signs: np.ndarray) -> int:
    """The sign mode of a chunk whose plane values have sign bits ``signs``: POSITIVE or NEGATIVE when
    they all agree (an empty plane is POSITIVE), else STORED."""
    if not signs.any():
        return SIGN_POSITIVE
    return SIGN_NEGATIVE if signs.all() else SIGN_STORED


DECODE_BATCH = 512       # coded chunks decoded side by side (vectorised across chunks)


def decode_chunks(h: Header, buf, chunks: range, out: np.ndarray) -> None:
    """Decode chunks ``chunks`` of a parsed stream into ``out`` (1-D unsigned words, their values only)."""
    lay = h.layout
    mv = np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8)
    base = chunks.start * h.chunk_size
    coded: dict[int, list] = {}
    for i in chunks:
        a, b = h.chunk_span(i)
        n = h.chunk_len(i)
        lo = i * h.chunk_size - base
        kind = int(h.kinds[i])
        if kind == KIND_RAW:
            out[lo:lo + n] = mv[a:b].view(lay.uint.newbyteorder("<"))
        elif kind == KIND_CONST:
            out[lo:lo + n] = mv[a:b].view(lay.uint.newbyteorder("<"))[0]
        elif kind == KIND_SPARSE:
            positions, values = parse_sparse(mv[a:b], n, lay.itemsize, i)
            out[lo:lo + n] = 0
            out[lo + positions] = values
        else:
            head = parse_chunk_head(h, mv, i)
            coded.setdefault(head.n_coded, []).append((i, head))
    for n_coded, items in coded.items():
        # in batches: the batch's stacked tables (~5 KB a chunk) stay bounded however many chunks there are
        for at in range(0, len(items), DECODE_BATCH):
            _decode_group(h, mv, items[at:at + DECODE_BATCH], n_coded, out, base)


def _decode_group(h, mv, items, n, out, base):
    """Decode coded chunks that all entropy-code ``n`` values."""
    lay = h.layout
    M = lay.man_bits
    k = lanes(n)
    states = np.zeros((len(items), k), np.uint32)
    words = []
    for j, (i, hd) in enumerate(items):
        states[j] = mv[hd.states:hd.states + 4 * k].view("<u4")
        words.append(mv[hd.words:hd.words + 2 * hd.n_words].view("<u2"))
    tables = [chunk_tables(hd.codebook, hd.ref, lay.exp_bits, lay.has_inf) if hd.table is None
              else frequency_tables(hd.table) for _, hd in items]
    sym = rans_decode(states, words, n, tables, [i for i, _ in items])
    top = (1 << lay.exp_bits) - 1
    for j, (i, hd) in enumerate(items):
        s = sym[j].astype(np.int64)
        keep = s != SYM_ZERO
        is_esc = s == SYM_ESC
        if int(keep.sum()) != hd.n_sm or int(is_esc.sum()) != hd.n_esc:
            raise FormatError(f"chunk {i}: decoded symbols disagree with the header counts")
        shift = hd.shift
        xk, xs = layout_parts(hd.layout)
        b = symbol_bits(hd.layout)
        mk = M - xk                          # the plane's mantissa: below the symbol's bits
        pos = hd.words + 2 * hd.n_words
        width = plane_width(mk, shift, hd.sign, hd.narrow)
        plane = packed_nbytes(hd.n_sm, width)
        residual = unpack_bits(mv[pos:pos + plane], hd.n_sm, width)
        if hd.sign == SIGN_NEGATIVE:
            residual |= np.uint32(1 << (mk - 1 - shift))
        esc = mv[pos + plane:pos + plane + 2 * hd.n_esc].view("<u2").astype(np.int64)
        key = (s - SYM_WINDOW0) + ((hd.ref - WINDOW_LOW) << b)
        key[is_esc] = esc
        e = np.where(keep, key >> b, 0)
        if e.min() < 0 or e.max() > top:
            raise FormatError(f"chunk {i}: exponent field out of range for {lay.name}")
        sub = (key[keep] & ((1 << b) - 1)).astype(np.uint32)
        sm = np.zeros(n, dtype=np.uint32)
        sm[keep] = (((residual >> (mk - 1 - shift)) << M) | ((sub >> xs) << (mk - 1))
                    | ((residual & ((1 << (mk - 1 - shift)) - 1)) << shift))
        if xs:
            sm[keep] |= (sub & 1) << M
        values = join(e.astype(np.uint32), sm, lay)
        lo = i * h.chunk_size - base
        n_chunk = h.chunk_len(i)
        if hd.zero_blocks is None:
            out[lo:lo + n_chunk] = values
        else:
            kept = np.repeat(~hd.zero_blocks, 1 << hd.mode)[:n_chunk]
            dst = out[lo:lo + n_chunk]
            dst[:] = 0
            dst[kept] = values
