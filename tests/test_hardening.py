"""Hardening: buffers that alias each other, outputs that cannot take the values, caller inputs that must
stay untouched."""
import ml_dtypes
import numpy as np
import pytest

import codec
from codec import format as fmt
from tests.helpers import make_values


def _mixed_stream(checksum):
    """bf16 with RAW (random bits), CONST and coded chunks."""
    x = np.random.default_rng(4).integers(0, 65536, 3 * 4096, dtype=np.uint16).view(ml_dtypes.bfloat16)
    x[4096:8192] = ml_dtypes.bfloat16(1.5)                       # a CONST chunk
    x[8192:] = make_values("gaussian", "bfloat16", 4096, 1, -1.0)  # a coded chunk
    blob = np.frombuffer(bytes(codec.encode(x, chunk_size=4096, checksum=checksum)), np.uint8)
    kinds = {c["kind"] for c in codec.inspect(blob)["chunks"]}
    assert kinds == {"raw", "const", "coded"}, kinds
    return x, blob


@pytest.mark.parametrize("backend", ["numba", "reference"])
@pytest.mark.parametrize("checksum", [False, True])
@pytest.mark.parametrize("where", ["start", "inside", "tail", "straddle_end", "straddle_start"])
def test_decode_refuses_an_out_that_overlaps_the_stream(backend, checksum, where):
    x, blob = _mixed_stream(checksum)
    nb = x.nbytes
    buf = np.zeros(nb + len(blob) + 256, np.uint8)
    o = {"start": 0, "inside": 64, "tail": nb - len(blob) // 2, "straddle_end": nb - 8,
         "straddle_start": 0}[where]
    out_at = 0 if where != "straddle_start" else 100
    stream_at = o if where != "straddle_start" else 0
    buf[stream_at:stream_at + len(blob)] = blob
    before = buf.copy()
    out = buf[out_at:out_at + nb].view(ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="overlaps the stream"):
        codec.decode(buf[stream_at:stream_at + len(blob)], out=out, backend=backend)
    assert np.array_equal(buf, before)                         # refused before anything was written
    # beside each other (no overlap) it decodes
    far = np.zeros(nb, np.uint8).view(ml_dtypes.bfloat16)
    codec.decode(buf[stream_at:stream_at + len(blob)], out=far, backend=backend)
    assert np.array_equal(far.view(np.uint16), x.view(np.uint16))


def test_header_tables_are_not_views_of_the_callers_buffer():
    x, blob = _mixed_stream(True)
    buf = bytearray(blob.tobytes())
    h = fmt.parse_header(buf)
    kinds, crcs = h.kinds.copy(), h.crcs.copy()
    buf[fmt.parse_header(buf).payload_start - 1] ^= 0xFF       # scribble over the table after parsing
    for i in range(len(buf)):
        buf[i] = 0
    assert np.array_equal(h.kinds, kinds) and np.array_equal(h.crcs, crcs)
