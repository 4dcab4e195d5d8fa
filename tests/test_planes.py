"""Split-send planes (codec.planes): low-bit plane packed exactly as the reference packs planes, head + low
restore every word, the input is untouched, and coding the head costs what coding the whole tensor costs."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import codec
from codec.layouts import layout_for
from codec.planes import join_low, split_low, worth_splitting
from reference.codec import pack_bits
from tests.helpers import DISTRIBUTIONS, DTYPES, assert_bit_equal, bits, make_values


@given(dtype=st.sampled_from(DTYPES), dist=st.sampled_from(DISTRIBUTIONS), n=st.integers(0, 3000),
       seed=st.integers(0, 2**31 - 1))
def test_split_join_roundtrip_matches_reference_packing(dtype, dist, n, seed):
    x = make_values(dist, dtype, n, seed)
    before = bits(x).copy()
    head, low = split_low(x)
    lay = layout_for(x.dtype)
    width = lay.man_bits - 1
    w = bits(x).astype(np.uint32)
    assert low.tobytes() == pack_bits(w & ((1 << width) - 1), width)       # the reference's plane packing
    assert np.array_equal(bits(head), (w & ~np.uint32((1 << width) - 1)).astype(lay.uint))
    assert_bit_equal(join_low(codec.decode(codec.encode(head)), low), x)
    assert np.array_equal(bits(x), before)                                  # the input was not modified


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_split_costs_no_ratio_where_it_is_used(dtype, dist):
    x = make_values(dist, dtype, 1 << 16, 1, log10_sigma=-2)
    head, low = split_low(x)
    split_bytes = len(codec.encode(head)) + low.size
    whole = len(codec.encode(x))
    if worth_splitting(x):
        assert split_bytes <= whole * 1.005 + 64
    else:                                   # skipped for float8 and where it would have cost ratio
        assert layout_for(x.dtype).man_bits < 7 or split_bytes > whole * 1.005 + 64
    if dtype == "bfloat16" and dist in ("gaussian", "laplace", "student_t"):
        assert worth_splitting(x)                                           # the case it is made for


def test_join_rejects_a_wrong_plane_size():
    head, low = split_low(make_values("gaussian", "bfloat16", 100, 0))
    with pytest.raises(codec.FormatError, match="low-bit plane"):
        join_low(head, low[:-1])


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("numel,parts", [(0, 3), (1, 4), (100_000, 4), (1 << 18, 4), (300_001, 7)])
def test_partition_aligned_shards_are_contiguous_standalone_streams(dtype, numel, parts):
    x = make_values("gaussian", dtype, numel, 3, log10_sigma=-2)
    bounds = codec.partition(numel, parts, x.dtype)
    assert len(bounds) == parts + 1 and bounds[0] == 0 and bounds[-1] == numel
    blob = codec.encode(x, partition=bounds)
    assert blob == codec.encode(x)                     # codec.partition keeps the default chunk size
    streams = codec.shard_streams(blob, bounds)
    info = codec.inspect(blob)
    payload = bytes(blob[info["header_nbytes"]:])
    cut = b"".join(s[codec.inspect(s)["header_nbytes"]:] for s in streams)
    assert cut == payload                              # each shard is one contiguous range, in order
    for (a, b), s in zip(zip(bounds, bounds[1:]), streams):
        assert_bit_equal(codec.decode(s), x[a:b])


def test_partition_picks_an_aligned_chunk_size_or_says_why():
    x = make_values("gaussian", "bfloat16", 3 * 4096, 0)
    blob = codec.encode(x, partition=[0, 4096, 8192, 3 * 4096])
    assert codec.inspect(blob)["chunk_size"] == 4096
    assert len(codec.shard_streams(blob, [0, 4096, 8192, 3 * 4096])) == 3
    with pytest.raises(ValueError, match="codec.partition"):
        codec.encode(x, partition=[0, 4097, 3 * 4096])
    with pytest.raises(ValueError, match="rise from 0"):
        codec.encode(x, partition=[0, 9000, 8000, 3 * 4096])
    with pytest.raises(ValueError, match="chunk boundaries"):
        codec.shard_streams(codec.encode(x), [0, 100, 3 * 4096])


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_low_of_torch_tensors_matches_numpy(dtype):
    """The tensor-op split (what a GPU tensor gets, on its device) gives the NumPy/numba planes' bytes."""
    torch = pytest.importorskip("torch")
    from tests.helpers import bits

    x = make_values("random_bits", dtype, 1003, 4)
    head, low = split_low(x)
    signed = x.view({1: np.uint8, 2: np.int16, 4: np.int32}[x.itemsize])
    t = torch.from_numpy(signed.copy()).view(getattr(torch, dtype)).reshape(17, 59)
    th, tl = split_low(t)
    assert th.dtype == t.dtype and th.shape == t.shape
    assert np.array_equal(bits(th).reshape(-1), bits(head)) and np.array_equal(tl.numpy(), low)
    back = join_low(th, tl)
    assert np.array_equal(bits(back), bits(t))
    with pytest.raises(codec.FormatError):
        join_low(th, tl[:-1])
