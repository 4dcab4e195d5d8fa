"""The numba backend's SIMD paths (16-lane rANS rounds, fused value assembly, chunk pairs) against
the reference: chunks of >= 16384 values (16 or 32 lanes), every residual shape (byte planes,
packed remainder bits, shifted-out low bits), escapes, ZERO symbols and zero blocks, odd chunk
counts and partial last chunks; plus mutated and truncated streams."""
import zlib

import numpy as np
import pytest

import codec
import reference
from codec.layouts import layout_for
from tests.helpers import DTYPES, assert_bit_equal, bits, np_dtype


def _seed(*key) -> int:
    """A seed fixed by ``key`` in every process (``hash`` of a string changes with PYTHONHASHSEED)."""
    return zlib.crc32(repr(key).encode())


def _variant(kind, dtype, n, seed):
    rng = np.random.default_rng(seed)
    lay = layout_for(np_dtype(dtype))
    x = rng.normal(0, 0.02, n).astype(np_dtype(dtype))
    w = bits(x).copy()
    if kind == "shifted":             # low mantissa bits all zero: the residual plane narrows
        drop = {1: 1, 2: 2, 4: 7}[lay.itemsize]
        w &= ~np.array((1 << drop) - 1, dtype=w.dtype)
    elif kind == "shifted_bytes":     # residual exactly a whole number of bytes (no remainder bits)
        drop = {1: 0, 2: lay.man_bits - 7 if lay.man_bits > 7 else 0, 4: lay.man_bits - 15}[lay.itemsize]
        w &= ~np.array((1 << drop) - 1, dtype=w.dtype)
    elif kind == "escapes":           # huge, tiny, subnormal, inf/nan: outside the exponent window
        idx = rng.choice(n, n // 500, replace=False)
        with np.errstate(over="ignore"):        # 1e38 overflows to inf in float16 / fp8: fine
            specials = np.array([3e4, -1e-6, 1e-30, np.inf, -np.nan, 1e38], np.float64).astype(np_dtype(dtype))
        w[idx] = bits(specials)[rng.integers(0, len(specials), len(idx))]
    elif kind == "low_entropy":       # few rANS words: the SIMD rounds stop early, scalar rounds finish
        one = bits(np.array([1.0, 1.5], np.float64).astype(np_dtype(dtype)))
        w[:] = one[0]
        w[rng.choice(n, n // 300, replace=False)] = one[1]
    elif kind == "zeros":             # scattered zeros (ZERO symbols) and some all-zero blocks
        w[rng.choice(n, n // 8, replace=False)] = 0
        for b in rng.choice(n // 64, n // 640, replace=False):
            w[b * 64:(b + 1) * 64] = 0
    elif kind == "sparse_zeros":      # rare zeros, and all-zero 16-blocks in the second half only:
        w[rng.choice(n, n // 400, replace=False)] = 0       # mostly zero-free groups of 16, chunks
        for b in rng.choice(np.arange(n // 32, n // 16), n // 160, replace=False):   # without and with
            w[b * 16:(b + 1) * 16] = 0                      # a zero-block bitmap
    return w.view(np_dtype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["dense", "shifted", "shifted_bytes", "escapes", "low_entropy", "zeros",
                                  "sparse_zeros"])
@pytest.mark.parametrize("chunk_size", [16384, 65536])
def test_large_chunks_match_reference(dtype, kind, chunk_size):
    # 3 full chunks (a pair and a single) and a partial one
    n = 3 * chunk_size + 12345
    x = _variant(kind, dtype, n, seed=_seed(dtype, kind, chunk_size))
    ref = codec.encode(x, chunk_size=chunk_size, backend="reference")
    fast = codec.encode(x, chunk_size=chunk_size, backend="numba")
    assert fast == ref
    assert {c["kind"] for c in codec.inspect(ref)["chunks"]} == {"coded"}
    assert_bit_equal(codec.decode(ref, backend="numba"), x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sign", ["positive", "negative"])
def test_one_signed_chunks_match_reference(dtype, sign):
    """Chunks whose values share one sign store no sign bits: the residual plane is one bit narrower
    (positive chunks take the decoder's per-dtype residual readers, specialised on the plane's literal
    layout; negative chunks the generic reader with the sign put back)."""
    n = 2 * 65536 + 4321
    w = bits(_variant("dense", dtype, n, seed=_seed(dtype, sign))).copy()
    top = np.array(1 << (8 * w.itemsize - 1), dtype=w.dtype)
    w = w | top if sign == "negative" else w & ~top
    x = w.view(np_dtype(dtype))
    ref = codec.encode(x, backend="reference")
    assert codec.encode(x, backend="numba") == ref
    assert {c["kind"] for c in codec.inspect(ref)["chunks"]} == {"coded"}
    assert_bit_equal(codec.decode(ref, backend="numba"), x)


def _with_zeros(rng, x, how):
    """``x`` with +0 values placed ``how``: a fraction, or a pattern that stresses the SIMD groups."""
    w = bits(x).copy()
    n = len(w)
    if isinstance(how, float):
        w[rng.random(n) < how] = 0
    elif how == "every_count":        # group g of 16 holds g % 17 zeros at random lanes
        for g in range(n // 16):
            w[16 * g + rng.choice(16, g % 17, replace=False)] = 0
    elif how == "end":                # zero-free until the last 100 values, then mostly zero
        w[-100:][rng.random(100) < 0.7] = 0
    elif how == "one_left":           # all +0 but a few values (fewer residuals than a group)
        keep = rng.choice(n, 5, replace=False)
        w[np.setdiff1d(np.arange(n), keep)] = 0
    elif how == "negative_zero":      # -0 is not ZERO: it keeps its sign in the residual
        w[rng.random(n) < 0.3] = 0
        w[rng.random(n) < 0.2] = np.array(1 << (8 * w.itemsize - 1), dtype=np.uint64).astype(w.dtype)
    elif how == "with_escapes":       # ZERO and ESC lanes in the same groups
        w[rng.random(n) < 0.3] = 0
        w[rng.choice(n, n // 50, replace=False)] = bits(np.array([np.inf], np.float32).astype(x.dtype))[0]
    return w.view(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("how", [0.001, 0.5, 0.9, 0.999, "every_count", "end", "one_left", "negative_zero",
                                 "with_escapes"])
def test_chunks_with_zero_symbols_match_reference(dtype, how):
    """+0 values (ReLU outputs, sums that cancel, pruned weights) are ZERO symbols with no residual:
    the SIMD passes compress them out of the residual plane (encoder) and expand the residuals back
    around them (decoder), for every residual shape; same bytes as the reference."""
    rng = np.random.default_rng(_seed(dtype, str(how)))
    for n, drop in ((16384 + 16 * 40 + 7, 0), (65536, 0), (16384 + 3, 3)):
        x = rng.normal(0, 0.02, n).astype(np_dtype(dtype))
        w = bits(x).copy()
        w &= ~np.array((1 << min(drop, layout_for(x.dtype).man_bits - 1)) - 1, dtype=w.dtype)
        x = _with_zeros(rng, w.view(x.dtype), how)
        ref = codec.encode(x, chunk_size=65536, backend="reference")
        assert codec.encode(x, chunk_size=65536, backend="numba") == ref, (n, drop)
        assert_bit_equal(codec.decode(ref, backend="numba"), x)


@pytest.mark.parametrize("dtype", ["bfloat16"] + [pytest.param(d, marks=pytest.mark.slow) for d in ("float16", "float32")])
def test_chunks_with_rare_zeros_fail_as_the_reference(dtype):
    """A chunk with ZERO symbols and no zero blocks (a sum's rare cancellations) has its values assembled
    in the SIMD rounds, escapes included; a forged escape (a field past the exponent range), a header
    claiming fewer escapes, and flipped bits in the plane and escapes end as the reference ends, and
    all-negative chunks (the sign put back) decode as the reference."""
    from codec import format as fmt

    rng = np.random.default_rng(_seed(dtype, "rare_zeros"))
    n = 2 * 65536 + 5000
    x = _with_zeros(rng, _variant("escapes", dtype, n, seed=_seed(dtype, "rz")), 0.002)
    neg = (bits(x) | np.array(1 << (8 * bits(x).itemsize - 1), dtype=bits(x).dtype))
    neg[bits(x) == 0] = 0
    for y in (x, neg.view(x.dtype)):
        blob = codec.encode(y)
        assert blob == codec.encode(y, backend="reference")
        chunk = codec.inspect(blob)["chunks"][0]
        assert chunk["kind"] == "coded" and chunk["zeros"] > 0 and chunk["zero_block_size"] == 0
        assert_bit_equal(codec.decode(blob, backend="numba"), y)
    good = codec.encode(x)
    h = fmt.parse_header(good)
    a, b = h.chunk_span(0)
    hd = fmt.CHUNK_HEAD.unpack_from(good, a)
    assert hd.n_esc > 2
    forged = []
    for k in (0, hd.n_esc // 2, hd.n_esc - 1):             # an escape whose field is past the range
        blob = bytearray(good)
        blob[b - 2 * hd.n_esc + 2 * k + 1] = 0xFF
        forged.append(bytes(blob))
    blob = bytearray(good)                                  # one escape fewer, one word more
    fmt.CHUNK_HEAD.pack_into(blob, a, **hd._replace(n_esc=hd.n_esc - 1, n_words=hd.n_words + 1)._asdict())
    forged.append(bytes(blob))
    for _ in range(20):
        blob = bytearray(good)
        for pos in rng.integers(b - 2 * hd.n_esc - 4000, b, 1 + int(rng.integers(3))):
            blob[pos] ^= 1 << int(rng.integers(8))
        forged.append(bytes(blob))
    for blob in forged:
        assert _outcome(blob, "numba") == _outcome(blob, "reference")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_rare_and_common_zeros_take_their_own_paths(dtype):
    """Chunks with ZERO symbols and no zero blocks: where ZERO and ESC are rare (a sum's cancellations) the
    rounds assemble values as in a dense chunk, reading residuals from any index, and redo a group with
    a ZERO or ESC lane (dense 3); where they are common (ReLU outputs), the window path (dense 2).  Both
    give the reference's values, with ZERO and ESC lanes in one group, escapes in zero-free groups and
    values past the rounds' safe range."""
    from codec import _numba

    rng = np.random.default_rng(_seed(dtype, "paths"))
    n = 2 * 65536 + 999
    for frac, path in ((0.0005, 3), (0.003, 3), (0.3, 2)):
        x = _variant("escapes", dtype, n, seed=_seed(dtype, frac))       # ESC: 1 value in 500
        x = _with_zeros(rng, x, frac)
        w = bits(x).copy()
        w[16 * 7:16 * 7 + 16:3] = 0                                       # group 7: ZERO and ESC lanes
        w[16 * 7 + 1] = bits(np.array([np.inf], np.float32).astype(x.dtype))[0]
        x = w.view(x.dtype)
        blob = codec.encode(x, chunk_size=65536)
        assert blob == codec.encode(x, chunk_size=65536, backend="reference")
        assert [_numba.chunk_path(blob, i) for i in range(2)] == [path] * 2, frac
        assert_bit_equal(codec.decode(blob, backend="numba"), x)


# ~7 s a dtype on Zen 3: bfloat16 in the README's run, the others in CI's slow step
@pytest.mark.parametrize("dtype", [d if d == "bfloat16" else pytest.param(d, marks=pytest.mark.slow) for d in DTYPES])
def test_zero_block_candidates_against_the_plain_payload(dtype):
    """Where zero-block candidates exist the encoder codes them first and the plain payload last, stopping
    its rANS rounds once it cannot be the smallest: over a sweep of zero patterns (all-zero 16-value
    blocks from 3.5 % to 99 %, none to half of the rest scattered zeros) the plain payload wins some chunks and a candidate
    others, and every chunk is the reference's, byte for byte."""
    rng = np.random.default_rng(DTYPES.index(dtype))
    n = 16384 + 48
    seen = set()
    for frac in (0.035, 0.05, 0.08, 0.12, 0.2, 0.35, 0.5, 0.7, 0.9, 0.97, 0.99):
        for scattered in (0.0, 0.1, 0.5):     # many scattered zeros make each one cheap: the plain one wins
            w = bits(rng.normal(0, 0.02, n).astype(np_dtype(dtype))).copy()
            w[rng.random(n) < scattered] = 0
            blocks = rng.random(-(-n // 16)) < frac
            w[np.repeat(blocks, 16)[:n]] = 0
            x = w.view(np_dtype(dtype))
            ref = codec.encode(x, chunk_size=n, backend="reference")
            assert codec.encode(x, chunk_size=n, backend="numba") == ref, (frac, scattered)
            seen.add(codec.inspect(ref)["chunks"][0].get("zero_block_size", 0))
    assert 0 in seen and len(seen) > 1, seen          # both the plain payload and a candidate won somewhere


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_differing_value_anywhere_makes_a_chunk_not_constant(dtype):
    """The constant-chunk check compares 64 values a block, then the tail one at a time: one word
    that differs (a bit pattern, -0 against +0, or a NaN payload) at a block's first or last place,
    in the tail, or in the first block makes the chunk coded, not CONST; same bytes as the reference."""
    n = 64 * 5 + 17
    word = bits(np.array([0.0, -0.0, 1.5], np.float64).astype(np_dtype(dtype)))
    for base, other in ((word[0], word[1]), (word[2], word[2] ^ 1), (word[0], word[2])):
        for at in (0, 1, 63, 64, 127, 64 * 5 - 1, 64 * 5, n - 1):
            w = np.full(n, base, dtype=word.dtype)
            w[at] = other
            x = w.view(np_dtype(dtype))
            ref = codec.encode(x, chunk_size=n, backend="reference")
            assert codec.inspect(ref)["chunks"][0]["kind"] != "const", at
            assert codec.encode(x, chunk_size=n, backend="numba") == ref, (base, other, at)
            assert_bit_equal(codec.decode(ref, backend="numba"), x)
        x = np.full(n, base, dtype=word.dtype).view(np_dtype(dtype))
        ref = codec.encode(x, chunk_size=n, backend="reference")
        assert codec.inspect(ref)["chunks"][0]["kind"] == "const"
        assert codec.encode(x, chunk_size=n, backend="numba") == ref


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_every_tail_length_and_remainder_width(dtype):
    # a 16-lane chunk whose length is not a multiple of 16 ends in up to 15 values coded one at a
    # time; their packed remainder bits (1..7 each: up to 105 bits) must not overflow an accumulator
    rng = np.random.default_rng(23)
    drops = range(min(8, layout_for(np_dtype(dtype)).man_bits))         # every remainder width 0..7
    for drop, tail in [(0, t) for t in range(16)] + [(d, t) for d in drops for t in (9, 13, 15)]:
        x = rng.normal(0, 0.02, 16384 + tail).astype(np_dtype(dtype))
        w = bits(x).copy()
        w &= ~np.array((1 << drop) - 1, dtype=w.dtype)
        x = w.view(x.dtype)
        ref = codec.encode(x, chunk_size=65536, backend="reference")
        assert codec.inspect(ref)["chunks"][0]["dropped_mantissa_bits"] == drop
        assert codec.encode(x, chunk_size=65536, backend="numba") == ref, (drop, tail)
        assert_bit_equal(codec.decode(ref, backend="numba"), x)


@pytest.mark.parametrize("dtype", [d if d == "bfloat16" else pytest.param(d, marks=pytest.mark.slow) for d in DTYPES])
@pytest.mark.parametrize("kind", ["dense", "shifted", "escapes"])
def test_chunks_of_fewer_than_16_lanes_match_reference(dtype, kind):
    # chunks of < 16384 values have 1-8 rANS lanes: their rounds go one lane at a time (8 lanes: as one
    # masked 16-lane step), and a dense chunk's values are then assembled 16 at a time (escaped lanes
    # included), the last few one by one
    for n in (17, 100, 2047, 2048, 5000, 9001, 16383):
        x = _variant(kind, dtype, n, seed=_seed(dtype, kind, n))
        ref = codec.encode(x, backend="reference")
        assert codec.encode(x, backend="numba") == ref, n
        assert_bit_equal(codec.decode(ref, backend="numba"), x)
        chunk = codec.inspect(ref)["chunks"][0]
        if kind == "escapes" and chunk["kind"] == "coded" and chunk["escapes"]:
            # the last escape (a stream's last two bytes) forged out of the exponent range: the same
            # error from both backends, wherever in the 16-value groups that escape falls
            bad = bytearray(ref)
            bad[-2:] = b"\xff\xff"
            with pytest.raises(codec.FormatError) as want:
                codec.decode(bytes(bad), backend="reference")
            with pytest.raises(codec.FormatError) as got:
                codec.decode(bytes(bad), backend="numba")
            assert str(got.value) == str(want.value)


def _outcome(blob, backend):
    """What decoding ``blob`` gives: the values' bits, or the FormatError's message."""
    try:
        return bits(codec.decode(blob, backend=backend)).tobytes()
    except codec.FormatError as e:
        return str(e)


@pytest.mark.parametrize("dtype", [d if d == "bfloat16" else pytest.param(d, marks=pytest.mark.slow)
                                   for d in ("bfloat16", "float16", "float32")])
def test_forged_chunks_of_fewer_than_16_lanes_fail_as_the_reference(dtype):
    # 8-lane chunks (their rounds as masked 16-lane steps, their values 16 at a time): a header claiming one
    # word fewer makes the rounds read past the words, and flipped bits anywhere in the words, the
    # plane or the escapes change states, refills and values; either way numba must end as the
    # reference does
    from codec import format as fmt

    rng = np.random.default_rng(_seed(dtype, "forged8"))
    for n in (8192, 12000, 16383):
        x = _variant("escapes", dtype, n, seed=_seed(dtype, n))
        good = codec.encode(x)
        blob = bytearray(good)
        h = fmt.parse_header(blob)
        a = h.payload_start
        hd = fmt.CHUNK_HEAD.unpack_from(blob, a)
        assert fmt.lanes(n) == 8 and hd.n_words > 1
        fmt.CHUNK_HEAD.pack_into(blob, a, **hd._replace(n_esc=hd.n_esc + 1, n_words=hd.n_words - 1)._asdict())
        want = _outcome(bytes(blob), "reference")
        assert not isinstance(want, bytes)
        assert _outcome(bytes(blob), "numba") == want
        for _ in range(12 if dtype == "bfloat16" else 40):     # (the README's run: bf16, fewer flips)
            b = bytearray(good)
            for pos in rng.integers(a + fmt.CHUNK_HEAD.size, len(b), 1 + int(rng.integers(3))):
                b[pos] ^= 1 << int(rng.integers(8))
            assert _outcome(bytes(b), "numba") == _outcome(bytes(b), "reference")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_mutations_in_large_chunks(dtype):
    x = _variant("escapes", dtype, 2 * 65536 + 777, seed=7)
    good = codec.encode(x)
    good_crc = codec.encode(x, checksum=True)
    rng = np.random.default_rng(1)
    for trial in range(60):
        for blob, checked in ((good, False), (good_crc, True)):
            b = bytearray(blob)
            for pos in rng.integers(len(b) // 10, len(b), 1 + trial % 4):
                b[pos] ^= 1 << int(rng.integers(8))
            try:
                y = codec.decode(bytes(b))
            except codec.FormatError:
                continue
            assert not checked, "a corrupted stream with checksums decoded"
            assert bits(y).shape == bits(x).shape


def test_truncated_large_chunk():
    x = _variant("dense", "bfloat16", 65536, seed=3)
    blob = codec.encode(x)
    for cut in (1, 2, 7, 64, 1000, len(blob) // 2):
        with pytest.raises(codec.FormatError):
            codec.decode(blob[:-cut])


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("checksum", [False, True])
def test_grouped_encode_in_place(monkeypatch, checksum, threads):
    # the numba backend codes chunks straight into the output (thread 0, from a window's front) or into
    # scratch (the others, from its back; copied into place during the next window), in windows that
    # bound the scratch: halves of 3 chunks, 8 chunks -> windows of 4 and 4 with 2 threads (the helper
    # codes at most 3 from the back), of 2 with 3 threads (2 back chunks + 1 for the helpers' race)
    import codec._numba

    monkeypatch.setattr(codec._numba, "SCRATCH_BYTES", 6 * 16384 * 2)
    x = _variant("escapes", "bfloat16", 7 * 16384 + 99, seed=11)
    before = codec.get_num_threads()
    codec.set_num_threads(threads)          # own threads: 2 work on a 1-CPU machine too
    try:
        fast = codec.encode(x, chunk_size=16384, checksum=checksum)
        kinds, payloads = codec._numba.encode_chunks(x.view(np.uint16), layout_for(x.dtype), 16384)
    finally:
        codec.set_num_threads(before)
    assert isinstance(fast, bytearray)
    assert fast == codec.encode(x, chunk_size=16384, checksum=checksum, backend="reference")
    ref_kinds, ref_payloads = reference.encode_chunks(x.view(np.uint16), layout_for(x.dtype), 16384)
    assert np.array_equal(kinds, ref_kinds) and [bytes(p) for p in payloads] == [bytes(p) for p in ref_payloads]
    assert_bit_equal(codec.decode(fast), x)


@pytest.mark.parametrize("threads", [2, 3, 4, 8])
def test_encode_windows_are_equal_and_fit_the_scratch(monkeypatch, threads):
    """encode_into's windows: equal sizes (the last short by less than the window count), never more
    chunks than the helpers' scratch halves can take their expected share of, and about as many
    windows as the target size gives (not one more per short remainder)."""
    from codec import _numba as N

    monkeypatch.setattr(N, "SCRATCH_BYTES", 40 * 16384 * 2)
    raw = 16384 * 2
    for n_chunks in range(1, 400):
        back, win = N._windows(n_chunks, raw, threads)
        assert back == 20 - (threads - 2)
        cap = back * threads // (threads - 1)
        n_win = -(-n_chunks // win)
        assert 1 <= win <= cap, (n_chunks, win)
        assert n_chunks - (n_win - 1) * win > win - n_win, (n_chunks, win)     # the last window is not short
        target = back * threads // (threads - 1) * 15 // 16
        assert n_win <= max(1, round(n_chunks / target)) + 1
    assert N._windows(0, raw, 1)[1] == 1 and N._windows(7, raw, 1)[1] == 7      # one thread: one window


def test_encode_window_helpers_stop_when_their_scratch_is_full():
    """A helper thread codes a window's chunks from the back into scratch only while it has room; thread 0
    (here running after it, as when it is descheduled) codes the rest in place: same payloads as the
    reference wherever each chunk was coded."""
    from codec import _numba as N

    lay = layout_for(np_dtype("bfloat16"))
    x = _variant("escapes", "bfloat16", 5 * 16384, seed=12)
    words = x.view(np.uint16)
    raw = 16384 * 2
    dst = np.zeros(len(words) * 2, np.uint8)
    scratch = np.zeros(3 * raw, np.uint8)
    kinds = np.zeros(5, np.uint8)
    sizes = np.zeros(5, np.int64)
    ctl = np.zeros(32, np.int64)
    ctl[N._THREADS] = 2
    consts = (N._readonly(words), 16384, 2, lay.exp_bits, lay.man_bits, lay.has_inf, *N._family64(),
              N.explicit_tables(N.fmt.WRITE_VERSION))
    none = np.empty(0, np.int64)
    N._encode_window(1, *consts, 0, 5, dst, 0, scratch, scratch, 0, 0, none, kinds, sizes, ctl)
    assert ctl[N._BACK] == 3                         # chunks 4, 3, 2, then no room
    N._encode_window(0, *consts, 0, 5, dst, 0, scratch, scratch, 0, 0, none, kinds, sizes, ctl)
    ref_kinds, ref_payloads = reference.encode_chunks(words, lay, 16384)
    assert np.array_equal(kinds, ref_kinds)
    front = dst[:sizes[0] + sizes[1]].tobytes()
    assert front == b"".join(bytes(p) for p in ref_payloads[:2])
    for b, c in enumerate((4, 3, 2)):
        assert scratch[b * raw:b * raw + sizes[c]].tobytes() == bytes(ref_payloads[c]), c


@pytest.mark.parametrize("exp_bits,has_inf", [(8, True), (5, True), (4, False)])
def test_decoder_tables_never_yield_a_field_outside_the_exponent_range(exp_bits, has_inf):
    # the fused SIMD value assembly checks only for ESC/ZERO lanes: it relies on every window symbol
    # of a field outside [0, 2^E) having zero frequency in the tables the numba decoder builds
    from codec import _numba, codebook as cbk

    fam = cbk.load_family()
    freqs = np.ascontiguousarray(fam.freqs, dtype=np.int64)
    f = np.empty(cbk.N_SYMBOLS, np.int64)
    cum = np.empty(cbk.N_SYMBOLS + 1, np.int64)
    top = (1 << exp_bits) - 1
    for cb in range(0, len(freqs), 7):
        for ref in range(-80, top + 80, 3):
            _numba._tables(freqs, cb, ref, exp_bits, has_inf, f, cum)
            if cb % 49 == 0:                # the specification (slow in Python: a sample)
                assert np.array_equal(f, cbk.clip_to_dtype(freqs[cb], ref, exp_bits, has_inf))
            for j in range(cbk.WINDOW):
                field = ref - cbk.WINDOW_LOW + j
                if not 0 <= field <= top:
                    assert f[cbk.SYM_WINDOW0 + 2 * j] == 0 and f[cbk.SYM_WINDOW0 + 2 * j + 1] == 0, (cb, ref, field)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_forged_word_count_is_caught_after_the_simd_rounds(dtype):
    # the SIMD rounds may run until the words' end; a header that claims one word fewer (and one
    # escape more, so the sizes still add up) makes them read past it: that must be an error
    from codec import format as fmt

    x = _variant("dense", dtype, 65536, seed=5)
    blob = bytearray(codec.encode(x, chunk_size=65536))
    h = fmt.parse_header(blob)
    a = h.payload_start
    hd = fmt.CHUNK_HEAD.unpack_from(blob, a)
    fmt.CHUNK_HEAD.pack_into(blob, a, **hd._replace(n_esc=hd.n_esc + 1, n_words=hd.n_words - 1)._asdict())
    for backend in ("numba", "reference"):
        with pytest.raises(codec.FormatError, match="chunk 0: "):
            codec.decode(bytes(blob), backend=backend)


def _widest_vectors(expected: str | None = None) -> str:
    """The vector registers the numba kernels should use: ``ZIPCCL_EXPECT_ISA`` (set by .ci/run's
    cross-ISA steps, which compile for another CPU with NUMBA_CPU_NAME), else the host's widest."""
    import os

    from llvmlite import binding as ll
    from numba.core import config

    want = os.environ.get("ZIPCCL_EXPECT_ISA", expected)
    if want is None:
        assert config.CPU_NAME is None, "NUMBA_CPU_NAME is set: say which ISA to expect in ZIPCCL_EXPECT_ISA"
        feats = ll.get_host_cpu_features()
        want = "avx512" if feats.get("avx512f") else "avx2" if feats.get("avx2") else "sse2"
    return want


def test_kernels_are_compiled_for_the_expected_instruction_set():
    """A kernel step (16 lanes of u32 = 512 bits) compiles to ymm registers and no zmm on AVX2, and to xmm
    alone on baseline x86-64: proof that a cross-ISA run (NUMBA_CPU_NAME) really tests that ISA's code."""
    import platform
    import re

    from numba import njit

    from codec._simd import fill16

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("register names checked on x86-64 only")

    @njit(cache=False)
    def step(tab, c):
        fill16(tab, 0, c)

    tab = np.zeros(16, np.uint32)
    step(tab, 5)
    assert np.array_equal(tab, 5 + (np.arange(16, dtype=np.uint32) << 7))
    asm = next(iter(step.inspect_asm().values()))
    regs = {r: len(re.findall("%" + r + r"\d", asm)) for r in ("zmm", "ymm", "xmm")}
    want = _widest_vectors()
    assert want in ("avx512", "avx2", "sse2"), want
    if want == "avx512":
        # zmm where LLVM keeps 512-bit vectors whole; CPUs tuned "prefer 256-bit" (Intel's server cores)
        # may split them into ymm: either is this host's code
        assert regs["zmm"] + regs["ymm"] > 0, (want, regs)
    else:
        assert regs["zmm"] == 0, (want, regs)                  # nothing of AVX-512 on an AVX2 or SSE2 target
        assert (regs["ymm"] > 0) == (want == "avx2"), (want, regs)


def test_stream_moves_compile_to_the_chosen_instructions():
    """The variant of the rounds' stream moves (codec._simd.STREAM_MOVES) is the one the compile target
    calls for (register forms with AVX-512 VBMI2: the memory forms are microcoded on AMD Zen 4/5;
    pshufb shuffles with AVX2 but no VBMI2), or the one ZIPCCL_STREAM_MOVES forces, and the compiled
    encoder round uses those instructions."""
    import os
    import platform
    import re

    from numba import njit

    from codec import _simd

    feats = _simd._target_features().split(",")
    want = os.environ.get("ZIPCCL_STREAM_MOVES") or (
        "register" if "+avx512vbmi2" in feats else "shuffle" if "+avx2" in feats else "memory")
    assert _simd.STREAM_MOVES == want

    @njit(cache=False)
    def push(x, sym, ftab, wbuf):
        return _simd.rans_encode16(x, 0, sym, 0, ftab, wbuf, 64, _simd.LANES)

    sym = (np.arange(16) % 5 == 0).astype(np.uint8)                          # lanes 0, 5, 10, 15: symbol 1
    ftab = np.where(np.arange(256) == 1, 1 << 11, 1).astype(np.uint32)       # f = 2^11: flush from 2^31
    x = np.where(sym == 1, 1 << 30, 1 << 31).astype(np.uint32) + 7 * np.arange(16, dtype=np.uint32)
    wbuf = np.zeros(64, np.uint16)
    pos = push(x.copy(), sym, ftab, wbuf)
    flushed = x[sym == 0] & 0xFFFF                                           # in lane order, below pos
    below = 8 if want == "shuffle" else 0          # the shuffle stores may write 8 words below pos
    assert pos == 64 - len(flushed) and np.array_equal(wbuf[pos:], flushed) and not wbuf[:pos - below].any()
    if platform.machine() not in ("x86_64", "AMD64"):
        return
    asm = next(iter(push.inspect_asm().values()))
    memory_form = re.search(r"vpcompressw\s+%[xyz]mm\d+, [^%\s]*\(", asm)
    register_form = re.search(r"vpcompressw\s+%[xyz]mm\d+, %[xyz]mm\d+", asm)
    if want == "shuffle":
        assert re.search(r"\bv?pshufb\s", asm) and not memory_form and not register_form, want
    elif "+avx512vbmi2" in feats:
        assert (register_form and not memory_form) if want == "register" else (memory_form and not register_form), want


@pytest.mark.parametrize("vendor, gds, want", [
    ("GenuineIntel", "Not affected\n", True),                 # Sapphire Rapids and later, client cores
    ("GenuineIntel", "Vulnerable: No microcode\n", True),     # affected, microcode without the mitigation
    ("GenuineIntel", "Vulnerable\n", True),                   # mitigation switched off
    ("GenuineIntel", "Mitigation: Microcode\n", False),       # Ice Lake .. Tiger Lake with the mitigation
    ("GenuineIntel", "Mitigation: Microcode (locked)\n", False),
    ("GenuineIntel", "Unknown: Dependent on hypervisor status\n", False),
    ("GenuineIntel", None, False),                            # kernel too old to report
    ("AuthenticAMD", "Not affected\n", False),                # Zen 4/5: gathers slow, permutes fast
    ("HygonGenuine", "Not affected\n", False),
])
def test_gathers_preferred_per_cpu(vendor, gds, want):
    """Which CPUs take gathers for the table lookups although they have the permutes' VBMI."""
    from codec import _simd

    assert _simd.gathers_preferred(vendor, gds) is want
    assert _simd.default_variant(["permute", "gather"], "gather" if want else None) == ("gather" if want else "permute")
    assert _simd.default_variant(["gather"], "gather" if want else None) == "gather"
    assert _simd.default_variant(["loads", "gather"], "gather" if want else None) == ("gather" if want else "loads")


def test_other_variant_is_one_the_target_runs_besides_the_chosen():
    from codec import _simd

    assert _simd.other_variant(["register", "shuffle", "memory"], "register") == "memory"
    assert _simd.other_variant(["permute", "gather"], "gather") == "permute"
    assert _simd.other_variant(["permute", "gather"], "permute") == "gather"
    assert _simd.other_variant(["gather"], "gather") is None
    assert _simd.other_variant(["loads", "gather"], "loads") == "gather"


def test_table_lookups_compile_to_the_chosen_instructions():
    """The variant of the rounds' table lookups (codec._simd.TABLE_LOOKUPS) is the one the compile target
    calls for (permutes with AVX-512 VBMI: a 16-lane gather costs about 14 cycles on AMD Zen 5; gathers
    on Intel parts whose gathers are fast, see test_gathers_preferred_per_cpu), or the
    one ZIPCCL_TABLE_LOOKUPS forces; the encoder's (codec._simd.ENCODE_LOOKUPS) permutes wherever the
    target has them.  The ranked encoder round and the windowed symbol lookup give the scalar results,
    and their compiled code uses permutes or gathers as the encoder's variant says; the decoder's round
    as the decoder's does."""
    import os
    import platform
    import re

    from numba import njit

    from codec import _simd
    from codec.codebook import SYM_ESC, SYM_WINDOW0, WINDOW

    feats = _simd._target_features().split(",")
    usable = (["permute", "gather"] if "+avx512vbmi" in feats else ["gather"] if "+avx512f" in feats
              else ["loads", "gather"] if "+avx2" in feats else ["loads"])
    assert _simd.usable_variants(_simd.TABLE_LOOKUP_FORMS) == usable
    prefer = "gather" if _simd._host_gathers_preferred() else None
    want = os.environ.get("ZIPCCL_TABLE_LOOKUPS") or _simd.default_variant(usable, prefer)
    assert _simd.TABLE_LOOKUPS == want
    # the encoder: permutes wherever the target has them, unless a variant is forced
    want_enc = (os.environ.get("ZIPCCL_ENCODE_LOOKUPS")
                or ("permute" if "permute" in usable and "ZIPCCL_TABLE_LOOKUPS" not in os.environ else want))
    assert _simd.ENCODE_LOOKUPS == want_enc

    @njit(cache=False)
    def push(x, sym, rk, ftab, inv, wbuf):
        return _simd.rans_encode16_ranked(x, 0, sym, 0, rk, ftab, inv, wbuf, 64, _simd.LANES)

    @njit(cache=False)
    def prepare(words, symwin, sym, out, base):
        return _simd.encode_prepare16_window(words, 0, symwin, (8 << 8) | 7, 0, sym, out, 0, 16, 0, 7, base)

    rng = np.random.default_rng(3)
    # 16 symbols of 20 used ones; rank r has frequency 100 + 37 r, so every rank reads a distinct entry
    used = np.sort(rng.choice(np.arange(82), 20, replace=False))
    sym = rng.choice(used, 16).astype(np.uint8)
    rk = np.zeros(128, np.uint8)
    rk[used] = np.arange(20)
    freq = 100 + 37 * np.arange(32)
    cum = np.cumsum(np.r_[0, freq[:-1]])
    ftab = (freq | cum << 16).astype(np.uint32)
    inv = np.float32(1) / freq.astype(np.float32)
    x = rng.integers(1 << 16, 1 << 31, 16).astype(np.uint32)
    wbuf = np.zeros(64, np.uint16)
    xs = x.copy()
    pos = push(xs, sym, rk, ftab, inv, wbuf)
    want_x, want_words = [], []
    for lane in range(15, -1, -1):                         # the scalar round of rans_encode16
        r = rk[sym[lane]]
        xl, f = int(x[lane]), int(freq[r])
        if xl >= f << 20:
            want_words.append(xl & 0xFFFF)
            xl >>= 16
        want_x.append((xl // f << 12) + xl % f + int(cum[r]))
    assert np.array_equal(xs, np.array(want_x[::-1], np.uint32))
    assert pos == 64 - len(want_words) and np.array_equal(wbuf[pos:], np.array(want_words[::-1], np.uint16))
    # bf16 words whose keys (exponent << 1 | leading bit) fall inside, below and above the window
    base = 2 * 100
    keys = np.r_[base + rng.integers(0, 2 * WINDOW, 12), base - 1, base + 2 * WINDOW, 0, 511]
    symwin = np.full(128, SYM_ESC, np.uint8)
    symwin[:2 * WINDOW] = np.where(rng.random(2 * WINDOW) < 0.8, SYM_WINDOW0 + np.arange(2 * WINDOW), SYM_ESC)
    words = (keys << 6 | rng.integers(0, 64, 16)).astype(np.uint16)
    got = np.zeros(16, np.uint8)
    n_esc = prepare(words, symwin, got, np.zeros(64, np.uint8), base)
    inside = (keys >= base) & (keys < base + 2 * WINDOW)
    expect = np.where(inside, symwin[np.clip(keys - base, 0, 127)], SYM_ESC)
    assert np.array_equal(got, expect) and n_esc == (expect == SYM_ESC).sum()
    if platform.machine() not in ("x86_64", "AMD64") or "+avx2" not in feats:
        return
    @njit(cache=False)
    def pull(x, tab, buf, sym, ranked):
        return _simd.rans_decode16(x, 0, tab, buf, 0, sym, 0, ranked, _simd.LANES)

    pull(np.full(16, 1 << 16, np.uint32), np.zeros(4096 + 512, np.uint32), np.zeros(64, np.uint8), np.zeros(16, np.uint8),
         0)
    asm = next(iter(pull.inspect_asm().values()))
    permutes, gathers = re.search(r"vperm[it]2[bd]\s", asm), re.search(r"vp?gather", asm)
    assert bool(permutes) == (want == "permute") and bool(gathers) == (want != "loads"), want   # ranked or not
    for fn in (push, prepare):
        asm = next(iter(fn.inspect_asm().values()))
        permutes = re.search(r"vperm[it]2[bd]\s", asm)
        gathers = re.search(r"vp?gather", asm)
        if want_enc == "permute":
            assert permutes and not gathers, (fn, want_enc)
        else:                                   # "loads": scalar loads, no gather instruction
            assert not permutes and bool(gathers) == (want_enc == "gather"), (fn, want_enc)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_prepare_of_32_values_writes_what_two_16_value_calls_write(dtype):
    """encode_prepare32_window (16-bit words 32 at a time, in 16-bit lanes) against two
    encode_prepare16_window calls: the same symbols, byte plane, packed remainder fields and escape
    counts per half, for every plane shape a 16-bit word's residual takes, random words (keys inside,
    below and above the window) and every escape position; -1 for 32-bit words.  Likewise
    encode_prepare32_zeros against encode_prepare16_zeros (with +0 values: residuals compressed)."""
    from numba import njit

    from codec import _simd
    from codec.codebook import SYM_ESC, SYM_WINDOW0, WINDOW

    if not _simd.ENCODE_PERMUTE:
        pytest.skip(f"the 32-value prepare runs with permutes only (this target's encoder: {_simd.ENCODE_LOOKUPS})")

    @njit(cache=False)
    def pairs(words, m, symwin, em, shift, sym, plane, full, rem, base, counts):
        for at in range(0, m, 32):
            c = _simd.encode_prepare32_window(words, at, symwin, em, shift, sym, plane, 0, m, full, rem, base)
            counts[at // 16], counts[at // 16 + 1] = c & 0xFFFFFFFF, c >> 32

    @njit(cache=False)
    def singles(words, m, symwin, em, shift, sym, plane, full, rem, base, counts):
        for at in range(0, m, 16):
            counts[at // 16] = _simd.encode_prepare16_window(words, at, symwin, em, shift, sym, plane, 0, m, full,
                                                             rem, base)

    lay = layout_for(np_dtype(dtype))
    E, M = lay.exp_bits, lay.man_bits
    rng = np.random.default_rng(_seed("prepare32", dtype))
    m = 1024
    for shift in range(M):
        for sign in (0, 1):                    # the plane's width as the encoder sizes it: sign stored or not
            width = M - 1 - shift + sign
            full, rem = width // 8, width % 8
            base = 2 * int(rng.integers(-WINDOW, 1 << E))          # 2 * (ref - WINDOW_LOW): may be < 0
            symwin = np.full(128, SYM_ESC, np.uint8)
            symwin[:2 * WINDOW] = np.where(rng.random(2 * WINDOW) < 0.9, SYM_WINDOW0 + np.arange(2 * WINDOW), SYM_ESC)
            words = rng.integers(0, 1 << 16, m, dtype=np.uint16)
            keys = base + rng.integers(-4, 2 * WINDOW + 4, m)          # mostly inside the window
            words = np.where(rng.random(m) < 0.9, (keys % (2 << E)).astype(np.uint16) << (M - 1) |
                             (words & ((1 << (M - 1)) - 1)) | (words & 0x8000), words).astype(np.uint16)
            got = []
            for fn in (pairs, singles):
                sym, plane, counts = np.zeros(m + 16, np.uint8), np.zeros(2 * m + 64, np.uint8), np.zeros(m // 16, np.int64)
                fn(words, m, symwin, (E << 8) | M, shift, sym, plane, full, rem, base, counts)
                got.append((sym, plane, counts))
            for a, b in zip(*got):
                assert np.array_equal(a, b), (shift, sign)
            assert got[0][2].sum() == (got[0][0][:m] == SYM_ESC).sum() > 0
    wide = np.zeros(64, np.uint32)
    one = njit(cache=False)(lambda w: _simd.encode_prepare32_window(w, 0, np.zeros(128, np.uint8), (8 << 8) | 23, 0,
                                                                     np.zeros(64, np.uint8), np.zeros(256, np.uint8),
                                                                     0, 32, 2, 7, 0))
    assert one(wide) == -1
    # chunks with +0 (ZERO symbols, no residual): the residuals compressed to plane indices kk, kk+1, ...
    @njit(cache=False)
    def zero_pairs(words, m, symwin, em, shift, sym, plane, n_sm, full, rem, base, counts):
        kk = 0
        for at in range(0, m, 32):
            if kk + 32 > n_sm:
                return kk, at
            c = _simd.encode_prepare32_zeros(words, at, symwin, em, shift, sym, plane, 0, n_sm, full, rem, base, kk)
            if c < 0:
                return -1, at
            counts[at // 16], counts[at // 16 + 1] = c & 0xFFFF, c >> 16 & 0xFFFF
            kk += c >> 32
        return kk, m

    @njit(cache=False)
    def zero_singles(words, end, symwin, em, shift, sym, plane, n_sm, full, rem, base, counts):
        kk = 0
        ent = np.zeros(32, np.uint32)
        for at in range(0, end, 16):
            c = _simd.encode_prepare16_zeros(words, at, symwin, em, shift, sym, plane, 0, n_sm, full, rem, base, kk,
                                             ent, 0)
            counts[at // 16] = c & 0xFFFFFFFF
            kk += c >> 32
        return kk

    if _simd.STREAM_MOVES != "register":       # no vpcompressw register form: the 16-value calls do it all
        w0 = rng.integers(1, 1 << 16, 64, dtype=np.uint16)
        assert zero_pairs(w0, 64, symwin, (E << 8) | M, 0, np.zeros(80, np.uint8), np.zeros(256, np.uint8), 64,
                          0, 7, base, np.zeros(4, np.int64)) == (-1, 0)
        return
    for shift in range(0, M, 2):
        width = M - 1 - shift + 1
        full, rem = width // 8, width % 8
        words = rng.integers(0, 1 << 16, m, dtype=np.uint16)
        words[rng.random(m) < 0.3] = 0
        words[64:96] = 0                                   # a pair with no residual at all
        n_sm = int((words != 0).sum())
        got = []
        for fn in (zero_pairs, zero_singles):
            sym, plane, counts = np.zeros(m + 16, np.uint8), np.zeros(2 * n_sm + 64, np.uint8), np.zeros(m // 16, np.int64)
            if fn is zero_pairs:
                kk, end = fn(words, m, symwin, (E << 8) | M, shift, sym, plane, n_sm, full, rem, base, counts)
            else:
                kk = fn(words, end, symwin, (E << 8) | M, shift, sym, plane, n_sm, full, rem, base, counts)
            got.append((kk, sym[:end], counts[:end // 16], plane[:kk], plane[full * n_sm:full * n_sm + kk]))
        assert got[0][0] > n_sm - 64
        for a, b in zip(*got):
            assert np.array_equal(a, b), shift


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_chunks_with_more_symbols_than_ranks_match_reference(dtype):
    """Chunks whose tables use more than RANKED_SYMBOLS symbols: up to ENCODE_RANKS the encoder's rounds read
    tables of 64 ranks, beyond them the tables by symbol (gathers), and the decoder the gather rounds (the
    permute variants fall back per chunk): same bytes as the reference, beside a chunk that does not."""
    from codec import _simd
    from codec import format as F
    from codec.codebook import chunk_tables

    rng = np.random.default_rng(5)
    n = 1 << 16
    wide = rng.choice([-1.0, 1.0], n) * 2.0 ** rng.uniform(-24, 0, n)      # exponents spread over 24 octaves
    wide[::7] = 0                         # (every window symbol, ESC and ZERO: more than ranks, explicit table or not)
    wider = rng.normal(0, 0.02, n)                    # a quarter spread over 40 octaves: every window symbol
    pick = rng.random(n) < 0.25
    wider[pick] = rng.choice([-1.0, 1.0], pick.sum()) * 2.0 ** rng.uniform(-40, 0, pick.sum())
    wider[::7] = 0
    x = np.r_[wide, rng.normal(0, 0.02, n), wider].astype(np_dtype(dtype))
    blob = codec.encode(x, chunk_size=n, backend="numba")
    assert blob == codec.encode(x, chunk_size=n, backend="reference")
    h = F.parse_header(blob)
    used = [int(((c.table if c.codebook == F.CB_EXPLICIT else chunk_tables(c.codebook, c.ref, 8, True)[0]) > 0).sum())
            for c in (F.parse_chunk_head(h, blob, i) for i in range(3))]
    assert _simd.ENCODE_RANKS >= used[0] > _simd.RANKED_SYMBOLS >= used[1] and used[2] > _simd.ENCODE_RANKS, used
    assert_bit_equal(codec.decode(blob, backend="numba"), x)


def _slot_entries(f, cum):
    """The decoder's slot table (codec._numba._open_chunk), in NumPy: slot -> sym | bias << 7 | freq << 19."""
    sym = np.repeat(np.arange(len(f)), f)
    slot = np.arange(len(sym))
    return (sym | (slot - cum[sym]) << 7 | f[sym] << 19).astype(np.uint32)


def _ranked_entries(rt, slot):
    """codec._simd._ranked_entries in NumPy: the entries a ranked table gives for ``slot``."""
    from codec import _simd

    tb = rt.view(np.uint8)
    l1 = tb[4 * _simd.RANK_BUCKET + (slot >> 5)].astype(np.int64)
    exact = tb[4 * _simd.RANK_FINE + ((l1 & 0x7F) | (slot & 31))]
    r = np.where(l1 >= 0x80, exact, l1)
    nxt = rt[_simd.RANK_NEXT + r].astype(np.int64)
    r = r + (slot >= (nxt & 0xFFFF)) + (slot >= (nxt >> 16))
    return (rt[_simd.RANK_ENTRY + r].astype(np.int64) + (slot << 7)) & 0xFFFFFFFF


@pytest.mark.parametrize("exp_bits,has_inf", [(8, True), (5, True), (4, False)])
def test_ranked_tables_give_the_slot_table_entries(exp_bits, has_inf):
    """The ranked table (bucket ranks, crowded buckets' fine rows, the next ranks' first slots) gives
    the slot table's entry for every slot, for every codebook of the family at references across the
    exponent range, or is refused (more used symbols than RANKED_SYMBOLS, or too many crowded buckets)."""
    from codec import _numba, _simd, codebook as cbk

    freqs = np.ascontiguousarray(cbk.load_family().freqs, dtype=np.int64)
    f = np.empty(cbk.N_SYMBOLS, np.int64)
    cum = np.empty(cbk.N_SYMBOLS + 1, np.int64)
    slot = np.arange(cbk.TOTAL)
    taken = refused = 0
    for cb in range(0, len(freqs), 5):
        for ref in range(-40, (1 << exp_bits) + 40, 9):
            _numba._tables(freqs, cb, ref, exp_bits, has_inf, f, cum)
            rt = np.zeros(_simd.RANKED_LEN, np.uint32)
            if not _numba._ranked_slots(f, cum, rt):
                refused += 1
                continue
            taken += 1
            assert np.array_equal(_ranked_entries(rt, slot), _slot_entries(f, cum)), (cb, ref)
    assert taken > refused, (taken, refused)


def test_ranked_decode_round_matches_the_slot_table_round():
    """rans_decode16 reading a ranked table (permutes on PERMUTE targets, gathers elsewhere) decodes
    the same symbols, states and stream offset as from the slot table, for states over every slot."""
    from numba import njit

    from codec import _numba, _simd, codebook as cbk

    @njit(cache=False)
    def rounds(x, tab, buf, sym, ranked):
        wp = 0
        for at in range(0, len(sym), 16):
            wp = _simd.rans_decode16(x, 0, tab, buf, wp, sym, at, ranked, _simd.LANES)
        return wp

    freqs = np.ascontiguousarray(cbk.load_family().freqs, dtype=np.int64)
    f = np.empty(cbk.N_SYMBOLS, np.int64)
    cum = np.empty(cbk.N_SYMBOLS + 1, np.int64)
    rng = np.random.default_rng(11)
    checked = 0
    for cb in rng.choice(len(freqs), 40, replace=False):
        _numba._tables(freqs, cb, 120, 8, True, f, cum)
        tab = np.zeros(_simd.RANKED_AT + _simd.RANKED_LEN, np.uint32)
        tab[:cbk.TOTAL] = _slot_entries(f, cum)
        if not _numba._ranked_slots(f, cum, tab[_simd.RANKED_AT:]):
            continue
        checked += 1
        x0 = (rng.permutation(cbk.TOTAL)[:16] | rng.integers(1, 1 << 19, 16) << 12).astype(np.uint32)
        buf = rng.integers(0, 256, 16 * 64 * 2 + 64).astype(np.uint8)
        got = [x0.copy(), np.zeros(16 * 64, np.uint8)]
        want = [x0.copy(), np.zeros(16 * 64, np.uint8)]
        wp_got = rounds(got[0], tab, buf, got[1], 1)
        wp_want = rounds(want[0], tab, buf, want[1], 0)
        assert wp_got == wp_want and np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), cb
    assert checked >= 20, checked


@pytest.mark.parametrize("form", ["plain", "ranked", "packed"])
def test_masked_encode_rounds_push_only_their_lanes(form):
    """A round of fewer than 16 lanes (chunks of 8 lanes push theirs as one masked 16-lane step) gives the
    scalar loop's states and words for lanes 0..k-1, for every k and every table form, whatever lies past
    them (other symbols, states that would flush, entries with frequency 0): the states past k are left
    as they were and flush nothing."""
    from numba import njit

    from codec import _simd
    from codec._simd import PACK_CUM, PACK_F

    @njit(cache=False)
    def push(x, sym, ent, rk, ftab, ftab_r, inv_r, wbuf, k, form):
        if form == 0:
            return _simd.rans_encode16(x, 0, sym, 0, ftab, wbuf, 64, k)
        if form == 1:
            return _simd.rans_encode16_ranked(x, 0, sym, 0, rk, ftab_r, inv_r, wbuf, 64, k)
        return _simd.rans_encode16_packed(x, 0, ent, 0, wbuf, 64, k)

    rng = np.random.default_rng(_seed("masked", form))
    used = np.sort(rng.choice(np.arange(1, 82), 20, replace=False))
    freq = np.zeros(128, np.int64)
    freq[used] = rng.integers(1, 4096, 20)
    cum = np.zeros(128, np.int64)
    cum[used] = np.cumsum(np.r_[0, freq[used][:-1]]) % 4096
    rk = np.zeros(128, np.uint8)
    rk[used] = np.arange(20)
    ftab = (freq | cum << 16).astype(np.uint32)
    ftab_r = np.zeros(32, np.uint32)
    ftab_r[:20] = ftab[used]
    inv_r = np.zeros(32, np.float32)
    inv_r[:20] = np.float32(1) / freq[used].astype(np.float32)
    for k in range(1, 17):
        for _ in range(20):
            sym = rng.choice(used, 16).astype(np.uint8)
            sym[k:] = rng.integers(0, 256, 16 - k)          # past the round: anything, unused symbols too
            ent = (sym | freq[sym % 128] << PACK_F | (cum[sym % 128] & 0xFFF) << PACK_CUM).astype(np.uint32)
            x = rng.integers(1 << 16, 1 << 32, 16, dtype=np.uint64).astype(np.uint32)
            x[:k] = np.minimum(x[:k], (freq[sym[:k]] << 36) - 1).astype(np.uint32)     # a state the coder can hold
            want_x, want_words = x.copy(), []
            for lane in range(k - 1, -1, -1):
                xl, f, c = int(x[lane]), int(freq[sym[lane]]), int(cum[sym[lane]])
                if xl >= f << 20:
                    want_words.append(xl & 0xFFFF)
                    xl >>= 16
                want_x[lane] = (xl // f << 12) + xl % f + c
            xs, wbuf = x.copy(), np.zeros(64, np.uint16)
            pos = push(xs, sym, ent, rk, ftab, ftab_r, inv_r, wbuf, k, ["plain", "ranked", "packed"].index(form))
            assert np.array_equal(xs, want_x), k
            assert pos == 64 - len(want_words) and np.array_equal(wbuf[pos:], np.array(want_words[::-1], np.uint16)), k


def test_masked_decode_rounds_step_only_their_lanes():
    """A decode round of fewer than 16 lanes (8-lane chunks) as a masked 16-lane step: the scalar loop's
    states, symbols and stream offset for lanes 0..k-1, every k; the states past k and the symbols'
    slots past k are left as they were and take no word."""
    from numba import njit

    from codec import _numba, _simd, codebook as cbk

    @njit(cache=False)
    def step(x, tab, buf, wp, sym, k):
        return _simd.rans_decode16(x, 0, tab, buf, wp, sym, 0, 0, k)

    freqs = np.ascontiguousarray(cbk.load_family().freqs, dtype=np.int64)
    f = np.empty(cbk.N_SYMBOLS, np.int64)
    cum = np.empty(cbk.N_SYMBOLS + 1, np.int64)
    rng = np.random.default_rng(_seed("masked decode"))
    for cb in rng.choice(len(freqs), 8, replace=False):
        _numba._tables(freqs, cb, 120, 8, True, f, cum)
        tab = np.zeros(_simd.RANKED_AT + _simd.RANKED_LEN, np.uint32)
        tab[:cbk.TOTAL] = _slot_entries(f, cum)
        for k in range(1, 17):
            x = (rng.integers(0, cbk.TOTAL, 16) | rng.integers(1, 1 << 20, 16) << 12).astype(np.uint32)
            x[rng.random(16) < 0.5] &= 0x1FFFF          # small states: many lanes refill
            buf = rng.integers(0, 256, 96).astype(np.uint8)
            sym = np.full(32, 0xEE, np.uint8)
            want_x, want_sym, wp = x.copy(), sym.copy(), 8
            for lane in range(k):
                e = int(tab[int(x[lane]) & 4095])
                xl = (e >> 19) * (int(x[lane]) >> 12) + (e >> 7 & 0xFFF)
                want_sym[lane] = e & 0x7F
                if xl < 1 << 16:
                    xl = xl << 16 | int(buf[wp]) | int(buf[wp + 1]) << 8
                    wp += 2
                want_x[lane] = xl
            xs = x.copy()
            got_wp = step(xs, tab, buf, 8, sym, k)
            assert got_wp == wp and np.array_equal(xs, want_x) and np.array_equal(sym, want_sym), (cb, k)


def test_table_free_division_is_exact_for_every_frequency():
    """The encoder rounds' quotient (codec._simd._divmod_f32: a biased single-precision estimate corrected
    one step down), with the reciprocal divided in the round and with it read from a table of f32
    reciprocals (the ranked rounds), equals x // f, x % f for every frequency 1..4096 at the edges of
    its range (x = 0, f - 1, multiples of f and one below them, the largest x < f * 2^20, x near 2^32)
    and at random states: the bytes depend on it being exact."""
    from llvmlite import ir
    from numba import njit, types
    from numba.extending import intrinsic

    from codec import _simd

    @intrinsic
    def divmod16(typingctx, x, f, q, r, recip):
        def codegen(context, builder, signature, args):
            vec = ir.VectorType(ir.IntType(32), _simd.LANES)
            ptrs = [builder.bitcast(_simd._data(context, builder, t, a), vec.as_pointer())
                    for t, a in zip(signature.args, args)]
            rv = None
            if signature.args[4].dtype == types.float32:
                rv = builder.load(builder.bitcast(ptrs[4], ir.VectorType(ir.FloatType(), _simd.LANES).as_pointer()))
            qv, rv = _simd._divmod_f32(builder, builder.load(ptrs[0], align=4), builder.load(ptrs[1], align=4), rv)
            builder.store(qv, ptrs[2], align=4)
            builder.store(rv, ptrs[3], align=4)
            return context.get_dummy_value()
        return types.none(x, f, q, r, recip), codegen

    @njit(cache=False)
    def run(x, f, q, r, recip):
        for i in range(0, len(x), 16):
            divmod16(x[i:i + 16], f[i:i + 16], q[i:i + 16], r[i:i + 16], recip[i:i + 16])

    rng = np.random.default_rng(11)
    f = np.repeat(np.arange(1, 4097, dtype=np.uint64), 16)
    top = f << 20                                           # the exclusive bound on the state
    qs = rng.integers(0, 1 << 20, len(f)).astype(np.uint64)
    edges = np.stack([np.zeros_like(f), f - 1, qs * f, np.maximum(qs * f, 1) - 1, top - 1, top - f,
                      rng.integers(0, top), np.minimum(top, 1 << 32) - 1 - rng.integers(0, 1 << 12, len(f))])
    for x in edges:                 # each row: 16 states for every frequency
        x = np.minimum(x, top - 1).astype(np.uint32)
        fu = f.astype(np.uint32)
        for recip in (np.zeros(len(f), np.int32), np.float32(1) / fu.astype(np.float32)):   # (int32: divided)
            q = np.zeros_like(x)
            r = np.zeros_like(x)
            run(x, fu, q, r, recip)
            assert np.array_equal(q, x.astype(np.uint64) // f) and np.array_equal(r, x.astype(np.uint64) % f)


def test_lane_compress_and_expand_for_every_mask():
    """The 32-bit lane moves of chunks with ZERO symbols (codec._simd._compress_lanes/_expand_lanes, in
    the form this compile target takes: vpcompressd/vpexpandd, vpermd on AVX2, or the generic
    intrinsics) for all 65536 masks: compress puts the set lanes first in lane order and zeros the
    rest; expand is its inverse and zeros the unset lanes."""
    from llvmlite import ir
    from numba import njit, types
    from numba.extending import intrinsic

    from codec import _simd

    def mover(move):
        @intrinsic
        def move16(typingctx, v, m, out):
            def codegen(context, builder, signature, args):
                vec = ir.VectorType(ir.IntType(32), _simd.LANES)
                vp, op = (builder.bitcast(_simd._data(context, builder, signature.args[i], args[i]), vec.as_pointer())
                          for i in (0, 2))
                mask = builder.bitcast(builder.trunc(args[1], ir.IntType(16)), ir.VectorType(ir.IntType(1), _simd.LANES))
                builder.store(move(builder, builder.load(vp, align=4), mask), op, align=4)
                return context.get_dummy_value()
            return types.none(v, m, out), codegen
        return move16

    compress16, expand16 = mover(_simd._compress_lanes), mover(_simd._expand_lanes)

    @njit(cache=False)
    def run(v, out_c, out_e):
        for m in range(1 << 16):
            compress16(v[m], m, out_c[m])
            expand16(v[m], m, out_e[m])

    rng = np.random.default_rng(5)
    v = rng.integers(1, 1 << 32, (1 << 16, 16), dtype=np.uint64).astype(np.uint32)     # no zero lanes
    got_c = np.full_like(v, 7)
    got_e = np.full_like(v, 7)
    run(v, got_c, got_e)
    sel = (np.arange(1 << 16)[:, None] >> np.arange(16)) & 1 == 1
    n = sel.sum(1)
    rank = np.cumsum(sel, 1) - 1
    want_c = np.zeros_like(v)
    want_c[np.arange(16) < n[:, None]] = v[sel]                 # row-major: each row's set lanes in order
    want_e = np.where(sel, np.take_along_axis(v, np.maximum(rank, 0), 1), 0)
    assert np.array_equal(got_c, want_c) and np.array_equal(got_e, want_e)


def test_stale_kernel_index_files_are_dropped(tmp_path):
    """numba keys its cache on codec/_numba.py's content only: codec._numba.drop_stale_cache removes the
    module's index files when what else the kernels are compiled from (its stamp) changes, and only then."""
    from codec._numba import _kernel_stamp, drop_stale_cache

    def files():
        return sorted(p.name for p in tmp_path.iterdir())

    for name in ("_numba.a-1.py311.nbi", "_numba.a-1.py311.1.nbc", "_other.b-2.py311.nbi"):
        (tmp_path / name).write_bytes(b"x")
    assert drop_stale_cache(tmp_path, "_numba.", "one")                       # no record yet: stale
    assert files() == ["_numba.a-1.py311.1.nbc", "_numba.sources", "_other.b-2.py311.nbi"]
    (tmp_path / "_numba.a-1.py311.nbi").write_bytes(b"x")
    assert not drop_stale_cache(tmp_path, "_numba.", "one")                   # same sources: kept
    assert "_numba.a-1.py311.nbi" in files()
    assert drop_stale_cache(tmp_path, "_numba.", "two")                       # an edit: dropped
    assert "_numba.a-1.py311.nbi" not in files() and (tmp_path / "_numba.sources").read_text() == "two"
    assert len(_kernel_stamp()) == 64 and _kernel_stamp() == _kernel_stamp()


def _stats_numpy(w, lay):
    """codec._numba._stats, value by value in NumPy: zeros, non-zero magnitudes, sum of log2 in exponent
    units (a subnormal's from its mantissa's bit length), OR of the low mantissa bits, set sign bits,
    values in all-+0 blocks of 16 (the last one the tail)."""
    w = w.astype(np.int64)
    E, M = lay.exp_bits, lay.man_bits
    e = (w >> M) & ((1 << E) - 1)
    mant = (w & ((1 << M) - 1)) | 1
    bitlen = np.floor(np.log2(mant)).astype(np.int64) + 1
    nz = (w & ((1 << (E + M)) - 1)) != 0
    lg = np.where(nz, np.where(e != 0, e, bitlen - M), 0)
    orlow = np.bitwise_or.reduce(w & ((1 << (M - 1)) - 1)) if len(w) else 0
    zero_runs = sum(len(b) for b in np.split(w, range(16, len(w), 16)) if not b.any())
    return (int((w == 0).sum()), int(nz.sum()), int(lg.sum()), int(orlow), int(((w >> (E + M)) & 1).sum()),
            zero_runs)


@pytest.mark.parametrize("dtype", DTYPES)
def test_chunk_statistics_match_numpy_for_every_bit_pattern(dtype):
    """The encoder's statistics pass (one SIMD loop, a subnormal's bit length read from a float32
    conversion) gives the integer statistics of every word: every bit pattern of the 8- and 16-bit
    dtypes (subnormals, -0, inf, NaN payloads), float32's subnormals, specials and random words, at
    lengths with every tail (m % 16) and the largest chunk's (2^20 values, where a lane's sums are
    biggest)."""
    from codec import _numba as N

    lay = layout_for(np_dtype(dtype))
    rng = np.random.default_rng(_seed("stats", dtype))
    if lay.itemsize < 4:
        words = np.arange(1 << (8 * lay.itemsize), dtype=np.int64).astype(lay.uint)
        words = np.tile(words, max(1, 4096 // len(words)))
    else:
        sub = rng.integers(0, 1 << 23, 3000, dtype=np.uint32) >> rng.integers(0, 23, 3000).astype(np.uint32)
        words = np.concatenate([sub, sub | np.uint32(1 << 31), rng.integers(0, 1 << 32, 60000, dtype=np.uint32),
                                np.array([0, 1 << 31, 0x7F800000, 0xFF800000, 0x7FC00001, 1], np.uint32)])
    words = rng.permutation(words)
    words[rng.choice(len(words) // 16, len(words) // 64, replace=False)[:, None] * 16 + np.arange(16)] = 0
    words.setflags(write=False)         # read-only, as the encoder's input (the kernels compiled for it)
    # (and around 16-bit words' widening, every 128 steps of 32: codec._simd.stats_halves)
    for m in [len(words)] + [int(v) for v in rng.integers(1, 4000, 20)] + list(range(1, 40)) + [
            4095, 4096, 4097, 4111, 4112, 4127, 4128, 4129, 8191, 8192, 8208]:
        if m > len(words):
            continue
        w = np.ascontiguousarray(words[:m])
        assert tuple(int(v) for v in N._stats(w, m, lay.exp_bits, lay.man_bits)) == _stats_numpy(w, lay), m
    # the largest chunk, of the largest exponent fields (every lane's sum of log2 at its largest)
    top = ((1 << (lay.exp_bits + lay.man_bits)) - 1)
    w = np.full(1 << 20, top, lay.uint)
    w.setflags(write=False)
    assert tuple(int(v) for v in N._stats(w, len(w), lay.exp_bits, lay.man_bits)) == _stats_numpy(w, lay)


def _bound_cases(dtype, n, rng):
    x = rng.normal(0, 0.02, n).astype(np_dtype(dtype))
    w = bits(x).copy()
    one = bits(np.array([1.0, 1.5], np.float64).astype(np_dtype(dtype)))
    rows = np.zeros_like(w)
    for r in rng.choice(n // 384, max(1, n // 384 // 20), replace=False):
        rows[r * 384:(r + 1) * 384] = w[r * 384:(r + 1) * 384]
    yield "dense", w
    yield "rows", rows
    for p in (0.001, 0.01, 0.1, 0.5):
        yield f"scattered {p}", np.where(rng.random(n) < p, w, 0).astype(w.dtype)
    yield "one value", np.full_like(w, one[0])                      # a table of one symbol's 4096 - slots
    low = np.full_like(w, one[0])
    low[rng.choice(n, max(1, n // 3000), replace=False)] = one[1]
    yield "one value and a few others", low
    zeros_and_one = np.zeros_like(w)
    zeros_and_one[rng.integers(0, n)] = one[0]
    yield "one non-zero value", zeros_and_one


# ~1.3 s a dtype on Zen 3 (the reference encodes too): bfloat16 in the README's run, the others in CI's slow step
@pytest.mark.parametrize("dtype", [d if d == "bfloat16" else pytest.param(d, marks=pytest.mark.slow) for d in DTYPES])
def test_words_lower_bound_holds_for_every_coded_payload(dtype):
    """A coded payload that cannot fit its limit is not coded at all (codec._numba._words_lower_bound and
    the tight _words_lower_bound_bins: the candidates of a mostly-zero chunk that the smallest so far rules
    out): the bounds must never
    exceed the words a payload really takes, or the encoder would drop the payload the reference
    keeps.  Checked against the word count in the head of every coded chunk of chunks whose tables are
    the extremes (one symbol of nearly every slot, a lone non-zero value among +0, scattered and
    row-sparse values, dense), plain and zero-block payloads, 1 to 32 rANS lanes; and the encoder's
    bytes are the reference's there."""
    from codec import _numba as N
    from codec import format as F

    lay = layout_for(np_dtype(dtype))
    fam = N._family64()
    rng = np.random.default_rng(_seed("bound", dtype))
    f = np.empty(N.N_SYMBOLS, np.int64)
    cum = np.empty(N.N_SYMBOLS + 1, np.int64)
    checked = set()
    for n in (1000, 16384 + 48, 65536):
        for kind, w in _bound_cases(dtype, n, rng):
            blob = codec.encode(w.view(np_dtype(dtype)), chunk_size=n)
            h = F.parse_header(blob)
            if h.kinds[0] != F.KIND_CODED:
                continue
            hd = F.parse_chunk_head(h, blob, 0)
            if hd.codebook == F.CB_EXPLICIT:            # format 7: the chunk's own frequencies
                f[:] = hd.table
            else:
                N._tables(fam[0], hd.codebook, hd.ref, lay.exp_bits, lay.has_inf, f, cum)
            lanes = N._lanes(hd.n_coded)
            assert N._words_lower_bound(f, hd.n_coded, hd.n_coded - hd.n_sm, lanes) <= hd.n_words, (kind, n)
            # the tight bound (every value at its own symbol's step), from the chunk's key histogram: a
            # zero-block payload codes the chunk's values less its skipped blocks' +0
            n_zero = int((w[:n] == 0).sum())
            keys = N._full_hist(N._readonly(w[:n]), n, lay.exp_bits, lay.man_bits, n_zero)[:2 << lay.exp_bits]
            symtab = N._symbol_table(f, hd.ref, lay.exp_bits)
            z = n_zero - (n - hd.n_coded)
            assert N._words_lower_bound_bins(f, symtab, keys, hd.n_coded - hd.n_sm, z, lanes) <= hd.n_words, (kind, n)
            if n < 65536:
                assert blob == codec.encode(w.view(np_dtype(dtype)), chunk_size=n, backend="reference"), (kind, n)
            checked.add((kind, hd.mode > 0))
    assert ("one value and a few others", False) in checked and any(zb for _, zb in checked), checked


def _same_compile(a, b) -> bool:
    """Whether two compiled argument types of a kernel helper give the same machine code but for constant
    folding: a literal integer and int64, or a read-only and a writeable array of one dtype."""
    from numba import types

    if a == b:
        return True
    if isinstance(a, types.IntegerLiteral) != isinstance(b, types.IntegerLiteral):
        lit, other = (a, b) if isinstance(a, types.IntegerLiteral) else (b, a)
        return other == lit.literal_type
    if isinstance(a, types.Array) and isinstance(b, types.Array):
        return a.copy(readonly=True) == b.copy(readonly=True)
    return False


def test_kernel_helpers_compile_once_per_word_type():
    """The non-inlined helpers of the numba kernels compile once per argument types that matter (word type,
    exponent and mantissa widths), not once more for a literal 0 that reached them while a caller's loop
    types were inferred, nor for a writeable scratch array beside the read-only tensor (each such compile
    cost seconds of every cold test run and CI: 167 signatures were 88 after the fix).  After encoding
    (plain and zero-block payloads, explicit tables) and decoding, no helper holds two signatures that differ
    only so.  (It checks what this process compiled: with a warm kernel cache only the signatures that run are
    loaded, so it also reads numba's on-disk index of each helper, which holds what every process compiled:
    the test suite's warm-up processes (conftest) compile the kernels while this one may load them whole.
    It bites on a cold compile, which CI's clean clone always is.)"""
    from itertools import combinations

    from numba.core.registry import CPUDispatcher

    from codec import _numba

    rng = np.random.default_rng(0)
    for dtype in ("bfloat16", "float16"):
        w = bits(rng.normal(0, 0.02, 40000).astype(np_dtype(dtype))).copy()
        w[:16000] = 0                                   # zero-block candidates in the first chunk
        w[30000:] = bits(rng.lognormal(-8, 2, 10000).astype(np_dtype(dtype)))    # a shape for an explicit table
        x = w.view(np_dtype(dtype))
        assert_bit_equal(codec.decode(codec.encode(x, chunk_size=16384, backend="numba"), backend="numba"), x)
    helpers = {name: f for name, f in vars(_numba).items() if isinstance(f, CPUDispatcher)}
    assert {"_code_values", "_code_dense", "_prepare_scalar", "_values_dense", "_finish_chunk"} <= set(helpers)
    for ns in list(_numba._NAMESPACES.values()):       # the decoders' helpers: each dtype's own copies
        helpers.update((f.py_func.__qualname__, f) for f in _numba.own_functions(ns).values())
    assert any(name.startswith("_finish_chunk.") for name in helpers)
    twins = [(name, a, b) for name, f in helpers.items() for a, b in combinations(_compiled_signatures(f), 2)
             if len(a) == len(b) and all(_same_compile(s, t) for s, t in zip(a, b))]
    assert not twins, (sorted({name for name, _, _ in twins}), twins[0])


def _compiled_signatures(f) -> list:
    """The signatures of numba dispatcher ``f`` compiled here or saved to its on-disk cache by any process
    (numba's index: ``{(signature, target, ...): data file}``), each once."""
    sigs = list(f.signatures)
    index = getattr(f._cache, "_cache_file", None)          # (None: a function numba does not cache)
    for key in (index._load_index() if index is not None else ()):
        if key[0] not in sigs:
            sigs.append(key[0])
    return sigs


def test_warm_up_processes_share_no_kernel_cache_file():
    """tests.helpers.warm compiles the encoders and, split between two processes, each dtype's decoder at
    once (conftest); numba saves a function's index and data files apart, so two processes saving
    *different* signatures of one function at once can leave an index naming the other's code.  So each
    layout's decoder calls copies of the helpers of its own (codec._numba._layout_namespace): every numba
    function its kernel can reach is named after the layout, so its cache files are the layout's own.
    Before 2026-12-07 ``_tables`` was compiled by both parts (four signatures in one index) and every
    decoder helper by every dtype's decoder."""
    from numba.core.registry import CPUDispatcher

    from codec import _numba
    from codec.layouts import LAYOUTS

    for lay in LAYOUTS:
        kernel = _numba._decoder(lay)
        ns = kernel.py_func.__globals__
        assert ns is _numba._layout_namespace(lay) and kernel.py_func.__qualname__.endswith("." + lay.name)
        own = _numba.own_functions(ns)
        assert {"_open_chunk", "_finish_chunk", "_tables", "_sparse_chunks"} <= set(own)
        assert all(f.py_func.__qualname__.endswith("." + lay.name) for f in own.values())
        shared = [f for name, f in ns.items() if isinstance(f, CPUDispatcher) and name not in own]
        assert all(f.targetoptions.get("inline") == "always" for f in shared)    # inlined: no cache file
