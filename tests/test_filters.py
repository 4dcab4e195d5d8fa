"""Format 10's row filter (codec.filters chooses it and transforms the words, codec.format packs and parses
its section, codec.api applies it): each value's magnitude coded as its difference to the value one row
above in its chunk, where that pays, chunk by chunk; every path decodes it."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codec
from codec import _filters_numba, filters, repeats
from codec import format as fmt
from codec.layouts import layout_for
from tests.helpers import (DTYPES, assert_bit_equal, bits, column_scaled, interpret_triton_without_gpu, make_values,
                           np_dtype)

interpret_triton_without_gpu()                   # before any generated kernel is imported


def _big(dtype, seed=1, masked=16):
    """A column-scaled tensor of at least filters.MIN_TENSOR_BYTES, rows of 128 values."""
    rows = -(-filters.MIN_TENSOR_BYTES // (128 * np.dtype(np_dtype(dtype)).itemsize)) + 64
    return column_scaled(dtype, rows, 128, seed, masked)


@pytest.fixture
def small_tensors(monkeypatch):
    """Try the filter on tensors of any size (the choice, not the size cut, is under test)."""
    monkeypatch.setattr(filters, "MIN_TENSOR_BYTES", 0)


def _unfiltered(x, **kw):
    mp = pytest.MonkeyPatch()
    mp.setattr(filters, "MIN_TENSOR_BYTES", 1 << 62)
    try:
        return codec.encode(x, **kw)
    finally:
        mp.undo()


@pytest.mark.parametrize("dtype", DTYPES)
def test_column_scaled_tensor_gets_a_filter_and_decodes_bit_exact(dtype):
    x = _big(dtype)
    before = bits(x).copy()
    blob = codec.encode(x)
    assert (bits(x) == before).all()                                         # input untouched
    h = fmt.parse_header(blob)
    assert h.version == fmt.FILTER_VERSION and h.flags & fmt.FLAG_FILTER and h.repeats is None
    assert h.filter.kind == fmt.FILTER_UP and h.filter.width == 128 and h.filter.chunks.all()
    assert_bit_equal(codec.decode(blob), x)
    out = np.empty_like(x)
    assert codec.decode(blob, out=out) is out
    assert_bit_equal(out, x)
    plain = _unfiltered(x)
    assert fmt.parse_header(plain).version == fmt.FORMAT_VERSION
    assert len(blob) < 0.95 * len(plain) and len(blob) <= codec.max_encoded_size(x)
    info = codec.inspect(blob)
    assert info["row_filter"] == {"filter": "up", "row_values": 128, "chunks": h.n_chunks, "nbytes": h.filter.nbytes}
    assert all(c["filtered"] for c in info["chunks"])


def test_host_backends_and_torch_and_out_write_the_same_bytes():
    torch = pytest.importorskip("torch")
    x = _big("bfloat16", 2)
    blob = bytes(codec.encode(x, backend="reference"))
    assert fmt.parse_header(blob).filter is not None
    assert bytes(codec.encode(x, backend="numba")) == blob
    t = torch.from_numpy(bits(x).view(np.int16).copy()).view(torch.bfloat16).reshape(x.shape)
    tb = bytes(codec.encode(t))
    assert fmt.parse_header(tb).flags & fmt.FLAG_TORCH and tb[7:] == blob[7:]    # same but for the flags
    buf = np.zeros(codec.max_encoded_size(x), np.uint8)
    assert bytes(codec.encode(x, out=buf)) == blob
    for backend in ("reference", "numba"):
        assert_bit_equal(codec.decode(blob, backend=backend), x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernels_and_torch_transform_as_numpy_does(dtype):
    """The numba kernels and the torch transforms give the NumPy specification's words, on random words (NaN
    payloads, -0, subnormals, every magnitude), chunk sizes that rows do not divide, any set of chunks."""
    torch = pytest.importorskip("torch")
    lay = layout_for(np_dtype(dtype))
    rng = np.random.default_rng(3)
    for n, cs, width in ((10007, 1000, 7), (4096, 1024, 128), (5000, 999, 1), (300, 1000, 128), (2000, 64, 31)):
        w = rng.integers(0, 1 << (8 * lay.itemsize), n, dtype=np.uint64).astype(lay.uint)
        keep = w.copy()
        want = filters.forward(w, lay, cs, width)
        assert (w == keep).all()
        assert (_filters_numba.filter_forward(w, lay, cs, width) == want).all()
        t = torch.from_numpy(w.view(lay.view_ints).copy()).view(lay.torch_words)
        assert (filters.forward_torch(t, lay, cs, width).view(lay.torch_view_ints).numpy().view(lay.uint) == want).all()
        chunks = rng.random(-(-n // cs)) < 0.6
        back = np.where(np.repeat(chunks, cs)[:n], want, w)             # filtered chunks only
        for inverse in (filters.inverse, _filters_numba.filter_inverse):
            got = back.copy()
            inverse(got, lay, cs, width, chunks)
            assert (got == w).all()
        got = torch.from_numpy(back.view(lay.view_ints).copy()).view(lay.torch_words)
        filters.inverse_torch(fmt.Filter(fmt.FILTER_UP, width, chunks, 0), got, lay, cs)
        assert (got.view(lay.torch_view_ints).numpy().view(lay.uint) == w).all()
        if len(chunks) > 2:                                             # from a later chunk on
            for inverse in (filters.inverse, _filters_numba.filter_inverse):
                part = back[cs:].copy()
                inverse(part, lay, cs, width, chunks, 1)
                assert (part == w[cs:]).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_gate_costs_the_same_in_every_backend(dtype, small_tensors):
    """The gate's integer costs (NumPy: the specification; numba; torch for device tensors) agree exactly, on
    column-scaled words (the gate opens), iid words (it stays closed) and all-+0 words (never opens)."""
    torch = pytest.importorskip("torch")
    lay = layout_for(np_dtype(dtype))
    M, k = lay.man_bits, lay.exp_bits + lay.man_bits
    nbins = (1 << (lay.exp_bits + 1)) + 1
    cases = {"columns": column_scaled(dtype, 2048, 128, 14, 8), "iid": make_values("gaussian", dtype, 2048 * 128, 15),
             "zeros": np.zeros(2048 * 128, np_dtype(dtype))}
    opened = {}
    for name, x in cases.items():
        w = bits(x).reshape(-1)
        at = filters.sample_offsets(len(w), 65536, 128)
        want = filters.numpy_costs(w, at, 128, k, M, nbins)
        assert tuple(map(int, _filters_numba.filter_costs(w, at, 128, k, M, nbins))) == want
        t = torch.from_numpy(w.view(lay.view_ints).copy()).view(lay.torch_words)
        assert filters.torch_costs(t, at, 128, k, M, nbins) == want
        opened[name] = filters.choose(w, (2048, 128), lay, 65536) == 128
        assert filters.choose(t, (2048, 128), lay, 65536, filters.torch_costs) == (128 if opened[name] else 0)
    assert opened == {"columns": True, "iid": False, "zeros": False}


def test_identical_rows_become_zero_and_first_rows_stay():
    lay = layout_for(np_dtype("bfloat16"))
    w = np.tile(np.array([0x3F80, 0xBF80, 0x0001, 0x7FC1], np.uint16), 6)     # rows of 4, all alike
    f = filters.forward(w, lay, 12, 4)
    assert (f[:4] == w[:4]).all() and (f[12:16] == w[12:16]).all()          # each chunk's first row
    assert (f[4:12] & 0x7FFF == 0).all() and (f[16:] & 0x7FFF == 0).all()    # the sign stays
    assert (f[4:12] >> 15 == w[4:12] >> 15).all()
    assert filters.zigzag(np.array([1, 0x7FFF, 2, 0x7FFE], np.uint16), 15, np.uint16(0x7FFF)).tolist() == [2, 1, 4, 3]


@pytest.mark.parametrize("checksum", [False, True])
def test_chunk_ranges_and_slices(small_tensors, checksum):
    x = column_scaled("bfloat16", 200, 40, 5, 4)
    x[100:130] = make_values("gaussian", "bfloat16", 30 * 40, 6).reshape(30, 40)    # rows no filter helps
    blob = codec.encode(x, chunk_size=1000, checksum=checksum)
    h = fmt.parse_header(blob)
    assert h.filter is not None and h.filter.chunks.any() and not h.filter.chunks.all()
    flat = bits(x).reshape(-1)
    for first in range(h.n_chunks + 1):
        for last in range(first, h.n_chunks + 1):
            got = codec.decode_chunks(blob, first, last)
            assert (bits(got) == flat[first * 1000:last * 1000]).all()
            part = codec.slice_stream(blob, first, last)
            ph = fmt.parse_header(part)
            assert (ph.filter is not None) == bool(h.filter.chunks[first:last].any())
            assert ph.version == (fmt.FILTER_VERSION if ph.filter is not None else fmt.FORMAT_VERSION)
            assert (bits(codec.decode(part)) == flat[first * 1000:last * 1000]).all()
    shards = codec.shard_streams(blob, [0, 4000, 8000])
    assert (np.concatenate([bits(codec.decode(s)) for s in shards]) == flat).all()


def test_filter_with_row_repeats(small_tensors, monkeypatch):
    """Repeated rows are cleared, then the rest filtered; the decoder undoes the filter, then copies rows."""
    monkeypatch.setattr(repeats, "MIN_TENSOR_BYTES", 0)
    monkeypatch.setattr(repeats, "GATE_BYTES", 1)
    x = column_scaled("float16", 400, 64, 7)
    x[300:400] = x[50]                                                      # 100 copies of one row
    blob = codec.encode(x, chunk_size=4096)
    h = fmt.parse_header(blob)
    assert h.version == fmt.FILTER_VERSION and h.repeats is not None and h.filter is not None
    assert h.filter.chunks[0] and (h.repeats.src == 50).all()     # the source row's chunk is filtered
    assert_bit_equal(codec.decode(blob), x)
    assert bytes(codec.encode(x, chunk_size=4096, backend="reference")) == bytes(blob)
    flat = bits(x).reshape(-1)
    for first in range(h.n_chunks):
        assert (bits(codec.decode_chunks(blob, first, first + 1)) == flat[first * 4096:(first + 1) * 4096]).all()
        assert (bits(codec.decode(codec.slice_stream(blob, first, h.n_chunks))) == flat[first * 4096:]).all()


def test_no_filter_where_there_is_nothing_to_gain(small_tensors):
    x = make_values("gaussian", "bfloat16", 64 * 1024, 8).reshape(-1, 256)     # iid: no column structure
    blob = codec.encode(x)
    assert fmt.parse_header(blob).version == fmt.FORMAT_VERSION and bytes(blob) == bytes(_unfiltered(x))
    for shape in ((x.size,), (x.size // 40000 + 1, 40000)):               # no rows / rows past half a chunk
        y = column_scaled("bfloat16", 1, x.size, 9).reshape(shape) if len(shape) == 1 else \
            column_scaled("bfloat16", shape[0], shape[1], 9)
        assert fmt.parse_header(codec.encode(y)).filter is None


def test_the_device_encoder_and_decoder_agree_with_the_host(small_tensors):
    """The Triton kernels (interpreted here, on a GPU in CI's device run): a host tensor sent to them takes
    the same filter (chosen on the device's words) and the same bytes; the stream decodes there too."""
    pytest.importorskip("triton")
    x = column_scaled("bfloat16", 32, 32, 10, 2)                              # 1024 values
    want = bytes(codec.encode(x, chunk_size=512))
    assert fmt.parse_header(want).filter is not None
    assert bytes(codec.encode(x, chunk_size=512, backend="triton")) == want
    assert_bit_equal(codec.decode(want, backend="triton"), x)
    import torch
    from codegen import device

    h, words = device.decode_stream(torch.frombuffer(bytearray(want), dtype=torch.uint8))   # a stream "there"
    assert h.filter is not None and (words.numpy().view(np.uint16) == bits(x).reshape(-1)).all()
    y = column_scaled("bfloat16", 32, 32, 12, 2)                              # + repeated rows: both sections
    y[20:32] = y[3]
    mp = pytest.MonkeyPatch()
    mp.setattr(repeats, "MIN_TENSOR_BYTES", 0)
    mp.setattr(repeats, "GATE_BYTES", 1)
    try:
        want = bytes(codec.encode(y, chunk_size=512))
        assert bytes(codec.encode(y, chunk_size=512, backend="triton")) == want
    finally:
        mp.undo()
    h = fmt.parse_header(want)
    assert h.filter is not None and h.repeats is not None
    assert_bit_equal(codec.decode(want, backend="triton"), y)
    h, words = device.decode_stream(torch.frombuffer(bytearray(want), dtype=torch.uint8))
    assert (words.numpy().view(np.uint16) == bits(y).reshape(-1)).all()


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from(DTYPES), rows=st.integers(2, 80), width=st.sampled_from([1, 3, 16, 33, 64]),
       seed=st.integers(0, 2**32 - 1), cs=st.integers(2, 3000), masked=st.integers(0, 3), checksum=st.booleans(),
       noise=st.booleans())
def test_any_column_pattern_round_trips(dtype, rows, width, seed, cs, masked, checksum, noise):
    """Column-scaled rows (or iid noise), the gate opened wide: whatever the encoder writes, both host backends
    write the same bytes and decode the tensor, and any chunk range of it, bit for bit."""
    x = column_scaled(dtype, rows, width, seed % 1000, min(masked, width - 1))
    if noise:
        x = make_values("gaussian", dtype, x.size, seed % 997).reshape(x.shape)
    mp = pytest.MonkeyPatch()
    mp.setattr(filters, "MIN_TENSOR_BYTES", 0)
    mp.setattr(filters, "MIN_SAVING", 1 << 20)                             # open wherever it saves at all
    try:
        blob = codec.encode(x, chunk_size=cs, checksum=checksum, backend="reference")
        assert codec.encode(x, chunk_size=cs, checksum=checksum, backend="numba") == blob
    finally:
        mp.undo()
    h = fmt.parse_header(blob)
    for backend in ("reference", "numba"):
        assert_bit_equal(codec.decode(blob, backend=backend), x)
    rng = np.random.default_rng(seed)
    first = int(rng.integers(0, h.n_chunks + 1))
    last = int(rng.integers(first, h.n_chunks + 1))
    assert (bits(codec.decode_chunks(blob, first, last)) == bits(x).reshape(-1)[first * cs:min(last * cs, x.size)]).all()


def _stream_with(section, *, compact=False, checksum=False, chunk_size=100):
    """A hand-made version-10 stream of 400 bf16 values (raw chunks) with the given filter section bytes."""
    lay = layout_for(np_dtype("bfloat16"))
    x = column_scaled("bfloat16", 10, 40, 11)
    n = -(-x.size // chunk_size)
    words = bits(x).reshape(-1)
    crcs = [fmt.crc32c(words[i * chunk_size:(i + 1) * chunk_size].tobytes()) for i in range(n)] if checksum else None
    head = fmt.pack_header(lay, x.shape, chunk_size, fmt.FLAG_CHECKSUM if checksum else 0, [fmt.KIND_RAW] * n,
                           [2 * min(chunk_size, x.size - i * chunk_size) for i in range(n)], crcs,
                           compact=compact if n <= fmt.COMPACT_MAX_CHUNKS else False,
                           version=fmt.FILTER_VERSION, filter=section)
    return head + words.tobytes(), x


def _section(body: bytes) -> bytes:
    return fmt._varint(len(body)) + body


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("checksum", [False, True])
def test_a_hand_made_section_decodes(compact, checksum):
    """Raw chunks whose words are filtered: the decoder undoes the filter on the chunks the bitmap names."""
    x = column_scaled("bfloat16", 10, 40, 11)
    lay = layout_for(x.dtype)
    chunks = np.array([True, False, True, True])
    stored = filters.forward(bits(x).reshape(-1), lay, 100, 40)
    stored = np.where(np.repeat(chunks, 100), stored, bits(x).reshape(-1))
    crcs = [fmt.crc32c(stored[i * 100:(i + 1) * 100].tobytes()) for i in range(4)] if checksum else None
    head = fmt.pack_header(lay, x.shape, 100, fmt.FLAG_CHECKSUM if checksum else 0, [fmt.KIND_RAW] * 4, [200] * 4,
                           crcs, compact=compact, version=fmt.FILTER_VERSION, filter=fmt.pack_filter(40, chunks))
    blob = head + stored.tobytes()
    h = fmt.parse_header(blob)
    assert bool(h.flags & fmt.FLAG_COMPACT) == compact and (h.filter.chunks == chunks).all()
    for backend in ("reference", "numba"):
        assert_bit_equal(codec.decode(blob, backend=backend), x)
    for n in range(h.payload_start):                      # every truncation of the head is refused
        with pytest.raises(codec.FormatError):
            codec.decode(blob[:n])


@pytest.mark.parametrize("section, message", [
    (_section(b""), "empty"),
    (_section(b"\x02\x28\x0f"), "unknown filter 2"),
    (_section(b"\x01\x00\x0f"), "rows of 0 values"),
    (_section(b"\x01\x64\x0f"), "rows of 100 values in chunks of 100"),
    (_section(b"\x01\x28"), "2 bytes, 3 for 4 chunks"),
    (_section(b"\x01\x28\x0f\x00"), "4 bytes, 3 for 4 chunks"),
    (_section(b"\x01\x28\x1f"), "padding bits set"),
    (_section(b"\x01\x28\x00"), "no chunk is filtered"),
    (_section(b"\x01\xa8\x00\x0f"), "row width is not in its shortest form"),
    (b"\x80\x80\x40\x01", "1048576 bytes"),
])
@pytest.mark.parametrize("compact", [False, True])
def test_forged_sections_say_what_is_wrong(section, message, compact):
    blob, _ = _stream_with(section, compact=compact)
    with pytest.raises(codec.FormatError, match=message):
        codec.decode(blob)
    with pytest.raises(codec.FormatError):
        codec.decode_chunks(blob, 0, 1)
    with pytest.raises(codec.FormatError):
        codec.inspect(blob)


def test_the_flag_needs_version_10_and_the_section_is_covered_by_the_header_crc():
    blob, _ = _stream_with(fmt.pack_filter(40, [True] * 4), checksum=True)
    v9 = bytearray(blob)
    v9[4] = 9
    with pytest.raises(codec.FormatError, match="unknown flags 0x11 in a version-9 stream"):
        codec.decode(bytes(v9))
    with pytest.raises(ValueError, match="version-9 stream has no row-filter section"):
        fmt.pack_header(layout_for(np_dtype("bfloat16")), (4,), 4, 0, [0], [8], version=9, filter=b"\x03\x01\x01\x01")
    bad = bytearray(blob)
    h = fmt.parse_header(blob)
    at = h.payload_start - (4 * h.n_chunks + 4) - 2                  # the section's row width
    bad[at] = 41
    with pytest.raises(codec.FormatError, match="header checksum mismatch"):
        codec.decode(bytes(bad))


def _both_sections(n_chunks, chunk_size, *, compact=False, checksum=True, filter_section=None):
    """A hand-made version-10 stream of raw chunks with a row-repeat section (rows of 40: row 5 repeats row 1)
    and a row-filter section naming every other chunk (the stored words need not be filtered to parse)."""
    lay = layout_for(np_dtype("bfloat16"))
    numel = n_chunks * chunk_size
    words = bits(make_values("gaussian", "bfloat16", numel, 13)).reshape(-1)
    crcs = [fmt.crc32c(words[i * chunk_size:(i + 1) * chunk_size].tobytes()) for i in range(n_chunks)] if checksum else None
    chunks = np.arange(n_chunks) % 2 == 0
    head = fmt.pack_header(lay, (numel // 40, 40), chunk_size, fmt.FLAG_CHECKSUM if checksum else 0,
                           [fmt.KIND_RAW] * n_chunks, [2 * chunk_size] * n_chunks, crcs, compact=compact,
                           version=fmt.FILTER_VERSION, repeats=fmt.pack_repeats(40, [5], [1]),
                           filter=fmt.pack_filter(40, chunks) if filter_section is None else filter_section)
    return head + words.tobytes(), chunks


@pytest.mark.parametrize("compact, n_chunks", [(False, 4), (True, 4), (False, 60), (False, 300)])
def test_a_device_decoder_reads_the_sections_from_the_stream_prefix(compact, n_chunks):
    """codegen.device reads a stream's first bytes (header_extent of them, asking again while the extent
    grows): both sections lie there, before the payloads, however long the chunk table."""
    blob, chunks = _both_sections(n_chunks, 80, compact=compact)
    pre = blob[:fmt.header_nbytes(fmt.MAX_NDIM, 0, False)]
    asks = 0
    while fmt.header_extent(pre) > len(pre):
        pre = blob[:fmt.header_extent(pre)]
        asks += 1
    h = fmt.parse_header(pre, len(blob))
    assert (h.filter.chunks == chunks).all() and (h.repeats.dst == [5]).all() and h.payload_start <= len(pre)
    assert fmt.header_extent(blob) == fmt.parse_header(blob).payload_start
    assert asks >= (1 if n_chunks > 30 else 0)


@pytest.mark.parametrize("compact", [False, True])
def test_a_forged_filter_after_a_row_repeat_section_is_refused(compact):
    for section, message in ((_section(b"\x01\x28"), "2 bytes, 3 for 4 chunks"),
                             (_section(b"\x01\x28\x10"), "chunk bitmap has padding bits set"), (b"\x05\x01", "")):
        blob, _ = _both_sections(4, 100, compact=compact, checksum=False, filter_section=section)
        with pytest.raises(codec.FormatError, match="row-filter section: " + (message if len(section) > 2 else "")):
            codec.decode(blob)
