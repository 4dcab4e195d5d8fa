"""zipccl Triton codec kernels: the hand-written logic every generated kernel module instantiates.

The generated modules (codegen/templates/triton_codec.py.tmpl, rendered per dtype) hold the layout's
constants and one ``@triton.jit`` entry point per kernel below, which forwards its arguments and the
constants (``E``, ``M``, masks...: ``tl.constexpr`` parameters here).  Constants shared by every dtype
are module-level ``tl.constexpr`` values taken from :mod:`codec.codebook` and :mod:`codec.format`.

decode_coded_chunks: one program decodes one CODED chunk: the rANS lanes are the vector lanes,
refills are placed by a prefix sum over the lanes that need one (the layout codec.format describes).
dec_symbols + dec_values: the same split in two passes, the serial rANS walk alone (symbols to a
scratch byte per value), then whole vectors of values at once (the GPU check times both).
The device encoder (codegen.device.encode_stream) runs enc_stats, enc_rans, enc_place, enc_planes and
enc_copy, one program per chunk (or per chunk and candidate payload), with tensor ops in between;
dec_copy writes RAW and CONST chunks.
"""
import triton
import triton.language as tl

from codec import codebook as _cbk
from codec import format as _fmt
from codegen import rows as _rows

PROB_BITS = tl.constexpr(_cbk.PROB_BITS)
TOTAL = tl.constexpr(_cbk.TOTAL)
MASK = tl.constexpr(_cbk.TOTAL - 1)
N_SYMBOLS = tl.constexpr(_cbk.N_SYMBOLS)
RENORM_SHIFT = tl.constexpr(32 - _cbk.PROB_BITS)
SYM_ZERO = tl.constexpr(_cbk.SYM_ZERO)
SYM_ESC = tl.constexpr(_cbk.SYM_ESC)
SYM_WINDOW0 = tl.constexpr(_cbk.SYM_WINDOW0)
WINDOW = tl.constexpr(_cbk.WINDOW)
WINDOW_LOW = tl.constexpr(_cbk.WINDOW_LOW)
RANS_L = tl.constexpr(_fmt.RANS_L)
MAX_LANES = tl.constexpr(_fmt.MAX_LANES)
KIND_CONST = tl.constexpr(_fmt.KIND_CONST)
SIGN_STORED = tl.constexpr(_fmt.SIGN_STORED)
SIGN_NEGATIVE = tl.constexpr(_fmt.SIGN_NEGATIVE)
# the kernel rows' column indices (codegen.rows: META_STATES_AT, PN_SHIFT, ...) and the chunk head's field
# offsets (codec.format.CHUNK_HEAD: CH_N_SM, ...), one constant each, as the CUDA kernels get them
globals().update({name: tl.constexpr(value)
                  for name, value in {**_rows.constants(), **_fmt.CHUNK_HEAD.constants()}.items()})


@triton.jit
def _meta_row(meta, c):
    """Chunk ``c``'s row of the decoders' meta table (codegen.device.decode_into builds it): states, words,
    word count, residual plane, escapes, non-ZERO count, escape count, coded values, shift, table row,
    output offset, zero-block mode, block-list offset, lanes (the sign mode: _values reads it)."""
    mrow = meta + c * META_WIDTH
    return (tl.load(mrow + META_STATES_AT), tl.load(mrow + META_WORDS_AT), tl.load(mrow + META_N_WORDS),
            tl.load(mrow + META_PLANE_AT), tl.load(mrow + META_ESC_AT), tl.load(mrow + META_N_SM),
            tl.load(mrow + META_N_ESC), tl.load(mrow + META_N_CODED), tl.load(mrow + META_SHIFT),
            tl.load(mrow + META_TABLE), tl.load(mrow + META_OUT_AT), tl.load(mrow + META_MODE),
            tl.load(mrow + META_NZB_AT), tl.load(mrow + META_LANES))


@triton.jit
def _sign_mode(meta, c):
    """Chunk ``c``'s sign mode (codec.format.SIGN_*)."""
    mrow = meta + c * META_WIDTH
    return tl.load(mrow + META_SIGN)


@triton.jit
def _narrow(meta, c):
    """Chunk ``c``'s high residual bits left out of the plane."""
    mrow = meta + c * META_WIDTH
    return tl.load(mrow + META_NARROW)


