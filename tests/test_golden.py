"""Golden streams: the bytes of every format version decode forever; those of the versions the encoders
write (format v7, v9 where a stream has a row-repeat section, v10 where it has a row filter / codebook family v2)
are pinned
(regenerate only with a version bump)."""
import numpy as np
import pytest

import codec
from codec.codebook import REF_MIN
from codec.format import DRAFT_VERSIONS, FILTER_VERSION, FORMAT_VERSION, READ_VERSIONS, REPEATS_VERSION
from codec.layouts import layout_named
from tests import golden
from tests.helpers import assert_bit_equal, np_dtype

WRITTEN_VERSIONS = (FORMAT_VERSION, REPEATS_VERSION, FILTER_VERSION)   # what the encoders write: their bytes are pinned


@pytest.mark.parametrize("case", golden.cases(), ids=golden.case_id)
def test_golden_stream(case):
    version, name = case
    m, raw, want = golden.read(version, name)
    x = np.frombuffer(raw, dtype=np_dtype(m["dtype"])).reshape(m.get("shape", [-1]))
    assert codec.inspect(want)["format_version"] == version
    assert_bit_equal(codec.decode(want), x)                       # old streams decode forever
    if version not in WRITTEN_VERSIONS:
        return
    got = codec.encode(x, chunk_size=m["chunk_size"], checksum=m["checksum"])
    assert got == want, (f"encoder output changed for {name}: bump codec.format.FORMAT_VERSION or the "
                         "codebook family version and regenerate with python -m tests.golden.make_golden")


def test_every_version_has_golden_streams():
    assert golden.versions() == [v for v in READ_VERSIONS if v not in DRAFT_VERSIONS]


def test_v2_changed_no_chunk_of_v1_but_the_sign_mode():
    """Format v2 changed no coding decision but the sign mode: a v1 golden stream's chunks that keep
    their sign (mixed-sign data) are byte-identical in the v2 golden stream of the same input."""
    for name in golden.manifest(1):
        m, raw, old = golden.read(1, name)
        m2, raw2, new = golden.read(2, name)
        assert raw == raw2
        ho, hn = codec.format.parse_header(old), codec.format.parse_header(new)
        info = codec.inspect(new)["chunks"]
        for i in range(ho.n_chunks):
            if info[i].get("sign", "stored") == "stored":
                a, b = ho.chunk_span(i)
                c, d = hn.chunk_span(i)
                assert old[a:b] == new[c:d], (name, i)


def test_v3_streams_name_codebook_family_2_and_use_its_new_shapes():
    from codec.codebook import n_codebooks

    fams, new_ids = set(), 0
    for version, name in golden.cases():
        buf = golden.read(version, name)[2]
        fams.add((version, codec.format.parse_header(buf).family_version))
        if version == 3:
            new_ids += sum(c.get("codebook", 0) >= n_codebooks(1) for c in codec.inspect(buf)["chunks"])
    assert fams == {(1, 1), (2, 1), (3, 2), (4, 2), (5, 2), (6, 2), (7, 2), (9, 2), (10, 2)}
    assert new_ids > 0


def test_golden_covers_every_chunk_kind_mode_and_sign():
    kinds, modes, signs = set(), set(), set()
    for version, name in golden.cases():
        info = codec.inspect(golden.read(version, name)[2])
        for c in info["chunks"]:
            kinds.add(c["kind"])
            modes.add(c.get("zero_block_size"))
            signs.add((version, c.get("sign")))
    assert kinds == {"coded", "const", "raw", "sparse"}
    assert {0, 16, 256, 1024} <= modes
    assert {(v, s) for v in (2, 3) for s in ("stored", "positive", "negative")} | {(1, "stored")} <= signs
    v2 = [(golden.read(v, n)[0], c) for v in (2, 3) for n in golden.manifest(v)
          for c in codec.inspect(golden.read(v, n)[2])["chunks"]]
    assert any(c.get("dropped_high_bits") for _, c in v2)
    # a chunk whose fitted reference exponent fell below REF_MIN (clamped: the window reaches field 0)
    assert any(c.get("ref_exponent") == REF_MIN - layout_named(m["dtype"]).bias for m, c in v2)


def test_v4_changed_only_the_head():
    """Format v4 changed the stream head only: every v3 golden stream's payloads are byte-identical in
    the v4 stream of the same input, whose head is compact where it has at most COMPACT_MAX_CHUNKS chunks
    (and shorter), the fixed-width one otherwise."""
    fmt = codec.format
    layouts = set()
    for name in golden.manifest(3):
        _, raw, old = golden.read(3, name)
        _, raw4, new = golden.read(4, name)
        assert raw == raw4
        ho, hn = fmt.parse_header(old), fmt.parse_header(new)
        assert bytes(old[ho.payload_start:]) == bytes(new[hn.payload_start:])
        assert (hn.kinds == ho.kinds).all() and (hn.ends == ho.ends).all() and hn.shape == ho.shape
        compact = bool(hn.flags & fmt.FLAG_COMPACT)
        assert compact == (hn.n_chunks <= fmt.COMPACT_MAX_CHUNKS)
        assert hn.payload_start < ho.payload_start if compact else hn.payload_start == ho.payload_start
        layouts.add(compact)
    assert layouts == {True, False}
    kinds = {int(k) for n in golden.manifest(4) if n not in golden.manifest(3)
             for k in fmt.parse_header(golden.read(4, n)[2]).kinds}
    assert kinds == {fmt.KIND_RAW, fmt.KIND_CODED, fmt.KIND_CONST}      # the new cases: every kind, compact


