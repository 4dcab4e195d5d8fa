"""Format 8 (a draft): explicit tables whose symbols carry more of each value (mantissa bits below the
leading one, the sign) where the chunk's values leave information there.  Written by the reference encoder
where codec.format.WRITE_VERSION is 8 (codec.api routes numba's encodes of it there; the numba twins of the
layout choice are tested here, for when they are wired in); read by the reference and numba decoders (the
same words, the same FormatError); refused by the device decoders' head parse until their kernels have the
layouts."""
import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codec
from codec import codebook as cbk
from codec import format as fmt
from tests.helpers import assert_bit_equal, bits, np_dtype
from tests.test_explicit_tables import _mixed_scales

DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2")


@pytest.fixture
def v8(monkeypatch):
    monkeypatch.setattr(fmt, "WRITE_VERSION", 8)


def _layouts_of(blob) -> list:
    """The symbol layout of each chunk with an explicit table (None for the other chunks)."""
    h = fmt.parse_header(blob)
    out = []
    for i in range(h.n_chunks):
        hd = fmt.parse_chunk_head(h, blob, i) if h.kinds[i] == fmt.KIND_CODED else None
        out.append(hd.layout if hd is not None and hd.table is not None else None)
    return out


def _layout_input(dtype, n, seed):
    """Values at mixed scales (no one shape of the family fits them), runs of +0, and a sign that follows
    the magnitude (negative below 0.01 in magnitude, as GELU's): every layout's explicit table beats the
    fitted one on them."""
    x = _mixed_scales(dtype, n, seed, zero_runs=True).astype(np.float64)
    return np.where(np.abs(x) < 0.01, -np.abs(x), np.abs(x)).astype(np_dtype(dtype))


def _gelu(n, seed):
    x = np.random.default_rng(seed).standard_normal(n)
    return x * 0.5 * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


def _cases():
    """Every dtype and layout; the README run takes each dtype's widest (every part of the key), the slow
    run the others."""
    for dtype in DTYPES:
        every = cbk.layouts(codec.layouts.layout_named(dtype).man_bits)
        for layout in every:
            yield (dtype, layout) if layout == every[-1] else pytest.param(dtype, layout, marks=pytest.mark.slow)


@pytest.mark.parametrize("dtype, layout", list(_cases()))
def test_every_layout_round_trips(v8, monkeypatch, dtype, layout):
    """Each layout forced on every chunk that takes an explicit table (values at mixed scales, both signs,
    runs of +0, escapes where the layout's window is narrow): the stream says that layout, decodes to the
    same bits on every host path, and the input is left as it was."""
    monkeypatch.setattr(cbk, "layouts", lambda man_bits: [layout])
    x = _layout_input(dtype, 12000, 7)
    before = bits(x).copy()
    blob = bytes(codec.encode(x, chunk_size=4096, checksum=True, backend="reference"))
    assert blob[4] == 8
    assert layout in _layouts_of(blob), "the input was built to need explicit tables"
    assert np.array_equal(bits(x), before)
    for backend in ("reference", "numba"):
        assert_bit_equal(codec.decode(blob, backend=backend), x)


@pytest.mark.parametrize("dtype, values, sign_in_symbol", [
    pytest.param("float8_e4m3fn", lambda: np.random.default_rng(1).standard_normal(1 << 15) * 0.02, False,
                 marks=pytest.mark.slow),
    pytest.param("float16", lambda: np.random.default_rng(2).standard_normal(1 << 15) * 1e-6, False,  # subnormals
                 marks=pytest.mark.slow),
    ("bfloat16", lambda: _gelu(1 << 15, 3), True),
    pytest.param("float8_e5m2", lambda: _gelu(1 << 15, 4), True, marks=pytest.mark.slow),
])
def test_layouts_pay_where_the_values_leave_information(dtype, values, sign_in_symbol):
    """Where the mantissa below the leading bit is not uniform (fp8, subnormals) or the sign depends on the
    magnitude (GELU), format 8 picks a layout with those bits in the symbol and writes a smaller stream
    than format 7; its choice is never larger than format 7's explicit table by more than its layout byte."""
    x = values().astype(np_dtype(dtype))
    fmt.WRITE_VERSION = 7
    try:
        b7 = bytes(codec.encode(x, chunk_size=8192, backend="reference"))
        fmt.WRITE_VERSION = 8
        b8 = bytes(codec.encode(x, chunk_size=8192, backend="reference"))
    finally:
        fmt.WRITE_VERSION = fmt.FORMAT_VERSION
    chosen = [lay for lay in _layouts_of(b8) if lay is not None]
    assert chosen and all(lay != 0 for lay in chosen)
    assert all(bool(lay & cbk.LAYOUT_SIGN) == sign_in_symbol for lay in chosen)
    assert len(b8) < len(b7)
    info = codec.inspect(b8)["chunks"][0]
    assert info["shape"] == "explicit" and info["sign_in_symbol"] == sign_in_symbol
    assert_bit_equal(codec.decode(b8), x)


