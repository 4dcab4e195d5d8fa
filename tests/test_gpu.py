"""On a CUDA GPU: both dialects encode device tensors to the CPU encoder's bytes and decode them
bit-exactly on the device (skipped where there is no GPU; bench/gpu_check.sh runs them there)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

import codec  # noqa: E402
from codec.layouts import layout_for  # noqa: E402
from tests.helpers import DTYPES, make_values  # noqa: E402

DIALECTS = ("triton", "cuda")
_INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def _case(dtype, n, seed):
    x = make_values("gaussian", dtype, n, seed, -1.5)
    if n > 100:
        x[n // 5:n // 5 + n // 7] = 0                          # zero blocks / CONST chunks
        x[7:40] = make_values("random_bits", dtype, 33, seed)   # escapes, NaN payloads
        x[::97] = 0
    return x


def _bits(t):
    return t.contiguous().view(_INTS[layout_for(t.dtype).itemsize])


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 1000, 65_537, (1 << 20) + 3, 1 << 23])
def test_device_tensor_roundtrip(dialect, dtype, n):
    x = _case(dtype, n, n % 1000)
    t = torch.from_numpy(x.view({1: np.uint8, 2: np.int16, 4: np.int32}[x.itemsize]).copy())
    xd = t.cuda().view(getattr(torch, dtype))
    blob = codec.encode(xd, backend=dialect)
    assert blob.is_cuda and blob.dtype == torch.uint8
    assert bytes(blob.cpu().numpy()) == bytes(codec.encode(xd.cpu()))          # the numba encoder's bytes
    y = codec.decode(blob, backend=dialect)
    assert y.is_cuda and y.dtype == xd.dtype and y.shape == xd.shape
    assert torch.equal(_bits(y), _bits(xd))
    out = torch.full_like(xd, float("nan")) if dtype != "float8_e4m3fn" else torch.empty_like(xd)
    assert codec.decode(blob, out=out, backend=dialect) is out and torch.equal(_bits(out), _bits(xd))


@pytest.mark.parametrize("dialect", DIALECTS)
def test_device_decode_of_cpu_streams_and_corruption(dialect):
    x = _case("bfloat16", 300_000, 5)
    blob = codec.encode(x, checksum=True)
    dev = torch.frombuffer(bytearray(blob), dtype=torch.uint8).cuda()
    y = codec.decode(dev, backend=dialect)
    assert np.array_equal(y.cpu().view(torch.int16).numpy().view(np.uint16), x.view(np.uint16))
    bad = bytearray(codec.encode(x))
    h = codec.format.parse_header(bad)
    hd = codec.format.parse_chunk_head(h, bad, 0)
    bad[hd.words + 1] ^= 0x40
    with pytest.raises(codec.FormatError):
        codec.decode(torch.frombuffer(bad, dtype=torch.uint8).cuda(), backend=dialect)


def test_cupy_arrays_through_dlpack():
    cp = pytest.importorskip("cupy")
    x = cp.asarray(make_values("gaussian", "float16", 100_000, 1, -1.0))
    blob = codec.encode(x)
    assert isinstance(blob, cp.ndarray)
    y = codec.decode(blob)
    assert isinstance(y, cp.ndarray) and bool((y.view(cp.uint16) == x.view(cp.uint16)).all())
