"""The numcodecs codec (codec.zarr.ZipCCL)."""
import json
import os
import warnings
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
with warnings.catch_warnings(record=True):        # numcodecs >= 0.16.4 warns about the crc32c package at import
    numcodecs = pytest.importorskip("numcodecs")

from codec.zarr import ZipCCL  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DTYPES = [ml_dtypes.bfloat16, np.float16, np.float32, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def _sample(dtype, shape=(60, 70), seed=0):
    return np.random.default_rng(seed).normal(0, 0.5, shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_roundtrip(dtype):
    x = _sample(dtype)
    c = ZipCCL(chunk_size=1000)
    enc = c.encode(x)
    assert isinstance(enc, bytes) and enc[:4] == b"ZCCL"
    y = c.decode(enc)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert np.array_equal(_bits(y), _bits(x))
    # decode accepts any bytes-like buffer
    assert np.array_equal(_bits(c.decode(memoryview(enc))), _bits(x))
    assert np.array_equal(_bits(c.decode(np.frombuffer(enc, np.uint8))), _bits(x))


def test_decode_into_out():
    x = _sample(ml_dtypes.bfloat16)
    c = ZipCCL(checksum=True)
    enc = c.encode(x)
    out = np.empty_like(x)
    assert c.decode(enc, out=out) is out
    assert np.array_equal(_bits(out), _bits(x))
    flat = np.empty(x.size, dtype=x.dtype)                 # another shape, same number of values
    c.decode(enc, out=flat)
    assert np.array_equal(_bits(flat), _bits(x).reshape(-1))
    raw = bytearray(x.nbytes)                              # a plain byte buffer of the right size
    c.decode(enc, out=raw)
    assert bytes(raw) == x.tobytes()
    with pytest.raises(ValueError):
        c.decode(enc, out=np.empty(x.size + 1, dtype=x.dtype))


def test_fortran_and_strided_inputs():
    x = _sample(np.float32)
    c = ZipCCL()
    xf = np.asfortranarray(x)                              # compressed in memory order, like numcodecs
    out = np.empty_like(xf)
    c.decode(c.encode(xf), out=out)
    assert out.flags.f_contiguous and np.array_equal(_bits(out), _bits(x))
    xs = x[::2, ::3]
    assert np.array_equal(_bits(c.decode(c.encode(xs))), _bits(xs))


def test_rejects_unsupported_dtype_and_corruption():
    c = ZipCCL()
    with pytest.raises(TypeError):
        c.encode(np.arange(10, dtype=np.int32))
    import codec

    enc = bytearray(ZipCCL(checksum=True).encode(_sample(np.float16)))
    enc[-5] ^= 1
    with pytest.raises(codec.FormatError):
        c.decode(bytes(enc))


def test_config_roundtrip_through_json():
    c = ZipCCL(chunk_size=4096, checksum=True)
    cfg = c.get_config()
    assert cfg == {"id": "zipccl", "chunk_size": 4096, "checksum": True}
    cfg2 = json.loads(json.dumps(cfg))
    c2 = numcodecs.get_codec(cfg2)
    assert isinstance(c2, ZipCCL) and c2 == c and c2.get_config() == cfg
    cfg2.pop("id")
    assert ZipCCL.from_config(cfg2) == c
    assert ZipCCL() != c and ZipCCL().get_config()["chunk_size"] is None   # None: per-dtype default
    with pytest.raises((TypeError, ValueError)):
        ZipCCL(chunk_size=0)
    with pytest.raises(TypeError):
        ZipCCL(chunk_size=1.5)


def test_repr_roundtrip():
    for c in (ZipCCL(), ZipCCL(chunk_size=123, checksum=True)):
        r = repr(c)
        assert r.startswith("ZipCCL(")
        assert eval(r, {"ZipCCL": ZipCCL}) == c


def test_codec_id_and_in_process_registry():
    assert ZipCCL.codec_id == "zipccl"
    assert isinstance(numcodecs.get_codec({"id": "zipccl"}), ZipCCL)


def test_entry_point_registry_lookup():
    eps = [e for e in entry_points(group="numcodecs.codecs") if e.name == "zipccl"]
    if not eps:
        pytest.skip("zipccl is not installed in this environment (no numcodecs.codecs entry point); "
                    "run `pip install -e .` to test the entry point")
    assert eps[0].value == "codec.zarr:ZipCCL"
    assert eps[0].load() is ZipCCL
    # a fresh interpreter that has not imported codec.zarr finds it through the entry point alone
    code = ("import sys, warnings; warnings.simplefilter('ignore'); import numcodecs; "
            "assert 'codec.zarr' not in sys.modules; "
            "c = numcodecs.get_codec({'id': 'zipccl', 'chunk_size': 512}); "
            "print(type(c).__module__, c.chunk_size)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["codec.zarr", "512"]


def test_import_codec_does_not_import_numcodecs():
    code = "import sys, codec, codec.cli, codec.stats; print('numcodecs' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
