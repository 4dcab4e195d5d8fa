"""The declared layouts (codec.records): everything derived from one field table agrees with itself and
with the bytes the format describes; the kernel rows name every column once."""
import struct

import numpy as np
import pytest

from codec import format as fmt
from codec.records import Record, Row


def test_stream_and_chunk_heads_are_the_documented_sizes():
    # codec/format.py's docstring: a 16-byte stream header, a 20-byte coded-chunk head
    assert fmt.STREAM_HEAD.size == 16 and fmt.CHUNK_HEAD.size == 20
    assert fmt.CHUNK_HEAD.offset["n_words"] == 16 and fmt.STREAM_HEAD.offset["chunk_size"] == 8


@pytest.mark.parametrize("rec", [fmt.STREAM_HEAD, fmt.CHUNK_HEAD])
def test_struct_dtype_offsets_and_constants_agree(rec):
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, rec.size * 3, dtype=np.uint8).tobytes()
    rows = np.frombuffer(raw, dtype=rec.dtype)
    for k in range(3):
        t = rec.unpack_from(raw, k * rec.size)
        for f in rec.names:
            assert t._asdict()[f] == rows[k][f], f
            w, at = rec.width[f], k * rec.size + rec.offset[f]
            if not rec.dtype[f].kind == "S":
                code = dict(rec.fields)[f]
                assert struct.unpack_from("<" + code, raw, at)[0] == t._asdict()[f]
        assert rec.pack(**t._asdict()) == raw[k * rec.size:(k + 1) * rec.size]
    consts = rec.constants()
    assert consts[f"{rec.prefix}_SIZE"] == rec.size
    assert sorted(v for k, v in consts.items() if k != f"{rec.prefix}_SIZE") == sorted(rec.offset.values())


def test_pack_refuses_missing_and_unknown_fields():
    rec = Record("t", [("a", "B"), ("b", "H")], prefix="T")
    assert rec.pack(a=1, b=2) == b"\x01\x02\x00"
    with pytest.raises(TypeError):
        rec.pack(a=1)
    with pytest.raises(TypeError):
        rec.pack(a=1, b=2, c=3)
    with pytest.raises(ValueError):
        Record("t", [("a", "B"), ("a", "H")], prefix="T")


def test_kernel_rows_name_each_column_once_and_constants_do_not_collide():
    rows = pytest.importorskip("codegen.rows")
    consts = rows.constants()                 # raises on a name two rows define
    for row in rows.ROWS:
        assert consts[f"{row.prefix}_WIDTH"] == row.width == len(set(row.columns))
        assert row.order(**{c: i for i, c in enumerate(row.columns)}) == list(range(row.width))
    with pytest.raises(TypeError):
        Row("r", ["a", "b"], "R").order(a=1)


def test_every_kernel_reads_its_rows_through_the_constants():
    """The generated CUDA source declares every row column and chunk-head offset the header uses."""
    gen = pytest.importorskip("codegen.generate")
    rows = pytest.importorskip("codegen.rows")
    _, src = gen.render("cuda", "bfloat16", "sm_90")
    for name, value in {**rows.constants(), **fmt.CHUNK_HEAD.constants()}.items():
        assert f"static constexpr int {name} = {value};" in src