def _mean_reference(lay, words, hd) -> int:
    """The reference exponent the mean of a coded chunk's values matches for its codebook's shape (what
    versions 3-4's encoder chose for that shape): the statistics of the values it codes."""
    from codec.codebook import codebook_params, load_family, mean_matches
    from codec.layouts import log2_magnitude, split

    if hd.zero_blocks is not None:
        words = words[np.repeat(~hd.zero_blocks, 1 << hd.mode)[:len(words)]]
    e, sm = split(words, lay)
    nonzero = (words & ((1 << (8 * lay.itemsize - 1)) - 1)) != 0
    n_log = int(nonzero.sum())
    m = (int(log2_magnitude(e, sm, lay)[nonzero].sum()) << 8) // n_log if n_log else 0
    return mean_matches(m, load_family().mean_offsets, codebook_params(hd.codebook)[0])[1]


def test_v5_changed_only_the_fit():
    """Format v5 changed the encoder's fit, not the layout: every v4 golden input's v5 stream has v4's
    chunk kinds, zero-block modes and sign modes, and some v5 chunks (an attention map's, Adam's second
    moment's) are coded at the top-of-window reference, above their mean's."""
    fmt = codec.format
    top = set()
    for name in golden.manifest(5):
        m, raw, new = golden.read(5, name)
        lay = layout_named(m["dtype"])
        words = np.frombuffer(raw, dtype=lay.uint)
        hn = fmt.parse_header(new)
        if name in golden.manifest(4):
            _, raw4, old = golden.read(4, name)
            assert raw4 == raw
            ho = fmt.parse_header(old)
            assert (hn.kinds == ho.kinds).all() and hn.flags == ho.flags and hn.shape == ho.shape
        for i in np.flatnonzero(hn.kinds == fmt.KIND_CODED):
            hd = fmt.parse_chunk_head(hn, new, int(i))
            if name in golden.manifest(4):
                h4 = fmt.parse_chunk_head(ho, old, int(i))
                assert (hd.mode, hd.sign, hd.narrow, hd.shift) == (h4.mode, h4.sign, h4.narrow, h4.shift), (name, i)
            chunk = words[i * m["chunk_size"]:(i + 1) * m["chunk_size"]]
            if hd.ref > _mean_reference(lay, chunk, hd):
                top.add(name)
    assert {"softmax_bf16", "adam_sq_f32"} <= top


def _chunks_kept_but(old_version, new_version, changed) -> int:
    """Every ``old_version`` golden input's ``new_version`` stream (same input, shape and chunk count) has
    the old stream's chunks byte for byte (so their kinds too) but where ``changed(header, stream, i)``
    says the new version coded chunk ``i`` its new way, which must then be strictly smaller; returns how
    many chunks did."""
    fmt = codec.format
    became = 0
    for name in golden.manifest(old_version):
        _, raw, old = golden.read(old_version, name)
        _, raw_new, new = golden.read(new_version, name)
        assert raw == raw_new
        ho, hn = fmt.parse_header(old), fmt.parse_header(new)
        assert hn.shape == ho.shape and hn.n_chunks == ho.n_chunks
        for i in range(hn.n_chunks):
            (a, b), (c, d) = ho.chunk_span(i), hn.chunk_span(i)
            if changed(hn, new, i):
                assert d - c < b - a, (name, i)
                became += 1
            else:
                assert hn.kinds[i] == ho.kinds[i] and old[a:b] == new[c:d], (name, i)
    return became


def test_v6_changed_only_sparse_chunks():
    """Format v6 added SPARSE chunks and changed nothing else: every v5 golden input's v6 stream has v5's
    chunks byte for byte where v6 did not choose SPARSE, and a SPARSE chunk is smaller than the payload
    v5 stored for it; the new cases hold SPARSE chunks in fixed-width and compact heads, with checksums."""
    fmt = codec.format
    assert _chunks_kept_but(5, 6, lambda h, buf, i: h.kinds[i] == fmt.KIND_SPARSE) > 0
    heads = {bool(fmt.parse_header(golden.read(6, n)[2]).flags & fmt.FLAG_COMPACT)
             for n in golden.manifest(6) if fmt.KIND_SPARSE in fmt.parse_header(golden.read(6, n)[2]).kinds}
    assert heads == {True, False}


