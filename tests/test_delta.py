"""Delta streams (codec.delta): the numba kernels against the NumPy reference byte for byte, round trips
on every dtype including NaN payloads, -0, infinities and sign changes, in-place decoding, the golden
stream, and bad input."""
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codec
from codec import delta
from codec.delta import DELTA_HEAD, decode_delta, encode_delta, inspect_delta
from tests.helpers import DTYPES, assert_bit_equal, bits, np_dtype

GOLDEN = Path(__file__).parent / "golden" / "delta_v1.npz"


def _pair(dtype: str, n: int, p: float, seed: int, big: float = 0.05):
    """(base, new): real-looking values, a fraction ``p`` of them moved by a few units in the last
    place, a fraction ``big`` of those replaced by arbitrary words (NaNs, infinities, sign changes)."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0, 0.02, n).astype(np.float32).astype(np_dtype(dtype))
    new = base.copy()
    u = new.view(bits(new).dtype)
    at = np.flatnonzero(rng.random(n) < p)
    u[at] = (u[at].astype(np.int64) + rng.choice([-2, -1, 1, 2], at.size)).astype(u.dtype)
    wild = at[rng.random(at.size) < big]
    u[wild] = rng.integers(0, 1 << (8 * u.itemsize), wild.size, dtype=np.uint64).astype(u.dtype)
    return base, new


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [0.0, 1e-4, 0.03, 0.4, 1.0])
def test_numba_matches_reference_and_round_trips(dtype, p):
    base, new = _pair(dtype, 100_003, p, seed=int(p * 1e4))
    blob = encode_delta(new, base)
    assert blob == encode_delta(new, base, backend="reference")
    for backend in delta.BACKENDS:
        assert_bit_equal(decode_delta(blob, base, backend=backend), new)
    h = inspect_delta(blob)
    assert h.n_changed == int((bits(new) != bits(base)).sum()) and h.numel == base.size


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(DTYPES), n=st.integers(0, 3000), data=st.data())
def test_any_two_versions(dtype, n, data):
    """Arbitrary words on both sides (every special value, any change pattern, escapes of every kind)."""
    w = np.dtype(f"u{np_dtype(dtype).itemsize}")
    a = np.frombuffer(data.draw(st.binary(min_size=n * w.itemsize, max_size=n * w.itemsize)), w)
    mask = np.frombuffer(data.draw(st.binary(min_size=n, max_size=n)), np.uint8) < data.draw(st.integers(0, 256))
    b = np.where(mask, np.frombuffer(data.draw(st.binary(min_size=n * w.itemsize, max_size=n * w.itemsize)), w), a)
    base, new = a.view(np_dtype(dtype)), b.view(np_dtype(dtype))
    blob = encode_delta(new, base, checksum=True)
    assert blob == encode_delta(new, base, checksum=True, backend="reference")
    assert_bit_equal(decode_delta(blob, base), new)


def test_long_gaps_and_large_steps_escape():
    """A change after a gap of a million values and steps across the whole range go through escapes."""
    base = np.zeros(3_000_000, np.float32)
    new = base.copy()
    new[[5, 2_500_000, 2_999_999]] = [np.float32(-np.inf), np.float32(1e30), np.float32(np.nan)]
    blob = encode_delta(new, base)
    h = inspect_delta(blob)
    assert h.n_changed == 3 and h.n_step_esc == 3 and (h.n_gap_esc >= 1 or h.shift > 12)
    assert_bit_equal(decode_delta(blob, base), new)


def test_in_place_torch_and_input_untouched():
    torch = pytest.importorskip("torch")
    base_np, new_np = _pair("bfloat16", 50_000, 0.05, seed=3)
    base = torch.from_numpy(bits(base_np).view(np.int16).copy()).view(torch.bfloat16)
    new = torch.from_numpy(bits(new_np).view(np.int16).copy()).view(torch.bfloat16)
    keep_base, keep_new = base.clone(), new.clone()
    blob = encode_delta(new, base)
    assert torch.equal(base.view(torch.int16), keep_base.view(torch.int16))
    assert torch.equal(new.view(torch.int16), keep_new.view(torch.int16))
    fresh = decode_delta(blob, base)
    assert torch.equal(fresh.view(torch.int16), new.view(torch.int16))
    assert torch.equal(base.view(torch.int16), keep_base.view(torch.int16))
    same = decode_delta(blob, base, out=base)
    assert same is base and torch.equal(base.view(torch.int16), new.view(torch.int16))


def test_size_near_the_entropy_of_the_change():
    """3 % of positions (Bernoulli) each moved by one of 4 equally likely steps: the stream is near the
    entropy of that change, n H(p) + 2 bits per change (zstd's Huffman and stray matches on these
    near-random bytes cost 5-20 % per section), and far below the changed values coded by the float
    codec (the positions not even counted there)."""
    n, p = 1 << 20, 0.03
    base, new = _pair("bfloat16", n, p, seed=5, big=0.0)
    changed = new[bits(new) != bits(base)]
    entropy_bytes = (n * -(p * np.log2(p) + (1 - p) * np.log2(1 - p)) + 2 * changed.size) / 8
    size = len(encode_delta(new, base))
    assert size < 1.15 * entropy_bytes + DELTA_HEAD.size + 200, (size, entropy_bytes)
    assert size < 0.9 * len(codec.encode(changed))


def _golden_pair():
    return _pair("bfloat16", 70_001, 0.02, seed=11)


def test_golden_stream():
    """The stored version-1 stream decodes to its tensor, and encoding gives it back byte for byte."""
    g = np.load(GOLDEN)
    base, new = _golden_pair()
    assert bits(base).tobytes() == g["base"].tobytes() and bits(new).tobytes() == g["new"].tobytes()
    stream = g["stream"].tobytes()
    assert_bit_equal(decode_delta(stream, base), new)
    assert encode_delta(new, base, checksum=True) == stream


def _bad(stream, base, match):
    keep = bits(base).copy()
    out = base.copy()
    with pytest.raises(codec.FormatError, match=match):
        decode_delta(stream, base, out=out)
    assert (bits(out) == keep).all() and (bits(base) == keep).all()


def test_bad_streams_are_refused_with_out_untouched():
    base, new = _pair("float16", 20_000, 0.05, seed=7)
    blob = encode_delta(new, base)
    for cut in (0, 3, DELTA_HEAD.size - 1, DELTA_HEAD.size, len(blob) // 2, len(blob) - 1):
        _bad(blob[:cut], base, "shorter|bytes")
    _bad(b"XXXX" + blob[4:], base, "not a zipccl delta")
    _bad(blob[:4] + b"\x09" + blob[5:], base, "version 9")
    other = np.zeros(19_999, base.dtype)
    with pytest.raises(codec.FormatError, match="base has"):
        decode_delta(blob, other)
    f = DELTA_HEAD.unpack_from(blob)._asdict()

    def forged(**kw):
        return DELTA_HEAD.pack(**dict(f, **kw)) + blob[DELTA_HEAD.size:]
    _bad(forged(n_changed=f["numel"] + 1), base, "impossible")
    _bad(forged(shift=60), base, "shift")
    _bad(forged(flags=0x80), base, "flags")
    _bad(forged(z_steps=f["z_steps"] + 1), base, "implies")
    # the gap section decompresses to more bytes than the forged count of changes
    n = f["n_changed"] - 8
    _bad(forged(n_changed=n, n_low=-(-n * f["shift"] // 8)), base, "implies|holds|zstd")


def test_forged_sections_are_checked():
    """Sections that decompress fine but point past the tensor or miscount their escapes."""
    zstandard = pytest.importorskip("zstandard")
    base = np.zeros(1000, np.float32)
    z = zstandard.ZstdCompressor()

    def stream(qbytes, steps, qesc=b"", vesc=b""):
        parts = [z.compress(qbytes), b"", z.compress(qesc) if qesc else b"", z.compress(steps),
                 z.compress(vesc) if vesc else b""]
        head = DELTA_HEAD.pack(magic=b"ZCDL", version=1, dtype=codec.layouts.layout_for("float32").code, flags=0,
                               shift=0, numel=1000, n_changed=len(qbytes), n_gap_esc=len(qesc) // 8,
                               n_step_esc=len(vesc) // 4, z_gaps=len(parts[0]), n_low=0, z_gap_esc=len(parts[2]),
                               z_steps=len(parts[3]), z_step_esc=len(parts[4]))
        return head + b"".join(parts)
    ok = decode_delta(stream(b"\x05", b"\x01"), base)               # value 5 moved one step down: -0 ... -tiny
    assert np.flatnonzero(bits(ok)).tolist() == [5]
    _bad(stream(b"\xff\x00", b"\x01\x01"), base, "escapes disagree")       # escape byte, no escape stored
    _bad(stream(b"\xff", b"\x01", qesc=(10**6).to_bytes(8, "little")), base, "past the end")
    _bad(stream(b"\x64" * 11, b"\x01" * 11), base, "past the end")            # 11 gaps of 100 > 1000 values
    _bad(stream(b"\x01", b"\x01", vesc=(7).to_bytes(4, "little")), base, "escapes disagree")
    _bad(stream(b"\x01", b"\xff", vesc=(2**32 - 256).to_bytes(4, "little")), base, "out of range")


def test_checksum_detects_every_flipped_bit_sampled():
    base, new = _pair("bfloat16", 30_000, 0.05, seed=9)
    blob = bytearray(encode_delta(new, base, checksum=True))
    rng = np.random.default_rng(0)
    for bit in rng.choice(8 * len(blob), 24, replace=False):
        bad = bytearray(blob)
        bad[bit // 8] ^= 1 << (bit % 8)
        _bad(bytes(bad), base, "")


def test_mismatched_inputs():
    a = np.zeros(10, np.float32)
    with pytest.raises(ValueError, match="differ"):
        encode_delta(a, np.zeros(11, np.float32))
    with pytest.raises(ValueError, match="differ"):
        encode_delta(a, np.zeros(10, np.float16))
    with pytest.raises(TypeError):
        encode_delta(np.zeros(10, np.int32), np.zeros(10, np.int32))


if __name__ == "__main__":                  # python -m tests.test_delta: rewrite the golden stream
    b, n = _golden_pair()
    np.savez(GOLDEN, base=bits(b), new=bits(n),
             stream=np.frombuffer(encode_delta(n, b, checksum=True), np.uint8))
    print(f"wrote {GOLDEN}")
