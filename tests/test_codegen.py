"""Generated kernels: CUDA compiles with NVRTC for every dtype and arch; Triton decodes bit-exactly
under the CPU interpreter; the generation cache behaves."""
import os
import re

import numpy as np
import pytest

if os.environ.get("TRITON_INTERPRET") is None:
    try:
        import torch
        _has_gpu = torch.cuda.is_available()
    except ImportError:
        _has_gpu = False
    if not _has_gpu:
        os.environ["TRITON_INTERPRET"] = "1"     # before any generated kernel is imported

import codec  # noqa: E402
from codegen import generate as gen  # noqa: E402
from tests.helpers import DTYPES, assert_bit_equal, make_values  # noqa: E402


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ZIPCCL_CODEGEN_CACHE", str(tmp_path / "cache"))
    gen.load_triton.cache_clear()


@pytest.mark.parametrize("arch", gen.ARCHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_compiles_with_nvrtc(dtype, arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    cubin = gen.compile_cuda(dtype, arch, output="cubin")
    assert len(cubin) > 1000
    ptx = gen.compile_cuda(dtype, arch, output="ptx").decode()
    assert f".target {arch}" in ptx and f"zipccl_decode_{dtype}" in ptx and f"zipccl_rans_encode_{dtype}" in ptx


@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_decoder_bit_exact(dtype):
    pytest.importorskip("triton")
    x = make_values("gaussian", dtype, 640, 1, -1.0)
    x[::11] = 0                              # ZERO symbols
    x[256:256 + 64] = 0                      # a zero block in the second chunk
    x[5] = make_values("random_bits", dtype, 1, 3)[0]       # likely an escape
    blob = codec.encode(x, chunk_size=320)
    kinds = {c["kind"] for c in codec.inspect(blob)["chunks"]}
    assert "coded" in kinds
    assert_bit_equal(codec.decode(blob, backend="triton"), x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_encoder_bit_exact(dtype):
    """The generated rANS encoder writes the reference's bytes (zero blocks, escapes, a short last chunk)."""
    pytest.importorskip("triton")
    from codegen import triton_backend
    from reference import codec as ref

    x = make_values("gaussian", dtype, 700, 4, -1.0)
    x[::13] = 0
    x[320:320 + 64] = 0                      # a zero-block candidate in the second chunk
    x[7] = make_values("random_bits", dtype, 1, 5)[0]
    blob = codec.encode(x, chunk_size=320, backend="triton")
    assert blob == codec.encode(x, chunk_size=320, backend="reference")
    assert {c["kind"] for c in codec.inspect(blob)["chunks"]} >= {"coded"}
    # the kernel itself, on random symbols with a skewed table, against the reference rANS
    rng = np.random.default_rng(0)
    freq = np.zeros((3, 82), np.int64)
    freq[:, :40] = rng.integers(1, 100, (3, 40))
    freq[:, 0] += 4096 - freq.sum(axis=1)
    cum = np.concatenate([np.zeros((3, 1), np.int64), np.cumsum(freq, axis=1)[:, :-1]], axis=1)
    sym = np.stack([rng.choice(82, 257, p=f / 4096) for f in freq])
    s_ref, w_ref = ref.rans_encode(sym, freq, cum, 8)
    s_tri, w_tri = triton_backend.rans_encode(sym, freq, cum, 8, dtype=dtype)
    assert np.array_equal(s_ref, s_tri) and all(np.array_equal(a, b) for a, b in zip(w_ref, w_tri))


def test_triton_decoder_rejects_corruption():
    pytest.importorskip("triton")
    x = make_values("gaussian", "bfloat16", 300, 2, -1.0)
    blob = bytearray(codec.encode(x, chunk_size=512))
    h = codec.format.parse_header(blob)
    hd = codec.format.parse_chunk_head(h, blob, 0)
    blob[hd.words] ^= 0x5A                   # a rANS word
    with pytest.raises(codec.FormatError):
        codec.decode(bytes(blob), backend="triton")


def test_cache_writes_once_and_offline_mode(tmp_path, monkeypatch):
    p1 = gen.generate("cuda", "bf16", "sm_90")
    mtime = p1.stat().st_mtime_ns
    p2 = gen.generate("cuda", "bfloat16", "sm_90")
    assert p1 == p2 and p2.stat().st_mtime_ns == mtime
    assert re.fullmatch(r"cuda_codec_bfloat16_sm_90_[0-9a-f]{12}\.cu", p1.name)
    monkeypatch.setenv("ZIPCCL_CODEGEN_OFFLINE", "1")
    assert gen.generate("cuda", "bf16", "sm_90") == p1
    with pytest.raises(FileNotFoundError, match="OFFLINE"):
        gen.generate("cuda", "bf16", "sm_80")


def test_generated_sources_lint():
    """Templates only inject constants; the sources avoid the usual pitfalls."""
    for dialect, dtype, arch in gen.all_targets():
        name, src = gen.render(dialect, dtype, arch)
        assert "{" + "key}" not in src and "{dtype}" not in src           # fully rendered
        if dialect == "cuda":
            assert "#include" not in src                                   # NVRTC has no standard headers
            assert "malloc" not in src and "new " not in src
            kernels = re.findall(r"zipccl_(?:decode|rans_encode)_\w+(?=\()", src)
            assert len(kernels) == 2
            for kernel in kernels:
                assert src.count(kernel + "(") == 1                        # no recursion
        else:
            for load in re.findall(r"tl\.load\((?:[^()]|\([^()]*\))*\)", src):
                assert "mask=" in load or "mrow" in load, load                # every data load is masked


def test_cli_generates_and_lists(tmp_path, capsys):
    from codegen.__main__ import main

    assert main(["--dtype", "e5m2", "--dialect", "cuda", "--arch", "sm_100", "--out", str(tmp_path)]) == 0
    assert len(list(tmp_path.glob("cuda_codec_float8_e5m2_sm_100_*.cu"))) == 1
    assert main(["--list", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "generated  cuda_codec_float8_e5m2_sm_100" in out and "missing" in out
