"""One set of checks that every registered backend (codec.backends) passes, as numcodecs runs its shared
checks on every codec: golden streams decode to their inputs and re-encode to the same bytes; every
dtype round-trips bit-exactly with the reference's bytes; bad streams are refused with the reference's
FormatError.  A new backend is covered by registering it.

Where a backend can run: numba and the reference everywhere; triton on a GPU or, without one, under the
Triton interpreter (set here, as in test_codegen); cuda on a GPU only (marked gpu).
"""
import os

import struct

import numpy as np
import pytest

from tests.helpers import interpret_triton_without_gpu  # noqa: E402

interpret_triton_without_gpu()                   # before any generated kernel is imported

import codec  # noqa: E402
from codec import backends, codebook  # noqa: E402
from codec import format as fmt  # noqa: E402
from tests import golden  # noqa: E402
from tests.helpers import DTYPES, assert_bit_equal, make_values, np_dtype  # noqa: E402


# the Triton interpreter runs a kernel program as Python over NumPy blocks (~10 ms per chunk and kernel):
# golden streams above this many values take a minute each there; they run on a GPU
INTERPRETER_MAX_NUMEL = 1500


def _interpreted(backend) -> bool:
    return backend in backends.device_names() and os.environ.get("TRITON_INTERPRET") == "1"


def _param(name):
    if name == "cuda":
        return pytest.param(name, marks=pytest.mark.gpu)
    if name in backends.device_names() and os.environ.get("TRITON_INTERPRET") == "1":
        return pytest.param(name, marks=pytest.mark.slow)        # interpreted: CI's second, slow step
    return name


BACKENDS = [_param(n) for n in backends.names()]


@pytest.fixture(scope="module", autouse=True)
def _kernel_cache(tmp_path_factory):
    """The generated kernels of this module in a folder of its own (generated once, imported once)."""
    from codegen import generate

    mp = pytest.MonkeyPatch()
    mp.setenv("ZIPCCL_CODEGEN_CACHE", str(tmp_path_factory.mktemp("codegen")))
    generate.load_triton.cache_clear()
    yield
    mp.undo()
    generate.load_triton.cache_clear()


@pytest.fixture(autouse=True)
def _runs_here(request):
    callspec = getattr(request.node, "callspec", None)
    if callspec and callspec.params.get("backend") == "cuda":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("backend cuda needs a CUDA GPU")


def test_the_registry_names_every_backend_once():
    assert set(backends.names()) >= {"numba", "reference", "triton", "cuda"}
    assert set(backends.device_names()) == {"triton", "cuda"}
    assert backends.get("auto") is backends.get("numba")
    with pytest.raises(ValueError, match="unknown backend"):
        backends.get("nope")
    for name in set(backends.names()) - set(backends.device_names()):
        assert isinstance(backends.get(name), backends.Backend), name


def _golden_params():
    """(backend, case) pairs: the reference decodes older versions' streams in CI's slow step (the
    numba backend decodes every version in the README's run, and the reference the current one)."""
    out = []
    for case in golden.cases():
        for name in backends.names():
            p = _param(name)
            marks = list(getattr(p, "marks", ()))
            if name == "reference" and case[0] not in (fmt.FORMAT_VERSION, fmt.REPEATS_VERSION):
                marks.append(pytest.mark.slow)
            out.append(pytest.param(name, case, marks=marks, id=f"{golden.case_id(case)}-{name}"))
    return out


@pytest.mark.parametrize("backend, case", _golden_params())
def test_golden_streams(backend, case):
    """Every version's golden streams decode; the current version's are the encoder's bytes."""
    version, name = case
    m, raw, want = golden.read(version, name)
    if _interpreted(backend) and m["numel"] > INTERPRETER_MAX_NUMEL:
        pytest.skip(f"{m['numel']} values: too slow under the Triton interpreter (runs on a GPU)")
    x = np.frombuffer(raw, dtype=np_dtype(m["dtype"])).reshape(m.get("shape", [-1]))
    assert_bit_equal(codec.decode(want, backend=backend), x)
    if version in (fmt.FORMAT_VERSION, fmt.REPEATS_VERSION):
        assert bytes(codec.encode(x, chunk_size=m["chunk_size"], checksum=m["checksum"], backend=backend)) == want


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_gives_the_reference_bytes(backend, dtype):
    x = make_values("gaussian", dtype, 700, 7, -2.0)
    x[40:200] = 0                                                         # zero blocks
    x[300:380] = make_values("random_bits", dtype, 80, 8)                 # NaN payloads, Inf, subnormals
    x[512:] = x[512]                                                      # a CONST chunk
    want = bytes(codec.encode(x, chunk_size=256, checksum=True, backend="reference"))
    assert bytes(codec.encode(x, chunk_size=256, checksum=True, backend=backend)) == want
    assert_bit_equal(codec.decode(want, backend=backend), x)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_chunks_of_one_symbol_give_the_reference_bytes(backend, dtype):
    """Every value one exponent key, signs mixed (+-1.0, +-inf): the chunk's explicit table gives its one
    symbol every slot (frequency TOTAL), so no rANS state ever flushes; the numba SIMD rounds once took
    f << 20 in 32 bits (2^32 wrapped to 0) and flushed every lane every round, storing the chunk raw."""
    rng = np.random.default_rng(11)
    # one chunk each of 8, 16 and 32 rANS lanes (numba: a masked 16-lane round, one and two 16-lane groups)
    for n, v in [(1024, 1.0)] if _interpreted(backend) else [(n, v) for n in (8192, 16484, 32768) for v in (1.0, np.inf)]:
        x = np.where(rng.random(n) < 0.5, v, -v).astype(np_dtype(dtype))
        want = bytes(codec.encode(x, chunk_size=n, backend="reference"))
        assert codec.inspect(want)["chunks"][0]["shape"] == "explicit"
        assert len(want) < x.nbytes // 8, len(want)                              # a bit a value and less
        assert bytes(codec.encode(x, chunk_size=n, backend=backend)) == want, (n, v)
        assert_bit_equal(codec.decode(want, backend=backend), x)


