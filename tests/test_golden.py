"""Golden streams: format v1 / codebook family v1 bytes are pinned (regenerate only with a version bump)."""
import json
from pathlib import Path

import numpy as np
import pytest

import codec
from tests.helpers import assert_bit_equal, np_dtype

GOLDEN = Path(__file__).resolve().parent / "golden"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_golden_stream(name):
    m = MANIFEST[name]
    x = np.frombuffer((GOLDEN / f"{name}.input").read_bytes(), dtype=np_dtype(m["dtype"]))
    want = (GOLDEN / f"{name}.zccl").read_bytes()
    assert_bit_equal(codec.decode(want), x)                       # old streams decode forever
    got = codec.encode(x, chunk_size=m["chunk_size"], checksum=m["checksum"])
    assert got == want, (f"encoder output changed for {name}: bump codec.format.FORMAT_VERSION or the "
                         "codebook family version and regenerate with python -m tests.golden.make_golden")


def test_golden_covers_every_chunk_kind_and_mode():
    kinds, modes = set(), set()
    for name in MANIFEST:
        info = codec.inspect((GOLDEN / f"{name}.zccl").read_bytes())
        for c in info["chunks"]:
            kinds.add(c["kind"])
            modes.add(c.get("zero_block_size"))
    assert kinds == {"coded", "const", "raw"}
    assert {0, 16} <= modes