@triton.jit
def _values(buf, hi, nzb, out, out_at, s, i, active, kk, ke, tab, plane_at, esc_at, n_sm, n_esc, shift, mode,
            nzb_at, sign, narrow, zv, E: tl.constexpr, M: tl.constexpr, TOP: tl.constexpr, MAX_FULL: tl.constexpr):
    """Write the words of coded values ``i`` (symbols ``s``) to ``out``: residual bits from the plane,
    exponent and leading bit from the symbol or the escape plane; ``kk``/``ke``: non-ZERO values and
    escapes before this vector; ``sign``: the chunk's sign mode (a plane without signs is 1 bit narrower;
    SIGN_NEGATIVE puts the sign back), ``narrow``: high bits the plane leaves out.  Returns a fault flag and the vector's non-ZERO and escape counts."""
    width = M - shift - (sign != SIGN_STORED).to(tl.int64) - narrow
    full = width // 8
    rem = width % 8
    ssr = M - 1 - shift
    nz = active & (s != SYM_ZERO)
    nzi = nz.to(tl.int64)
    kidx = kk + tl.cumsum(nzi, 0) - nzi
    isesc = active & (s == SYM_ESC)
    esci = isesc.to(tl.int64)
    eidx = ke + tl.cumsum(esci, 0) - esci
    bad = tl.max((nz & (kidx >= n_sm)).to(tl.int32), 0) | tl.max((isesc & (eidx >= n_esc)).to(tl.int32), 0)
    h = tl.load(hi + tab * N_SYMBOLS + s, mask=active, other=0)
    ep = buf + esc_at + 2 * eidx
    ev = (tl.load(ep, mask=isesc & (eidx < n_esc), other=0).to(tl.int64)
          | (tl.load(ep + 1, mask=isesc & (eidx < n_esc), other=0).to(tl.int64) << 8))
    bad = bad | tl.max((isesc & ((ev >> 1) > TOP)).to(tl.int32), 0)
    h = tl.where(isesc, ((ev >> 1) << M) | ((ev & 1) << (M - 1)), h)
    bad = bad | tl.max((nz & (h < 0)).to(tl.int32), 0)
    ok = nz & (kidx < n_sm)
    res = zv
    for b in tl.static_range(MAX_FULL):
        res = res | (tl.load(buf + plane_at + b * n_sm + kidx, mask=ok & ((zv + full) > b), other=0).to(tl.int64) << (8 * b))
    bitpos = kidx * rem
    q = buf + plane_at + full * n_sm + (bitpos >> 3)
    o = bitpos & 7
    two = (tl.load(q, mask=ok & ((zv + rem) > 0), other=0).to(tl.int64)
           | (tl.load(q + 1, mask=ok & ((zv + rem) > 0) & (o + rem > 8), other=0).to(tl.int64) << 8))
    res = res | (((two >> o) & ((1 << rem) - 1)) << (8 * full))
    lowmask = (tl.full([], 1, tl.int64) << ssr) - 1
    neg = (sign == SIGN_NEGATIVE).to(tl.int64)
    v = tl.where(nz, (((res >> ssr) | neg) << (E + M)) | h | ((res & lowmask) << shift), 0)
    blk = i >> mode
    dst = tl.where(mode == 0, i, tl.load(nzb + nzb_at + blk, mask=active & ((zv + mode) != 0), other=0) * (1 << mode)
                   + (i & ((1 << mode) - 1)))
    tl.store(out + out_at + dst, v.to(out.dtype.element_ty), mask=active)
    return bad, tl.sum(nzi, 0), tl.sum(esci, 0)


@triton.jit
def _rans_states(buf, states_at, live):
    """The final rANS states a coded chunk stores, one u32 per live lane."""
    sp = buf + states_at + 4 * tl.arange(0, MAX_LANES)
    return (tl.load(sp, mask=live, other=0).to(tl.int64) | (tl.load(sp + 1, mask=live, other=0).to(tl.int64) << 8)
            | (tl.load(sp + 2, mask=live, other=0).to(tl.int64) << 16)
            | (tl.load(sp + 3, mask=live, other=0).to(tl.int64) << 24))


@triton.jit
def _rans_step(buf, tables, tab, x, active, ptr, words_at, n_words):
    """One decode round on every lane: the symbol from the table, the state update, and the refills
    (16-bit words taken in lane order, placed by a prefix sum).  Returns the symbols, the new states,
    the new word position and a fault flag (a refill past the chunk's words)."""
    ent = tl.load(tables + tab * TOTAL + (x & MASK), mask=active, other=0)
    xn = (ent >> 19) * (x >> PROB_BITS) + ((ent >> 7) & 0xFFF)
    need = active & (xn < RANS_L)
    needi = need.to(tl.int64)
    widx = ptr + tl.cumsum(needi, 0) - needi
    bad = tl.max((need & (widx >= n_words)).to(tl.int32), 0)
    wp = buf + words_at + 2 * widx
    w = (tl.load(wp, mask=need & (widx < n_words), other=0).to(tl.int64)
         | (tl.load(wp + 1, mask=need & (widx < n_words), other=0).to(tl.int64) << 8))
    x = tl.where(active, tl.where(need, (xn << 16) | w, xn), x)
    return ent & 0x7F, x, ptr + tl.sum(needi, 0), bad