def test_v7_changed_only_explicit_chunks():
    """Format v7 added explicit tables and changed nothing else: every v6 golden input's v7 stream has v6's
    chunks byte for byte but where v7 coded one with its own table (CB_EXPLICIT), which is then smaller
    than what v6 stored; the new cases hold explicit chunks with and without zero-block bitmaps, in
    fixed-width and compact heads, with checksums, next to fitted chunks of the same stream."""
    fmt = codec.format
    explicit = lambda h, buf, i: h.kinds[i] == fmt.KIND_CODED and fmt.parse_chunk_head(h, buf, i).codebook == fmt.CB_EXPLICIT  # noqa: E731
    assert _chunks_kept_but(6, 7, explicit) > 0
    seen = set()
    for name in golden.manifest(7):
        buf = golden.read(7, name)[2]
        h = fmt.parse_header(buf)
        for i in np.flatnonzero(h.kinds == fmt.KIND_CODED):
            hd = fmt.parse_chunk_head(h, buf, int(i))
            seen.add((hd.codebook == fmt.CB_EXPLICIT, hd.mode > 0, bool(h.flags & fmt.FLAG_COMPACT), h.checksum))
            if hd.codebook == fmt.CB_EXPLICIT:
                assert int(hd.table.sum()) == fmt.TOTAL
    assert {(True, False, False, False), (True, False, True, False), (True, True, True, True), (False, False, False, False)} <= seen
    info = codec.inspect(golden.read(7, "mixture_zeros_f16")[2])["chunks"]    # inspect names the table
    assert all(c["shape"] == "explicit" and sum(c["frequencies"]) == fmt.TOTAL and c["table_nbytes"] > 4 for c in info)


def test_v9_changed_only_the_row_repeat_section():
    """Format v9 added the row-repeat section and changed nothing else: each v9 golden stream is the version-7
    stream of its input with the repeated rows cleared to +0, but for the version byte, FLAG_REPEATS and the
    section after the chunk table (in a fixed-width head and in a compact one with checksums)."""
    fmt = codec.format
    heads = set()
    for name in golden.manifest(9):
        m, raw, want = golden.read(9, name)
        x = np.frombuffer(raw, dtype=np_dtype(m["dtype"])).reshape(m["shape"])
        h = fmt.parse_header(want)
        rep = h.repeats
        assert h.version == REPEATS_VERSION and h.flags & fmt.FLAG_REPEATS and rep.row == m["shape"][-1]
        cleared = codec.repeats.cleared(x.reshape(-1).view(h.layout.uint), rep.row, rep.dst)
        v7 = bytes(codec.encode(cleared.view(x.dtype).reshape(x.shape), chunk_size=m["chunk_size"],
                                checksum=m["checksum"], partition=[0, x.size]))     # (partition: no section)
        h7 = fmt.parse_header(v7)
        assert h7.version == FORMAT_VERSION and h7.repeats is None
        assert v7[h7.payload_start:] == want[h.payload_start:]
        assert (h7.kinds == h.kinds).all() and (h7.ends == h.ends).all()
        rows = x.reshape(-1, rep.row).view(h.layout.uint)
        assert (rows[rep.dst] == rows[rep.src]).all() and not np.isin(rep.src, rep.dst).any()
        heads.add((bool(h.flags & fmt.FLAG_COMPACT), h.checksum))
    assert heads == {(False, False), (True, True)}


def test_v10_changed_only_the_row_filter():
    """Format v10 added the row filter and changed nothing else: each chunk of a v10 golden stream is the chunk
    of the same index of a version-7 (or 9) stream, of the input's words as they are where the section does not
    name the chunk, of its FILTER_UP words where it does; the header differs by the version byte, FLAG_FILTER
    and the section after the chunk table (and the row-repeat section, where there is one)."""
    fmt = codec.format
    seen = set()
    for name in golden.manifest(10):
        m, raw, want = golden.read(10, name)
        x = np.frombuffer(raw, dtype=np_dtype(m["dtype"])).reshape(m["shape"])
        h = fmt.parse_header(want)
        assert h.version == FILTER_VERSION and h.flags & fmt.FLAG_FILTER and h.filter.width == m["shape"][-1]
        words = x.reshape(-1).view(h.layout.uint)
        if h.repeats is not None:
            words = codec.repeats.cleared(words, h.repeats.row, h.repeats.dst)
        lay, cs = h.layout, m["chunk_size"]
        up = codec.filters.forward(words, lay, cs, h.filter.width)
        olds = [bytes(codec.api._encode_host(codec.backends.get("reference"), w, lay, x.shape, cs, m["checksum"], 0,
                                             fmt.header_nbytes(x.ndim, h.n_chunks, m["checksum"]), None, b""))
                for w in (words, up)]
        for j in range(h.n_chunks):
            old = olds[int(h.filter.chunks[j])]
            ho = fmt.parse_header(old)
            a, b = ho.chunk_span(j)
            c, d = h.chunk_span(j)
            assert old[a:b] == want[c:d], (name, j)
        seen.add((bool(h.filter.chunks.all()), h.repeats is not None, h.checksum))
    assert seen == {(True, False, False), (False, False, True), (False, True, False)}