def _forged_streams():
    """(what, stream) pairs the reference refuses: truncation, a forged chunk head, a flipped payload."""
    x = make_values("gaussian", "bfloat16", 1500, 3, -1.0)
    blob = bytes(codec.encode(x, chunk_size=512, backend="reference"))
    h = fmt.parse_header(blob)
    a = h.chunk_span(1)[0]
    out = [("truncated", blob[:-3])]
    for field, value in (("mode", 9), ("shift", 7), ("n_words", 0xFF), ("codebook", 0xFF), ("sign", 3),
                         ("sign", 1), ("narrow", 1)):
        bad = bytearray(blob)
        bad[a + fmt.CHUNK_HEAD.offset[field]] = value
        out.append((f"chunk head {field}={value}", bytes(bad)))
    def older(version, field, value):        # the stream relabelled as an older version (its family too)
        bad = bytearray(blob)
        bad[fmt.STREAM_HEAD.offset["version"]] = version
        struct.pack_into("<H", bad, fmt.STREAM_HEAD.offset["family"], fmt.FAMILY_OF_VERSION[version])
        at = a + fmt.CHUNK_HEAD.offset[field]
        if fmt.CHUNK_HEAD.width[field] == 2:
            struct.pack_into("<H", bad, at, value)
        else:
            bad[at] = value
        return bytes(bad)

    # a sign mode in a version-1 stream (that byte was reserved); 1024-value zero blocks and a family-2
    # codebook id in a version-2 stream (both came with version 3)
    out.append(("sign mode in a v1 stream", older(1, "sign", fmt.SIGN_POSITIVE)))
    out.append(("zero-block mode 10 in a v2 stream", older(2, "mode", 10)))
    out.append(("family-2 codebook in a v2 stream", older(2, "codebook", codebook.n_codebooks(1) + 3)))
    pos = bytes(codec.encode(abs(x), chunk_size=512, backend="reference"))    # plane without signs
    hp = fmt.parse_header(pos)
    bad = bytearray(pos)                      # (relabelled NEGATIVE it is a valid stream of other values)
    bad[hp.chunk_span(1)[0] + fmt.CHUNK_HEAD.offset["sign"]] = fmt.SIGN_STORED
    out.append(("positive chunk relabelled stored", bytes(bad)))
    for narrow in (1, 7):                     # a plane narrower than the payload, or than no residual
        bad = bytearray(pos)
        bad[hp.chunk_span(1)[0] + fmt.CHUNK_HEAD.offset["narrow"]] = narrow
        out.append((f"positive chunk narrowed by {narrow}", bytes(bad)))
    crc = bytes(codec.encode(x, chunk_size=512, checksum=True, backend="reference"))
    hc = fmt.parse_header(crc)
    bad = bytearray(crc)
    bad[hc.chunk_span(2)[1] - 5] ^= 0x10
    out.append(("payload bit with checksums", bytes(bad)))
    return out


_PAYLOAD_FAULTS = {fmt.CHUNK_FAULTS[c] for c in fmt.CHUNK_FAULTS if c not in fmt.HEAD_FAULTS}


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_streams_are_refused_like_the_reference(backend):
    """The same FormatError as the reference: the same message for what the header, the chunk table
    and the chunk heads show (and checksums); for a fault only decoding the payload shows, a payload
    fault of the same chunk (the device decoders tell the four apart less finely: FAULT_PAYLOAD)."""
    for what, blob in _forged_streams():
        with pytest.raises(codec.FormatError) as want:
            codec.decode(blob, backend="reference")
        with pytest.raises(codec.FormatError) as got:
            codec.decode(blob, backend=backend)
        want, got = str(want.value), str(got.value)
        chunk, _, fault = want.partition(": ")
        if want.startswith("chunk ") and fault in _PAYLOAD_FAULTS:
            assert got.startswith(chunk + ": ") and got.partition(": ")[2] in _PAYLOAD_FAULTS, (what, got)
        else:
            assert got == want, what


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_corrupted_payload_is_refused(backend):
    """Without checksums a flipped payload bit is found by the rANS invariants (each decoder names the
    fault from codec.format.CHUNK_FAULTS), or decodes to other values: never a crash or a hang."""
    x = make_values("gaussian", "float16", 1500, 5, -1.0)
    blob = bytes(codec.encode(x, chunk_size=512, backend="reference"))
    h = fmt.parse_header(blob)
    hd = fmt.parse_chunk_head(h, blob, 1)
    bad = bytearray(blob)
    bad[hd.words] ^= 0x5A
    try:
        y = codec.decode(bytes(bad), backend=backend)
    except codec.FormatError as e:
        assert str(e).startswith("chunk 1: ") and str(e)[len("chunk 1: "):] in fmt.CHUNK_FAULTS.values()
    else:
        assert y.shape == x.shape