@triton.jit
def dec_symbols(
    buf,        # *u8   the whole stream
    meta,       # *i64  (n_chunks, META_WIDTH) as for decode_coded_chunks
    tables,     # *i64  (n_tables, TOTAL) slot -> sym | (slot - cum) << 7 | freq << 19
    sym,        # *u8   out: each chunk's symbols, from its offset in sym_at
    sym_at,     # *i64  (n_chunks,)
    err,        # *i32  (n_chunks,) out: 0 = the rANS stream is consistent
    E: tl.constexpr, M: tl.constexpr, TOP: tl.constexpr, ITEMSIZE: tl.constexpr,          # the layout's constants
    MANMASK: tl.constexpr, LOWMASK: tl.constexpr, MAGMASK: tl.constexpr, MAX_FULL: tl.constexpr,
):
    # the split decoder's first pass: the rANS walk alone (table lookup, refills), symbols to scratch
    c = tl.program_id(0)
    (states_at, words_at, n_words, plane_at, esc_at, n_sm, n_esc, n_coded, shift, tab, out_at, mode, nzb_at,
     k) = _meta_row(meta, c)
    at = tl.load(sym_at + c)
    lanes = tl.arange(0, MAX_LANES)
    live = lanes < k
    x = _rans_states(buf, states_at, live)
    ptr = tl.zeros([], tl.int64)
    bad = tl.zeros([], tl.int32)
    for r in range(0, (n_coded + k - 1) // k):
        i = r * k + lanes
        active = live & (i < n_coded)
        s, x, ptr, b = _rans_step(buf, tables, tab, x, active, ptr, words_at, n_words)
        bad = bad | b
        tl.store(sym + at + i, s.to(tl.uint8), mask=active)
    bad = bad | (ptr != n_words).to(tl.int32) | tl.max((live & (x != RANS_L)).to(tl.int32), 0)
    tl.store(err + c, bad)


@triton.jit
def dec_values(
    buf,        # *u8   the whole stream
    meta,       # *i64  (n_chunks, META_WIDTH) as for decode_coded_chunks
    hi,         # *i64  (n_tables, N_SYMBOLS) symbol -> exponent << M | leading bit << (M-1); -1 impossible
    nzb,        # *i64  indices of the non-zero blocks of zero-block chunks
    sym,        # *u8   dec_symbols' output
    sym_at,     # *i64  (n_chunks,)
    out,        # *uint output words
    err,        # *i32  (n_chunks,) in/out: faults are or-ed in
    BLOCK: tl.constexpr,
    E: tl.constexpr, M: tl.constexpr, TOP: tl.constexpr, ITEMSIZE: tl.constexpr,          # the layout's constants
    MANMASK: tl.constexpr, LOWMASK: tl.constexpr, MAGMASK: tl.constexpr, MAX_FULL: tl.constexpr,
):
    # the split decoder's second pass: whole vectors of values at once, no serial dependence but two sums
    c = tl.program_id(0)
    (states_at, words_at, n_words, plane_at, esc_at, n_sm, n_esc, n_coded, shift, tab, out_at, mode, nzb_at,
     k) = _meta_row(meta, c)
    at = tl.load(sym_at + c)
    lanes = tl.arange(0, BLOCK)
    zv = tl.zeros([BLOCK], tl.int64)
    kk = tl.zeros([], tl.int64)
    ke = tl.zeros([], tl.int64)
    bad = tl.zeros([], tl.int32)
    for t in range(0, n_coded, BLOCK):
        i = t + lanes
        active = i < n_coded
        s = tl.load(sym + at + i, mask=active, other=0).to(tl.int64)
        b, n_nz, n_es = _values(buf, hi, nzb, out, out_at, s, i, active, kk, ke, tab, plane_at, esc_at, n_sm, n_esc,
                                shift, mode, nzb_at, _sign_mode(meta, c), _narrow(meta, c), zv, E, M, TOP,
                                MAX_FULL)
        bad = bad | b
        kk += n_nz
        ke += n_es
    bad = bad | (kk != n_sm).to(tl.int32) | (ke != n_esc).to(tl.int32)
    tl.store(err + c, tl.load(err + c) | bad)


@triton.jit
def decode_coded_chunks(
    buf,        # *u8   the whole stream
    meta,       # *i64  (n_chunks, META_WIDTH) per-chunk offsets and counts, see codegen.device.decode_into
    tables,     # *i64  (n_tables, TOTAL) slot -> sym | (slot - cum) << 7 | freq << 19
    hi,         # *i64  (n_tables, N_SYMBOLS) symbol -> exponent << M | leading bit << (M-1); -1 impossible
    nzb,        # *i64  indices of the non-zero blocks of zero-block chunks
    out,        # *uint output words
    err,        # *i32  (n_chunks,) 0 = ok
    E: tl.constexpr, M: tl.constexpr, TOP: tl.constexpr, ITEMSIZE: tl.constexpr,          # the layout's constants
    MANMASK: tl.constexpr, LOWMASK: tl.constexpr, MAGMASK: tl.constexpr, MAX_FULL: tl.constexpr,
):
    c = tl.program_id(0)
    (states_at, words_at, n_words, plane_at, esc_at, n_sm, n_esc, n_coded, shift, tab, out_at, mode, nzb_at,
     k) = _meta_row(meta, c)

    lanes = tl.arange(0, MAX_LANES)
    zv = tl.zeros([MAX_LANES], tl.int64)      # broadcasts scalars into masks (the interpreter needs vectors)
    live = lanes < k
    x = _rans_states(buf, states_at, live)
    ptr = tl.zeros([], tl.int64)
    kk = tl.zeros([], tl.int64)
    ke = tl.zeros([], tl.int64)
    bad = tl.zeros([], tl.int32)
    for r in range(0, (n_coded + k - 1) // k):
        i = r * k + lanes
        active = live & (i < n_coded)
        s, x, ptr, b = _rans_step(buf, tables, tab, x, active, ptr, words_at, n_words)
        bad = bad | b
        b, n_nz, n_es = _values(buf, hi, nzb, out, out_at, s, i, active, kk, ke, tab, plane_at, esc_at, n_sm, n_esc,
                                shift, mode, nzb_at, _sign_mode(meta, c), _narrow(meta, c), zv, E, M, TOP,
                                MAX_FULL)
        bad = bad | b
        kk += n_nz
        ke += n_es
    bad = bad | (ptr != n_words).to(tl.int32) | tl.max((live & (x != RANS_L)).to(tl.int32), 0)
    bad = bad | (kk != n_sm).to(tl.int32) | (ke != n_esc).to(tl.int32)
    tl.store(err + c, bad)


# ----------------------------------------------------------------------------------- encoder
# The device encoder (codegen.triton_backend.encode_tensor) runs four kernels, one program per chunk
# (or per chunk and zero-block candidate), and does the small per-chunk arithmetic in between with
# tensor ops on the same device:
#   enc_stats    one pass over the words: CONST test, the model statistics, the OR of the low
#                mantissa bits (-> shift) and the all-zero flags of 16- and 64-value blocks;
#   enc_rans     the symbols and the rANS walk of every candidate payload, once: the words go to a
#                scratch area in emission order, with the final states and the counts (words,
#                non-ZERO values, escapes: the payload's size);
#   enc_place    the chosen candidate's states and words (reversed: the stream order) into place;
#   enc_planes   chunk header, residual plane and escape plane of a CODED chunk;
#   enc_copy     RAW and CONST payloads.
@triton.jit
def _or(a, b):
    return a | b


@triton.jit
def enc_stats(
    words,      # *uint the input words
    n_total, cs,
    stats,      # *i64  out: a codegen.rows STATS row per chunk
    nz16,       # *u8   (C, nb16) out: 1 where a 16-value block holds a word that is not +0
    nz64,       # *u8   (C, nb64) out: the same for 64-value blocks
    nb16, nb64,
    BLOCK: tl.constexpr,
    E: tl.constexpr, M: tl.constexpr, TOP: tl.constexpr, ITEMSIZE: tl.constexpr,          # the layout's constants
    MANMASK: tl.constexpr, LOWMASK: tl.constexpr, MAGMASK: tl.constexpr, MAX_FULL: tl.constexpr,
):
    c = tl.program_id(0)
    start = c.to(tl.int64) * cs
    n = tl.minimum(cs, n_total - start)
    lanes = tl.arange(0, BLOCK)
    first = tl.load(words + start).to(tl.int64)
    differ = tl.zeros([], tl.int64)
    zeros = tl.zeros([], tl.int64)
    n_log = tl.zeros([], tl.int64)
    s1 = tl.zeros([], tl.int64)
    s2 = tl.zeros([], tl.int64)
    low = tl.zeros([], tl.int64)
    skip16 = tl.zeros([], tl.int64)
    skip64 = tl.zeros([], tl.int64)
    neg = tl.zeros([], tl.int64)
    for t in range(0, n, BLOCK):
        i = t + lanes
        valid = i < n
        w = tl.load(words + start + i, mask=valid, other=0).to(tl.int64)
        differ += tl.sum((valid & (w != first)).to(tl.int64), 0)
        zeros += tl.sum((valid & (w == 0)).to(tl.int64), 0)
        neg += tl.sum(tl.where(valid, (w >> (E + M)) & 1, 0), 0)
        e = (w >> M) & TOP
        mant = w & MANMASK
        has_log = valid & ((w & MAGMASK) != 0)
        mlog = ((tl.maximum(mant, 1).to(tl.float32).to(tl.int32, bitcast=True) >> 23) - 127).to(tl.int64)
        lg = tl.where(has_log, tl.where(e == 0, 1 - M + mlog, e), 0)
        n_log += tl.sum(has_log.to(tl.int64), 0)
        s1 += tl.sum(lg, 0)
        s2 += tl.sum(lg * lg, 0)
        low = low | tl.reduce(mant & LOWMASK, 0, _or)
        nzw = (w != 0).to(tl.int32)
        nzb = tl.max(tl.reshape(nzw, (BLOCK // 16, 16)), axis=1)
        cnt = tl.sum(tl.reshape(valid.to(tl.int64), (BLOCK // 16, 16)), axis=1)
        skip16 += tl.sum(tl.where(nzb == 0, cnt, 0), 0)
        b = t // 16 + tl.arange(0, BLOCK // 16)
        tl.store(nz16 + c * nb16 + b, nzb.to(tl.uint8), mask=b * 16 < n)
        nzb = tl.max(tl.reshape(nzw, (BLOCK // 64, 64)), axis=1)
        cnt = tl.sum(tl.reshape(valid.to(tl.int64), (BLOCK // 64, 64)), axis=1)
        skip64 += tl.sum(tl.where(nzb == 0, cnt, 0), 0)
        b = t // 64 + tl.arange(0, BLOCK // 64)
        tl.store(nz64 + c * nb64 + b, nzb.to(tl.uint8), mask=b * 64 < n)
    row = stats + c * ST_WIDTH
    tl.store(row + ST_N, n)
    tl.store(row + ST_CONST, (differ == 0).to(tl.int64))
    tl.store(row + ST_FIRST, first)
    tl.store(row + ST_ZEROS, zeros)
    tl.store(row + ST_N_LOG, n_log)
    tl.store(row + ST_S1, s1)
    tl.store(row + ST_S2, s2)
    tl.store(row + ST_LOW, low)
    tl.store(row + ST_SKIP16, skip16)
    tl.store(row + ST_SKIP64, skip64)
    tl.store(row + ST_NEG, neg)


@triton.jit
def _position(i, mode, nzb, nzb_at, active, zv):
    # chunk position of coded value i: itself, or inside the non-zero blocks of a zero-block payload
    blk = tl.load(nzb + nzb_at + (i >> mode), mask=active & ((zv + mode) != 0), other=0)
    return tl.where(mode == 0, i, blk * (1 << mode) + (i & ((1 << mode) - 1)))


@triton.jit
def _symbol(w, ref, freq_row, has_zero, active, M: tl.constexpr, TOP: tl.constexpr):
    # the reference's symbol rule (reference.codec._symbols) for one vector of words
    e = (w >> M) & TOP
    lead = (w >> (M - 1)) & 1
    j = e - ref + WINDOW_LOW
    s = tl.where((j >= 0) & (j < WINDOW), SYM_WINDOW0 + 2 * j + lead, SYM_ESC)
    f = tl.load(freq_row + s, mask=active, other=0)
    s = tl.where(f > 0, s, SYM_ESC)
    return tl.where(has_zero & (w == 0), SYM_ZERO, s)


@triton.jit
def enc_rans(
    words,      # *uint the input words
    rows,       # *i64  a codegen.rows RANS row per candidate payload
    freq,       # *i64  (T, N_SYMBOLS) clipped frequencies
    cum,        # *i64  (T, N_SYMBOLS) their exclusive prefix sums
    nzb,        # *i64  non-zero block indices of zero-block payloads
    counts,     # *i64  out: a codegen.rows COUNTS row per candidate
    scratch,    # *u8   out, at the row's offset: MAX_LANES u32 final states, then the words in emission order
    E: tl.constexpr, M: tl.constexpr, TOP: tl.constexpr, ITEMSIZE: tl.constexpr,          # the layout's constants
    MANMASK: tl.constexpr, LOWMASK: tl.constexpr, MAGMASK: tl.constexpr, MAX_FULL: tl.constexpr,
):
    # rANS is a stack: symbols go in last-first; within a round lane k-1 first.  The lanes are the
    # vector lanes; a lane whose state would overflow flushes 16 bits, placed by a suffix count.
    r_ = tl.program_id(0)
    row = rows + r_ * RR_WIDTH
    start = tl.load(row + RR_START)
    n = tl.load(row + RR_N_CODED)
    k = tl.load(row + RR_LANES)
    mode = tl.load(row + RR_MODE)
    nzb_at = tl.load(row + RR_NZB_AT)
    tab = tl.load(row + RR_TABLE)
    ref = tl.load(row + RR_REF)
    at = tl.load(row + RR_RANS_AT)
    lanes = tl.arange(0, MAX_LANES)
    zv = tl.zeros([MAX_LANES], tl.int64)
    live = lanes < k
    frow = freq + tab * N_SYMBOLS
    crow = cum + tab * N_SYMBOLS
    has_zero = tl.load(frow + SYM_ZERO) > 0
    x = zv + RANS_L
    cnt = tl.zeros([], tl.int64)
    n_sm = tl.zeros([], tl.int64)
    n_esc = tl.zeros([], tl.int64)
    rounds = (n + k - 1) // k
    for t in range(0, rounds):
        i = (rounds - 1 - t) * k + lanes
        active = live & (i < n)
        pos = _position(i, mode, nzb, nzb_at, active, zv)
        w = tl.load(words + start + pos, mask=active, other=0).to(tl.int64)
        s = _symbol(w, ref, frow, has_zero, active, M, TOP)
        n_sm += tl.sum((active & (s != SYM_ZERO)).to(tl.int64), 0)
        n_esc += tl.sum((active & (s == SYM_ESC)).to(tl.int64), 0)
        f = tl.load(frow + s, mask=active, other=1)
        cm = tl.load(crow + s, mask=active, other=0)
        emit = active & (x >= (f << RENORM_SHIFT))
        ei = emit.to(tl.int64)
        total = tl.sum(ei, 0)
        em = cnt + total - tl.cumsum(ei, 0)               # emission index: flushing lanes above this one first
        wat = at + 4 * MAX_LANES + 2 * em               # at most one word per value: n_coded words fit
        tl.store(scratch + wat, (x & 0xFF).to(tl.uint8), mask=emit & (em < n))
        tl.store(scratch + wat + 1, ((x >> 8) & 0xFF).to(tl.uint8), mask=emit & (em < n))
        cnt += total
        x = tl.where(emit, x >> 16, x)
        fs = tl.maximum(f, 1).to(tl.uint32)
        x32 = x.to(tl.uint32)                          # states stay below 2^32: 32-bit division suffices
        q = x32 // fs
        x = tl.where(active, (q.to(tl.int64) << PROB_BITS) + (x32 - q * fs).to(tl.int64) + cm, x)
    for b in tl.static_range(4):
        tl.store(scratch + at + 4 * lanes + b, ((x >> (8 * b)) & 0xFF).to(tl.uint8), mask=live)
    tl.store(counts + r_ * CT_WIDTH + CT_N_WORDS, cnt)
    tl.store(counts + r_ * CT_WIDTH + CT_N_SM, n_sm)
    tl.store(counts + r_ * CT_WIDTH + CT_N_ESC, n_esc)


@triton.jit
def enc_place(
    rows,       # *i64  a codegen.rows PLACE row per chosen candidate
    scratch,    # *u8   enc_rans's output
    out,        # *u8   the stream
    BLOCK: tl.constexpr,
    E: tl.constexpr, M: tl.constexpr, TOP: tl.constexpr, ITEMSIZE: tl.constexpr,          # the layout's constants
    MANMASK: tl.constexpr, LOWMASK: tl.constexpr, MAGMASK: tl.constexpr, MAX_FULL: tl.constexpr,
):
    r_ = tl.program_id(0)
    row = rows + r_ * PL_WIDTH
    at = tl.load(row + PL_RANS_AT)
    k = tl.load(row + PL_LANES)
    nw = tl.load(row + PL_N_WORDS)
    dst = tl.load(row + PL_STATES_AT)
    lanes = tl.arange(0, BLOCK)
    ok = lanes < 4 * k
    tl.store(out + dst + lanes, tl.load(scratch + at + lanes, mask=ok, other=0), mask=ok)
    for t in range(0, 2 * nw, BLOCK):
        j = t + lanes                                  # byte j of the stream's words: byte j & 1 of the
        ok = j < 2 * nw                                # word emitted (nw - 1 - j // 2)-th
        src = at + 4 * MAX_LANES + 2 * (nw - 1 - j // 2) + (j & 1)
        tl.store(out + dst + 4 * k + j, tl.load(scratch + src, mask=ok, other=0), mask=ok)


@triton.jit
def _store_le(out, at, v, nbytes: tl.constexpr):
    for b in tl.static_range(nbytes):
        tl.store(out + at + b, ((v >> (8 * b)) & 0xFF).to(tl.uint8))


@triton.jit
def enc_planes(
    words,      # *uint the input words
    rows,       # *i64  a codegen.rows PLANES row per chosen candidate
    freq,       # *i64  (T, N_SYMBOLS) clipped frequencies
    nzb,        # *i64  non-zero block indices of zero-block payloads
    out,        # *u8   the stream
    scratch,    # *u8   the remainder bits of each residual, one byte per value, before packing
    BLOCK: tl.constexpr,
    E: tl.constexpr, M: tl.constexpr, TOP: tl.constexpr, ITEMSIZE: tl.constexpr,          # the layout's constants
    MANMASK: tl.constexpr, LOWMASK: tl.constexpr, MAGMASK: tl.constexpr, MAX_FULL: tl.constexpr,
):
    r_ = tl.program_id(0)
    row = rows + r_ * PN_WIDTH
    start = tl.load(row + PN_START)
    n = tl.load(row + PN_N_CODED)
    mode = tl.load(row + PN_MODE)
    nzb_at = tl.load(row + PN_NZB_AT)
    tab = tl.load(row + PN_TABLE)
    ref = tl.load(row + PN_REF)
    shift = tl.load(row + PN_SHIFT)
    n_sm = tl.load(row + PN_N_SM)
    n_esc = tl.load(row + PN_N_ESC)
    n_words = tl.load(row + PN_N_WORDS)
    cb = tl.load(row + PN_CODEBOOK)
    pay_at = tl.load(row + PN_PAY_AT)
    plane_at = tl.load(row + PN_PLANE_AT)
    scratch_at = tl.load(row + PN_SCRATCH_AT)
    # the chunk head (codec.format.CHUNK_HEAD)
    _store_le(out, pay_at + CH_CODEBOOK, cb, 2)
    _store_le(out, pay_at + CH_REF, ref & 0xFFFF, 2)
    _store_le(out, pay_at + CH_SHIFT, shift, 1)
    _store_le(out, pay_at + CH_MODE, mode, 1)
    sign = tl.load(row + PN_SIGN)
    narrow = tl.load(row + PN_NARROW)
    _store_le(out, pay_at + CH_SIGN, sign, 1)
    _store_le(out, pay_at + CH_NARROW, narrow, 1)
    _store_le(out, pay_at + CH_N_SM, n_sm, 4)
    _store_le(out, pay_at + CH_N_ESC, n_esc, 4)
    _store_le(out, pay_at + CH_N_WORDS, n_words, 4)
    width = M - shift - (sign != SIGN_STORED).to(tl.int64) - narrow      # nor a sign the mode gives
    full = width // 8
    rem = width % 8
    esc_at = plane_at + full * n_sm + (n_sm * rem + 7) // 8
    lanes = tl.arange(0, BLOCK)
    zv = tl.zeros([BLOCK], tl.int64)
    frow = freq + tab * N_SYMBOLS
    has_zero = tl.load(frow + SYM_ZERO) > 0
    kk = tl.zeros([], tl.int64)
    ke = tl.zeros([], tl.int64)
    for t in range(0, n, BLOCK):
        i = t + lanes
        active = i < n
        pos = _position(i, mode, nzb, nzb_at, active, zv)
        w = tl.load(words + start + pos, mask=active, other=0).to(tl.int64)
        s = _symbol(w, ref, frow, has_zero, active, M, TOP)
        keep = active & (s != SYM_ZERO)
        ki = keep.to(tl.int64)
        kidx = kk + tl.cumsum(ki, 0) - ki
        isesc = active & (s == SYM_ESC)
        xi = isesc.to(tl.int64)
        eidx = ke + tl.cumsum(xi, 0) - xi
        res = (((w >> (E + M)) & 1) << (M - 1 - shift)) | ((w & LOWMASK) >> shift)
        for b in tl.static_range(MAX_FULL):
            tl.store(out + plane_at + b * n_sm + kidx, ((res >> (8 * b)) & 0xFF).to(tl.uint8),
                     mask=keep & ((zv + full) > b))
        tl.store(scratch + scratch_at + kidx, ((res >> (8 * full)) & 0xFF).to(tl.uint8), mask=keep & ((zv + rem) > 0))
        ev = (((w >> M) & TOP) << 1) | ((w >> (M - 1)) & 1)
        tl.store(out + esc_at + 2 * eidx, (ev & 0xFF).to(tl.uint8), mask=isesc)
        tl.store(out + esc_at + 2 * eidx + 1, ((ev >> 8) & 0xFF).to(tl.uint8), mask=isesc)
        kk += tl.sum(ki, 0)
        ke += tl.sum(xi, 0)
    tl.debug_barrier()                                 # the scratch bytes of every thread are written
    # pack the remainder bits little-endian: bit p of the plane is bit p % rem of residual p // rem
    # (positions inside one chunk's plane: 32-bit arithmetic, whose division a GPU does far faster)
    n_bytes = (n_sm * rem + 7) // 8
    remd = tl.maximum(rem, 1).to(tl.int32)
    n_sm32 = n_sm.to(tl.int32)
    src = scratch + scratch_at
    dst = out + plane_at + full * n_sm
    for t in range(0, n_bytes, BLOCK):
        j = (t + lanes).to(tl.int32)
        inside = j < n_bytes
        acc = tl.zeros([BLOCK], tl.int32)
        for bit in tl.static_range(8):
            p = 8 * j + bit
            v = p // remd
            ok = inside & (v < n_sm32)
            byte = tl.load(src + v, mask=ok, other=0).to(tl.int32)
            acc = acc | (((byte >> (p - v * remd)) & 1) << bit)
        tl.store(dst + j, acc.to(tl.uint8), mask=inside)


@triton.jit
def enc_copy(
    words,      # *uint the input words
    rows,       # *i64  a codegen.rows COPY row per RAW/CONST chunk (RAW: every word, CONST: the first)
    out,        # *u8   the stream
    BLOCK: tl.constexpr,
    E: tl.constexpr, M: tl.constexpr, TOP: tl.constexpr, ITEMSIZE: tl.constexpr,          # the layout's constants
    MANMASK: tl.constexpr, LOWMASK: tl.constexpr, MAGMASK: tl.constexpr, MAX_FULL: tl.constexpr,
):
    r_ = tl.program_id(0)
    row = rows + r_ * CP_WIDTH
    start = tl.load(row + CP_START)
    n = tl.load(row + CP_N)
    pay_at = tl.load(row + CP_PAY_AT)
    kind = tl.load(row + CP_KIND)
    n = tl.where(kind == KIND_CONST, 1, n)
    lanes = tl.arange(0, BLOCK)
    for t in range(0, n, BLOCK):
        i = t + lanes
        ok = i < n
        w = tl.load(words + start + i, mask=ok, other=0).to(tl.int64)
        for b in tl.static_range(ITEMSIZE):
            tl.store(out + pay_at + ITEMSIZE * i + b, ((w >> (8 * b)) & 0xFF).to(tl.uint8), mask=ok)


@triton.jit
def dec_copy(
    buf,        # *u8   the stream
    rows,       # *i64  a codegen.rows DEC_COPY row per RAW/CONST chunk
    out,        # *uint output words
    BLOCK: tl.constexpr,
    E: tl.constexpr, M: tl.constexpr, TOP: tl.constexpr, ITEMSIZE: tl.constexpr,          # the layout's constants
    MANMASK: tl.constexpr, LOWMASK: tl.constexpr, MAGMASK: tl.constexpr, MAX_FULL: tl.constexpr,
):
    r_ = tl.program_id(0)
    row = rows + r_ * DC_WIDTH
    out_at = tl.load(row + DC_OUT_AT)
    n = tl.load(row + DC_N)
    pay_at = tl.load(row + DC_PAY_AT)
    step = tl.where(tl.load(row + DC_KIND) == KIND_CONST, 0, ITEMSIZE)
    lanes = tl.arange(0, BLOCK)
    for t in range(0, n, BLOCK):
        i = t + lanes
        ok = i < n
        w = tl.zeros([BLOCK], tl.int64)
        for b in tl.static_range(ITEMSIZE):
            w = w | (tl.load(buf + pay_at + step * i + b, mask=ok, other=0).to(tl.int64) << (8 * b))
        tl.store(out + out_at + i, w.to(out.dtype.element_ty), mask=ok)
