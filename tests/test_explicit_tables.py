"""Format 7's explicit tables: a coded chunk that no table of the analytic family fits carries its own
frequencies.  The reference and numba write the same bytes; every decoder reads them; a forged table is
refused with one message from every backend (codec.format.parse_explicit_table)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codec
from codec import codebook as cbk
from codec import format as fmt
from tests.helpers import assert_bit_equal, bits, make_values, np_dtype

BACKENDS = ("reference", "numba")


@pytest.fixture
def v7(monkeypatch):
    monkeypatch.setattr(fmt, "WRITE_VERSION", 7)


def _mixed_scales(dtype, n, seed, zero_runs=False):
    """Segments of 128 values at scales 1e-3 .. 30 (rows of different scales in one chunk: what no one
    shape of the family fits), optionally with runs of +0 (zero-block payloads)."""
    rng = np.random.default_rng(seed)
    scales = np.array([1.0, 1e-3, 30.0, 1e-2])[rng.integers(0, 4, -(-n // 128))]
    x = (rng.standard_normal(n) * np.repeat(scales, 128)[:n]).astype(np.float64)
    if zero_runs:
        x[: n // 3] = np.where(np.arange(n // 3) % 256 < 128, 0.0, x[: n // 3])
    return x.astype(np_dtype(dtype))


def _explicit_chunks(blob):
    h = fmt.parse_header(blob)
    return [i for i in range(h.n_chunks)
            if h.kinds[i] == fmt.KIND_CODED and fmt.parse_chunk_head(h, blob, i).table is not None]


@pytest.mark.parametrize("dtype", ["bfloat16", *(pytest.param(d, marks=pytest.mark.slow)
                                                 for d in ("float16", "float32", "float8_e4m3fn"))])
@pytest.mark.parametrize("zero_runs", [False, True])
def test_numba_writes_the_reference_bytes(v7, dtype, zero_runs):
    x = _mixed_scales(dtype, 5000, 1, zero_runs)
    before = bits(x).copy()
    want = bytes(codec.encode(x, chunk_size=1024, checksum=True, backend="reference"))
    assert want[4] == 7 and _explicit_chunks(want), "the input was built to need explicit tables"
    assert bytes(codec.encode(x, chunk_size=1024, checksum=True, backend="numba")) == want
    assert np.array_equal(bits(x), before)
    for backend in BACKENDS:
        assert_bit_equal(codec.decode(want, backend=backend), x)


def test_explicit_tables_only_where_they_pay(v7):
    """Gaussian values are what the family models: every chunk keeps its fitted table; the same values
    at scales changing within the chunk get explicit tables, and a smaller stream than format 6's."""
    g = make_values("gaussian", "bfloat16", 1 << 16, 3, -2.0)
    assert not _explicit_chunks(bytes(codec.encode(g, chunk_size=16384)))
    x = _mixed_scales("bfloat16", 1 << 16, 4)
    b7 = bytes(codec.encode(x, chunk_size=16384))
    fmt.WRITE_VERSION = 6
    b6 = bytes(codec.encode(x, chunk_size=16384))
    assert len(_explicit_chunks(b7)) == 4 and len(b7) < 0.95 * len(b6)
    assert_bit_equal(codec.decode(b7), codec.decode(b6))


@settings(max_examples=30, deadline=None)
@given(counts=st.lists(st.integers(0, 70_000), min_size=cbk.N_SYMBOLS, max_size=cbk.N_SYMBOLS).filter(any))
def test_quantised_tables_sum_to_total_and_agree(counts):
    """The integer quantiser (codebook.explicit_frequencies, numba's twin): sums to TOTAL, every counted
    symbol at least 1, no uncounted one; the same integers in both, and the table bytes they pack to."""
    from codec import _numba

    c = np.array(counts, dtype=np.int64)
    f = cbk.explicit_frequencies(c, cbk.load_family().code_lengths)
    assert f.sum() == cbk.TOTAL and np.array_equal(f > 0, c > 0)
    g = np.empty(cbk.N_SYMBOLS, np.int64)
    _numba._explicit_frequencies(c, _numba._family64()[2], g)
    assert np.array_equal(f, g)
    packed = fmt.pack_explicit_table(f)
    assert len(packed) == cbk.explicit_table_nbytes(f) == _numba._explicit_nbytes(f)
    out = np.zeros(fmt.EXPLICIT_MAX_BYTES, np.uint8)
    assert bytes(out[:_numba._pack_table(f, out)]) == packed