def _one_chunk(layout, dtype="bfloat16"):
    """A version-8 stream with a chunk whose explicit table has ``layout``: the stream (a fresh copy),
    that chunk's index and the offset of its payload."""
    blob, i, a = _layout_stream(layout, dtype)
    return bytearray(blob), i, a


@functools.lru_cache(maxsize=None)
def _layout_stream(layout, dtype):
    fmt.WRITE_VERSION = 8
    orig = cbk.layouts
    cbk.layouts = lambda man_bits: [layout]
    try:
        blob = bytes(codec.encode(_layout_input(dtype, 12000, 7), chunk_size=4096, backend="reference"))
    finally:
        fmt.WRITE_VERSION = fmt.FORMAT_VERSION
        cbk.layouts = orig
    i = _layouts_of(blob).index(layout)
    return blob, i, fmt.parse_header(blob).chunk_span(i)[0]


def _head(field):
    return fmt.CHUNK_HEAD.offset[field]


@pytest.mark.parametrize("layout, dtype, at, value, message", [
    (1, "bfloat16", fmt.CHUNK_HEAD.size, 0x08, "symbol layout 0x8 undefined for bfloat16"),
    (2, "float8_e4m3fn", fmt.CHUNK_HEAD.size, 3, "symbol layout 0x3 undefined for float8_e4m3fn"),
    (4, "bfloat16", _head("sign"), fmt.SIGN_STORED, "the sign is in the symbols but the sign mode is 0"),
    (1, "bfloat16", _head("shift"), 6, "shift 6 and narrow 0 exceed the 5 low mantissa bits"),
])
def test_forged_layouts_are_refused(layout, dtype, at, value, message):
    """A layout byte, or a head that disagrees with its layout, forged: FormatError naming what is wrong,
    from every host decoder and from the device decoders' head parse."""
    blob, i, a = _one_chunk(layout, dtype)
    blob[a + at] = value
    for backend in ("reference", "numba"):
        with pytest.raises(codec.FormatError, match=message):
            codec.decode(bytes(blob), backend=backend)
    h = fmt.parse_header(bytes(blob))
    prefix = np.frombuffer(bytes(blob), np.uint8)[a:a + fmt.chunk_head_extent(h, i)]
    with pytest.raises(codec.FormatError, match=f"chunk {i}: .*({message})"):
        fmt.parse_chunk_heads(h, [i], prefix, np.array([0]))


def test_escapes_outside_the_dtype_are_refused():
    """An escape whose key names a field above the dtype's: FormatError, not a wrong value."""
    blob, i, a = _one_chunk(7)                           # 2 fields in the window: many escapes
    h = fmt.parse_header(bytes(blob))
    hd = fmt.parse_chunk_head(h, bytes(blob), i)
    assert hd.n_esc > 0
    end = h.chunk_span(i)[1]
    blob[end - 2:end] = (0xFFFF).to_bytes(2, "little")
    with pytest.raises(codec.FormatError, match="exponent field out of range for bfloat16"):
        codec.decode(bytes(blob))


def test_device_head_parse_refuses_layouts_it_cannot_decode():
    """The device decoders have no symbol layouts yet: their head parse says so instead of misdecoding."""
    blob, i, a = _one_chunk(4)
    h = fmt.parse_header(bytes(blob))
    prefix = np.frombuffer(bytes(blob), np.uint8)[a:a + fmt.chunk_head_extent(h, i)]
    with pytest.raises(NotImplementedError, match="symbol layout 4"):
        fmt.parse_chunk_heads(h, [i], prefix, np.array([0]))


