"""Format 9's row-repeat section (codec.repeats chooses it, codec.format packs and parses it, codec.api
applies it): rows that repeat an earlier row bit for bit cost a few bytes each, every path decodes them."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codec
from codec import format as fmt
from codec import repeats
from codec.layouts import layout_for
from tests.helpers import (DTYPES, assert_bit_equal, bits, interpret_triton_without_gpu, make_values, np_dtype,
                           padded_batch)

interpret_triton_without_gpu()                   # before any generated kernel is imported


def _big(dtype, seed=1):
    """A padded batch of at least repeats.MIN_TENSOR_BYTES, rows of 256 values."""
    batch = -(-repeats.MIN_TENSOR_BYTES // (128 * 256 * np.dtype(np_dtype(dtype)).itemsize)) + 1
    return padded_batch(dtype, batch, 128, 256, seed, 40)


def _expected_repeats(x):
    """The rows that equal an earlier row and are not all +0, and the first row equal to each."""
    u = bits(x).reshape(-1, x.shape[-1])
    _, first, inv = np.unique(u, axis=0, return_index=True, return_inverse=True)
    src = first[inv.ravel()]
    dst = np.flatnonzero((src != np.arange(len(u))) & u.any(1))
    return dst, src[dst]


@pytest.fixture
def small_tensors(monkeypatch):
    """Search tensors of any size (the section's choice, not the size cut, is under test)."""
    monkeypatch.setattr(repeats, "MIN_TENSOR_BYTES", 0)
    monkeypatch.setattr(repeats, "GATE_BYTES", 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_padded_batch_gets_a_section_and_decodes_bit_exact(dtype):
    x = _big(dtype)
    before = bits(x).copy()
    blob = codec.encode(x)
    assert_bit_equal(x, before.view(x.dtype).reshape(x.shape))               # input untouched
    h = fmt.parse_header(blob)
    dst, src = _expected_repeats(x)
    assert h.version == fmt.REPEATS_VERSION and h.flags & fmt.FLAG_REPEATS
    assert h.repeats.row == 256 and (h.repeats.dst == dst).all() and (h.repeats.src == src).all()
    y = codec.decode(blob)
    assert y.shape == x.shape
    assert_bit_equal(y, x)
    out = np.empty_like(x)
    assert codec.decode(blob, out=out) is out
    assert_bit_equal(out, x)
    plain = codec.encode(x, partition=[0, x.size])                            # partition: no section
    assert fmt.parse_header(plain).version == fmt.FORMAT_VERSION
    assert len(blob) < 0.8 * len(plain)
    assert len(blob) <= codec.max_encoded_size(x)
    info = codec.inspect(blob)["row_repeats"]
    assert info["rows"] == len(dst) and info["row_values"] == 256 and info["nbytes"] == h.repeats.nbytes


def test_host_backends_and_torch_and_out_write_the_same_bytes():
    torch = pytest.importorskip("torch")
    x = _big("bfloat16", 2)
    blob = bytes(codec.encode(x, backend="reference"))
    assert bytes(codec.encode(x, backend="numba")) == blob
    t = torch.from_numpy(bits(x).view(np.int16).copy()).view(torch.bfloat16).reshape(x.shape)
    tb = bytes(codec.encode(t))
    assert fmt.parse_header(tb).flags & fmt.FLAG_TORCH and tb[7:] == blob[7:]    # same but for the flags
    buf = np.zeros(codec.max_encoded_size(x), np.uint8)
    assert bytes(codec.encode(x, out=buf)) == blob
    y = codec.decode(tb)
    assert isinstance(y, torch.Tensor) and torch.equal(y.view(torch.int16), t.view(torch.int16))
    for backend in ("reference", "numba"):
        assert_bit_equal(codec.decode(blob, backend=backend), x)


@pytest.mark.parametrize("checksum", [False, True])
def test_chunk_ranges_and_slices_take_rows_from_other_chunks(small_tensors, monkeypatch, checksum):
    x = padded_batch("float16", 6, 32, 40, 3, 10)                             # 7680 values, rows of 40
    flat = bits(x).reshape(-1)
    cs = 1000                                                                 # rows straddle chunks
    blob = codec.encode(x, chunk_size=cs, checksum=checksum)
    h = fmt.parse_header(blob)
    assert h.repeats is not None and h.n_chunks == 8
    assert (h.repeats.src // (cs // 40) != h.repeats.dst // (cs // 40)).any()  # sources in other chunks
    monkeypatch.setattr(fmt, "REPEAT_COPY_WORDS", 100)                        # rows copied a few at a time
    for first in range(h.n_chunks + 1):
        for last in range(first, h.n_chunks + 1):
            got = codec.decode_chunks(blob, first, last)
            assert (bits(got) == flat[first * cs:min(last * cs, x.size)]).all(), (first, last)
            part = codec.slice_stream(blob, first, last)
            assert (bits(codec.decode(part)) == flat[first * cs:min(last * cs, x.size)]).all(), (first, last)
    shards = codec.shard_streams(blob, [0, 3000, 7680])
    assert (bits(codec.decode(shards[1])) == flat[3000:]).all()


def test_a_corrupt_source_chunk_is_found_by_its_checksum(small_tensors):
    x = padded_batch("bfloat16", 6, 32, 40, 4, 10)
    blob = bytearray(codec.encode(x, chunk_size=1000, checksum=True))
    h = fmt.parse_header(blob)
    d = int(h.repeats.dst[-1])
    s = int(h.repeats.src[-1])
    c_dst, c_src = d * 40 // 1000, s * 40 // 1000
    assert c_dst != c_src
    a, _ = h.chunk_span(c_src)
    blob[a + 5] ^= 0x10
    with pytest.raises(codec.FormatError, match=f"chunk {c_src}: checksum"):
        codec.decode_chunks(bytes(blob), c_dst, c_dst + 1)


def test_no_section_where_there_is_nothing_to_gain(small_tensors, monkeypatch):
    x = padded_batch("bfloat16", 6, 32, 40, 5, 10)
    for y, why in [(x.reshape(-1), "flat"),
                   (make_values("gaussian", "bfloat16", 8000, 6).reshape(200, 40), "no repeats"),
                   (np.zeros((200, 40), x.dtype), "zero rows are the chunks' (+0 blocks)"),
                   (padded_batch("bfloat16", 6, 32, 16, 5, 10), "rows of 32 bytes")]:
        assert fmt.parse_header(codec.encode(y)).repeats is None, why
    halves = codec.partition(x.size, 2, x.dtype, chunk_size=1280)
    assert fmt.parse_header(codec.encode(x, chunk_size=1280, partition=halves)).repeats is None
    monkeypatch.setattr(fmt, "WRITE_VERSION", 6)          # a section extends version 7's chunks only
    assert fmt.parse_header(codec.encode(x)).version == 6


def test_a_section_larger_than_what_it_saves_is_dropped(small_tensors):
    """Every row the same constant: the chunks are CONST with or without the section, which would only add
    its bytes: the encoder, having coded both, keeps the stream without it (version 7)."""
    x = np.ones((400, 40), np_dtype("bfloat16"))
    blob = codec.encode(x, chunk_size=4000)
    h = fmt.parse_header(blob)
    assert h.repeats is None and h.version == fmt.FORMAT_VERSION and (h.kinds == fmt.KIND_CONST).all()
    assert repeats.find(bits(x).reshape(-1), x.shape, 2) is not None          # (the search did find the rows)
    buf = np.zeros(codec.max_encoded_size(x, chunk_size=4000), np.uint8)
    assert bytes(codec.encode(x, chunk_size=4000, out=buf)) == bytes(blob)
    assert_bit_equal(codec.decode(blob), x)


def test_a_section_that_does_not_pay_is_dropped_within_the_bound(monkeypatch):
    """Rows of random bits, two of them +0: every chunk is stored raw, clearing the repeat changes no
    payload, so a section would only add bytes to a stream already at max_encoded_size; forced on them, the
    encoder writes the stream without it (with or without ``out``)."""
    x = make_values("random_bits", "float16", 4096, 9).reshape(64, 64)
    x[3] = x[40] = 0
    monkeypatch.setattr(repeats, "find", lambda w, shape, itemsize: (64, np.array([40]), np.array([3]),
                                                                         fmt.pack_repeats(64, [40], [3])))
    bound = codec.max_encoded_size(x, chunk_size=512)
    blob = codec.encode(x, chunk_size=512)
    h = fmt.parse_header(blob)
    assert (h.kinds == fmt.KIND_RAW).all() and len(blob) == bound
    assert h.repeats is None and h.version == fmt.FORMAT_VERSION
    buf = np.zeros(bound, np.uint8)
    assert bytes(codec.encode(x, chunk_size=512, out=buf)) == bytes(blob)
    assert_bit_equal(codec.decode(blob), x)


def test_the_device_encoder_and_decoder_agree_with_the_host(small_tensors):
    """The Triton kernels (interpreted here, on a GPU in CI's device run): a host tensor sent to them takes
    the same section (found on the device's words) and the same bytes; the stream decodes there too."""
    pytest.importorskip("triton")
    x = padded_batch("bfloat16", 4, 8, 32, 7, 3)                              # 1024 values, rows of 64 bytes
    want = bytes(codec.encode(x, chunk_size=512))
    assert fmt.parse_header(want).repeats is not None
    assert bytes(codec.encode(x, chunk_size=512, backend="triton")) == want
    assert_bit_equal(codec.decode(want, backend="triton"), x)
    import torch
    from codegen import device

    h, words = device.decode_stream(torch.frombuffer(bytearray(want), dtype=torch.uint8))   # a stream "there"
    assert h.repeats is not None and (words.numpy().view(np.uint16) == bits(x).reshape(-1)).all()
    ones = np.ones((32, 32), x.dtype)                     # a section larger than it saves: dropped there too
    want = bytes(codec.encode(ones, chunk_size=512))
    assert fmt.parse_header(want).repeats is None
    assert bytes(codec.encode(ones, chunk_size=512, backend="triton")) == want


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from(DTYPES), rows=st.integers(2, 60), width=st.sampled_from([16, 17, 48, 64]),
       distinct=st.integers(1, 8), seed=st.integers(0, 2**32 - 1), cs=st.integers(7, 3000),
       tail=st.booleans(), checksum=st.booleans())
def test_any_row_pattern_round_trips(dtype, rows, width, distinct, seed, cs, tail, checksum):
    """Rows drawn from a few patterns (zero rows among them), with the search's cuts off: whatever section
    the encoder writes, every host backend decodes the tensor and any chunk range of it bit for bit."""
    rng = np.random.default_rng(seed)
    pats = make_values("gaussian", dtype, distinct * width, seed % 1000).reshape(distinct, width)
    pats[0] = 0
    x = pats[rng.integers(0, distinct, rows)]
    if tail:                                                                 # a 3-D shape
        x = x.reshape(1, rows, width)
    mp = pytest.MonkeyPatch()
    mp.setattr(repeats, "MIN_TENSOR_BYTES", 0)
    mp.setattr(repeats, "MIN_ROW_BYTES", 1)
    mp.setattr(repeats, "GATE_BYTES", 1)
    mp.setattr(repeats, "MIN_GAIN", 0)
    try:
        blob = codec.encode(x, chunk_size=cs, checksum=checksum, backend="reference")
        assert codec.encode(x, chunk_size=cs, checksum=checksum, backend="numba") == blob
    finally:
        mp.undo()
    h = fmt.parse_header(blob)
    if h.repeats is not None:
        u = bits(x).reshape(-1, width)
        assert (u[h.repeats.dst] == u[h.repeats.src]).all() and u[h.repeats.dst].any(1).all()
    for backend in ("reference", "numba"):
        assert_bit_equal(codec.decode(blob, backend=backend), x)
    first = int(rng.integers(0, h.n_chunks + 1))
    last = int(rng.integers(first, h.n_chunks + 1))
    assert (bits(codec.decode_chunks(blob, first, last)) == bits(x).reshape(-1)[first * cs:min(last * cs, x.size)]).all()


def test_vectorised_varints_are_the_scalar_ones():
    """The section's (and SPARSE chunks') varints, packed and parsed many at a time: the bytes of the scalar
    LEB128 form, back to the values, at every width up to the limit."""
    rng = np.random.default_rng(12)
    for limit in (fmt.SPARSE_GAP_BYTES, fmt.REPEAT_VARINT_BYTES):
        for top in (0, 1, 127, 128, 2**14 - 1, 2**14, 2**21 - 1, 2**35, 2**49 - 1):
            if top >> (7 * limit):
                continue
            v = rng.integers(0, top + 1, 500)
            v[0] = top
            b = fmt._pack_varints(v, limit)
            assert b == b"".join(fmt._varint(int(u)) for u in v), (limit, top)
            assert (fmt._parse_varints(np.frombuffer(b, np.uint8), len(v), limit, ValueError, "x") == v).all()


# ---- bad input: forged sections ---------------------------------------------------------------------

def _stream_with(section: bytes, *, compact=False, checksum=False, numel=4000, row=40, chunk_size=1000):
    """A valid stream of ``numel`` bf16 values (rows of ``row``) whose head carries ``section`` as its
    row-repeat section, as an encoder would write it."""
    x = make_values("gaussian", "bfloat16", numel, 8).reshape(-1, row)
    plain = bytes(codec.encode(x, chunk_size=chunk_size, checksum=checksum, partition=[0, x.size]))
    h = fmt.parse_header(plain)
    sizes = np.diff(h.ends, prepend=0)
    head = fmt.pack_header(h.layout, h.shape, h.chunk_size, h.flags, h.kinds, sizes, h.crcs, compact=compact,
                           version=fmt.REPEATS_VERSION)
    head = bytearray(head)
    at = len(head) - (4 * h.n_chunks + 4 if checksum else 0)
    head[6] |= fmt.FLAG_REPEATS
    head[at:at] = section
    if checksum:                                   # the header CRC covers the section
        head[-4:] = fmt.crc32c(bytes(head[:-4])).to_bytes(4, "little")
    return bytes(head) + plain[h.payload_start:], x


def _section(*fields, raw: bytes | None = None) -> bytes:
    body = b"".join(fmt._varint(v) for v in fields) if raw is None else raw
    return fmt._varint(len(body)) + body


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("checksum", [False, True])
def test_a_hand_made_section_decodes(compact, checksum):
    blob, x = _stream_with(_section(40, 2, 4, 3, 3, 6), compact=compact, checksum=checksum)
    h = fmt.parse_header(blob)
    assert bool(h.flags & fmt.FLAG_COMPACT) == compact
    assert (h.repeats.dst == [4, 8]).all() and (h.repeats.src == [1, 2]).all()
    want = bits(x).copy()
    want[4] = want[1]
    want[8] = want[2]
    assert (bits(codec.decode(blob)) == want).all()
    for n in range(len(blob)):                      # every truncation is refused (never a crash)
        with pytest.raises(codec.FormatError):
            codec.decode(blob[:n])


@pytest.mark.parametrize("section, message", [
    (_section(0, 1, 0, 1), "do not make two rows"),
    (_section(4000, 1, 0, 1), "do not make two rows"),
    (_section(40, 0), "0 repeated rows"),
    (_section(40, 100, *[0] * 200), "100 repeated rows of 100"),
    (_section(40, 2, 4, 3, 1), "do not hold 4 varints"),
    (_section(40, 2, 4, 3, 1, 1, 7), "do not hold 4 varints"),
    (_section(40, 1, 100, 1), "repeated row 100 outside"),
    (_section(40, 1, 120, 1), "run past"),
    (_section(40, 1, 5, 0), "not an earlier one"),
    (_section(40, 1, 5, 6), "not an earlier one"),
    (_section(40, 2, 4, 3, 1, 4), "itself a repeat"),
    (_section(raw=b"\x28\x01\x85\x00\x01"), "not in its shortest form"),
    (_section(raw=b"\x28\x01" + b"\x80" * 7 + b"\x01\x01"), "longer than 7 bytes"),
    (_section(raw=b"\xa8\x00\x01\x05\x01"), "row width is not in its shortest form"),
    (b"\x80\x80\x40\x28", "1048576 bytes"),
])
def test_forged_sections_say_what_is_wrong(section, message):
    blob, _ = _stream_with(section)
    with pytest.raises(codec.FormatError, match=message):
        codec.decode(blob)
    with pytest.raises(codec.FormatError):
        codec.decode_chunks(blob, 0, 1)


def test_the_flag_needs_version_9_and_the_section_is_covered_by_the_header_crc():
    blob, _ = _stream_with(_section(40, 1, 5, 1), checksum=True)
    v7 = bytearray(blob)
    v7[4] = 7
    with pytest.raises(codec.FormatError, match="unknown flags 0x9 in a version-7 stream"):
        codec.decode(bytes(v7))
    with pytest.raises(ValueError, match="version-7 stream has no row-repeat section"):
        fmt.pack_header(layout_for(np_dtype("bfloat16")), (4,), 4, 0, [0], [8], version=7, repeats=b"\x01\x00")
    bad = bytearray(blob)
    h = fmt.parse_header(blob)
    at = h.payload_start - (4 * h.n_chunks + 4) - 1                  # the section's last byte: a distance
    bad[at] = 2
    with pytest.raises(codec.FormatError, match="header checksum mismatch"):
        codec.decode(bytes(bad))


@pytest.mark.parametrize("compact", [False, True])
def test_a_device_decoder_reads_the_section_from_the_stream_prefix(compact):
    """codegen.device reads only a stream's first bytes (header_extent of them, asking again while the
    extent grows): the section lies there, before the payloads."""
    blob, _ = _stream_with(_section(40, 2, 4, 3, 3, 6), compact=compact, checksum=True,
                           chunk_size=1000 if compact else 100)       # 40 chunks: a table past the first read
    pre = blob[:fmt.header_nbytes(fmt.MAX_NDIM, 0, False)]           # what codegen.device reads first
    asks = 0
    while fmt.header_extent(pre) > len(pre):
        pre = blob[:fmt.header_extent(pre)]
        asks += 1
    h = fmt.parse_header(pre, len(blob))
    assert (h.repeats.dst == fmt.parse_header(blob).repeats.dst).all() and h.payload_start <= len(pre)
    assert asks <= (0 if compact else 2)          # the chunk table, then the section's size