def _one_chunk_stream():
    """A one-chunk version-7 stream whose chunk has an explicit table, and that chunk's offset."""
    x = _mixed_scales("bfloat16", 2048, 5)
    fmt.WRITE_VERSION = 7
    try:
        blob = bytes(codec.encode(x, chunk_size=2048, backend="reference"))
    finally:
        fmt.WRITE_VERSION = fmt.FORMAT_VERSION
    h = fmt.parse_header(blob)
    assert _explicit_chunks(blob) == [0]
    return blob, h.chunk_span(0)[0]


def _set(pos, *values):
    """Bytes from ``pos`` of the table (negative: of the chunk head before it) set to ``values``."""
    def change(b, t):
        b[t + pos:t + pos + len(values)] = bytes(values)
        return b
    return change


def _cut(b, t, keep):
    """The one-chunk stream with its payload cut ``keep`` bytes into the table (the head restamped)."""
    h = fmt.parse_header(bytes(b))
    payload = bytes(b[h.chunk_span(0)[0]:t + keep])
    return bytearray(fmt.pack_header(h.layout, h.shape, h.chunk_size, h.flags, h.kinds, [len(payload)], version=7)
                     + payload)


@pytest.mark.parametrize("change, message", [
    (_set(0, 79, 2), "window symbols 79..80 outside 0..79"),
    (_set(1, 0), "frequencies sum to"),                     # fewer symbols listed: the sum falls short
    (_set(2, 0x85), "not in its shortest form|longer than 2 bytes|sum to"),
    (_set(2, 0x80, 0x00), "not in its shortest form"),
    (_set(2, 0x80, 0x80), "longer than 2 bytes"),
    (_set(fmt.CHUNK_HEAD.offset["ref"] - fmt.CHUNK_HEAD.size, 0xEC, 0xFF), "exponent field -[0-9]+ outside bfloat16's"),
    (lambda b, t: _cut(b, t, 1), "ends inside its symbol range"),
    (lambda b, t: _cut(b, t, 5), "ends inside its frequencies"),
])
def test_forged_tables_are_refused_alike(change, message):
    """A table's fields forged: FormatError naming what is wrong, the same from every decoder and from the
    vectorised head parse the device decoders use."""
    blob, a = _one_chunk_stream()
    forged = bytes(change(bytearray(blob), a + fmt.CHUNK_HEAD.size))
    errors = []
    for backend in BACKENDS:
        with pytest.raises(codec.FormatError, match=message) as e:
            codec.decode(forged, backend=backend)
        errors.append(str(e.value))
    assert errors[0] == errors[1]


def test_version_6_streams_cannot_carry_explicit_tables():
    blob, a = _one_chunk_stream()
    v6 = bytearray(blob)
    v6[fmt.STREAM_HEAD.offset["version"]] = 6
    for backend in BACKENDS:
        with pytest.raises(codec.FormatError, match="codebook id 65535 outside family v2"):
            codec.decode(bytes(v6), backend=backend)


@settings(max_examples=25, deadline=None)
@given(pos=st.integers(0, 200), value=st.integers(0, 255))
def test_byte_flips_in_tables_agree(pos, value):
    """Any byte of a chunk head and table forged: the decoders agree (the same words, or FormatError with
    the same message), and so does the vectorised parse."""
    blob, a = _one_chunk_stream()
    b = bytearray(blob)
    b[a + pos % (fmt.CHUNK_HEAD.size + 40)] = value
    results = []
    for backend in BACKENDS:
        try:
            results.append(bits(codec.decode(bytes(b), backend=backend)).tobytes())
        except codec.FormatError as e:
            results.append(str(e))
    assert results[0] == results[1]
    h = fmt.parse_header(bytes(b))
    ext = fmt.chunk_head_extent(h, 0)
    prefix = np.frombuffer(bytes(b), np.uint8)[a:a + ext]
    try:
        one = fmt.parse_chunk_head(h, bytes(b), 0)
    except fmt.FormatError as e:
        with pytest.raises(fmt.FormatError) as got:
            fmt.parse_chunk_heads(h, [0], prefix, np.array([0]))
        assert str(got.value) == str(e)
        return
    many = fmt.parse_chunk_heads(h, [0], prefix, np.array([0]))
    assert many["states"][0] == one.states and np.array_equal(many["tables"][0], one.table)