def test_layout_histograms_are_sums_of_the_fine_one():
    """codec.codebook.layout_histogram against keys computed value by value."""
    x = _mixed_scales("float16", 4096, 9, zero_runs=True)
    w = bits(x).astype(np.int64)
    fine = cbk.fine_histogram(w, 5, 10)
    assert int(fine[-1]) == int((w == 0).sum())
    nz = w[w != 0]
    for layout in cbk.layouts(10):
        k, s = cbk.layout_parts(layout)
        key = ((nz >> 10) & 31) << (1 + k) | ((nz >> (9 - k)) & ((2 << k) - 1))
        if s:
            key = key << 1 | (nz >> 15)
        want = np.bincount(key, minlength=32 << cbk.symbol_bits(layout))
        assert np.array_equal(cbk.layout_histogram(fine, 5, 10, layout), want)


@settings(max_examples=30, deadline=None)
@given(layout=st.sampled_from([1, 4, 6]), pos=st.integers(0, 400), value=st.integers(0, 255))
def test_byte_flips_in_layout_chunks_agree(layout, pos, value):
    """Any byte of a layout chunk's head, table, words or plane forged: the reference and numba decoders
    agree (the same words, or FormatError with the same message)."""
    blob, i, a = _one_chunk(layout)
    blob[a + pos] = value
    results = []
    for backend in ("reference", "numba"):
        try:
            results.append(bits(codec.decode(bytes(blob), backend=backend)).tobytes())
        except codec.FormatError as e:
            results.append(str(e))
    assert results[0] == results[1]


@pytest.mark.slow          # (compiles the twins: ~20 s)
@pytest.mark.parametrize("dtype", DTYPES)
def test_numba_chooses_as_the_reference(dtype):
    """The numba twins of the layout choice (fine histogram, gate, choice) give codec.codebook's results,
    on inputs that take each kind of answer (no table, a table without and with extra bits or the sign)."""
    from codec import _numba

    lay = codec.layouts.layout_named(dtype)
    E, M = lay.exp_bits, lay.man_bits
    fam = cbk.load_family()
    inputs = [_layout_input(dtype, 8192, 11), _mixed_scales(dtype, 8192, 12),
              (np.random.default_rng(13).standard_normal(8192) * 0.02).astype(np_dtype(dtype)),
              _gelu(8192, 14).astype(np_dtype(dtype))]
    answers = set()
    for x in inputs:
        w = bits(x)
        for step in (1, 17):
            fine = cbk.fine_histogram(w, E, M, step)
            assert np.array_equal(_numba._fine_hist(w, len(w), step, E, M), fine)
        hist = cbk.sample_histogram(w, E, M, 17)
        n_zero = int((w == 0).sum())
        mag = (w & ((1 << (E + M)) - 1)) != 0
        e = ((w >> M) & ((1 << E) - 1)).astype(np.int64)
        lg = np.where(mag, codec.layouts.log2_magnitude(e, (w & ((1 << (M + 1)) - 1)).astype(np.uint32), lay), 0)
        cb, ref = cbk.select_codebook(len(w), n_zero, int(mag.sum()), int(lg.sum()), hist, E, lay.has_inf, fam)
        f = cbk.chunk_tables(cb, ref, E, lay.has_inf)[0]
        f64 = np.asarray(f, np.int64)
        orlow = int(np.bitwise_or.reduce(w & ((1 << (M - 1)) - 1)))
        cl = np.asarray(fam.code_lengths, np.int64)
        for skipped in (0, min(3, int(fine[-1]))):
            sample = cbk.fine_histogram(w, E, M, 17)
            sk = min(skipped, int(sample[-1]))
            want = cbk.explicit_choice_may_pay(sample, f, ref, len(w), fam.code_lengths, E, M, sk, orlow)
            got = _numba._explicit_choice_may_pay(sample, f64, ref, len(w), cl, E, M, sk, orlow)
            assert got == want
            full = cbk.fine_histogram(w, E, M)
            want = cbk.explicit_choice(full, f, ref, fam.code_lengths, E, M, skipped, orlow)
            fe = np.zeros(cbk.N_SYMBOLS, np.int64)
            layout, r = _numba._explicit_choice(full, f64, ref, cl, E, M, skipped, orlow, fe)
            if want is None:
                assert layout == -1
                answers.add(None)
            else:
                assert (layout, r) == (want[1], want[2]) and np.array_equal(fe, want[0])
                answers.add(bool(layout))
    assert True in answers
    assert None in answers or M <= 3      # (fp8's Gaussians too gain from mantissa bits in the symbol)
