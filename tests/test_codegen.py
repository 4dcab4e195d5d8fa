"""Generated kernels: CUDA compiles with NVRTC for every dtype and arch; Triton decodes bit-exactly
under the CPU interpreter; the generation cache behaves."""
import os
import re

import numpy as np
import pytest

from tests.helpers import interpret_triton_without_gpu  # noqa: E402

interpret_triton_without_gpu()                   # before any generated kernel is imported

import codec  # noqa: E402
import torch  # noqa: E402
from codec import format as fmt  # noqa: E402
from codec.layouts import layout_for  # noqa: E402
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
    assert f".target {arch}" in ptx
    for kernel in ("decode", "dec_copy", "enc_stats", "enc_rans", "enc_place", "enc_planes", "enc_copy"):
        assert f".entry zipccl_{kernel}_{dtype}(" in ptx


@pytest.mark.slow
def test_triton_kernels_compile_for_the_gpu(tmp_path):
    """Triton's own GPU compiler (not the interpreter, which is laxer) takes every generated kernel of
    every dtype, to a cubin for sm_90 (and sm_80, sm_100 for two dtypes).  In a separate process: this
    one imported Triton in interpreter mode."""
    import json
    import subprocess
    import sys

    pytest.importorskip("triton")
    targets = [(d, "sm_90") for d in DTYPES] + [("bfloat16", "sm_80"), ("float16", "sm_100")]
    script = ("import json, sys; from codegen.generate import compile_triton; "
              "print(json.dumps([compile_triton(d, a) for d, a in json.loads(sys.argv[1])]))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "triton"), TRITON_DEFAULT_FP_FUSION="1")
    run = subprocess.run([sys.executable, "-c", script, json.dumps(targets)], env=env, capture_output=True,
                         text=True, timeout=600, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert run.returncode == 0, run.stderr[-3000:]
    sizes = json.loads(run.stdout.strip().splitlines()[-1])
    for (dtype, arch), got in zip(targets, sizes):
        assert set(got) == set(gen.triton_signatures(dtype)) and min(got.values()) > 1000, (dtype, arch)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])   # every dtype's decoder also runs in the encoder test
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


def _encoder_case(dtype):
    """Eight 128-value chunks and a short one that take every path of the encoder: escapes and -0, a
    zero-block payload, CONST, RAW (random bits), sign modes positive and negative (with -0 and +0
    values), small subnormals (high bits dropped), SPARSE (3 values), dropped low mantissa bits in a
    short last chunk."""
    lay = layout_for(dtype)
    g = make_values("gaussian", dtype, 128, 1, -1.0)
    g[3] = make_values("random_bits", dtype, 1, 5)[0]
    g.view(lay.uint)[5] = 1 << (8 * lay.itemsize - 1)                       # -0: not a ZERO symbol
    z = np.zeros(128, g.dtype)
    z[64:112] = make_values("gaussian", dtype, 48, 2, -1.0)                  # (5 values would be SPARSE)
    sp = np.zeros(128, g.dtype)
    sp[[3, 40, 127]] = make_values("gaussian", dtype, 3, 8, -1.0)
    low = make_values("gaussian", dtype, 88, 4, 2.0).view(lay.uint) & lay.uint.type((1 << (8 * lay.itemsize)) - 4)
    pos = abs(make_values("gaussian", dtype, 128, 6, -1.0))
    neg = -abs(make_values("laplace", dtype, 128, 7, -1.0))
    neg[::5] = 0
    neg.view(lay.uint)[3] = 1 << (8 * lay.itemsize - 1)                     # -0 is negative
    sub = ((np.arange(128) * 7) % 5).astype(lay.uint).view(g.dtype)         # +0 and 1..4 ulps
    return np.concatenate([g, z, np.full(128, g[0]), make_values("random_bits", dtype, 128, 3), pos, neg, sub, sp,
                           low.view(g.dtype)])


# interpreted, each dtype takes ~10 s (12-14 s on Zen 3): all in CI's slow step (the README's run keeps
# test_triton_encoder_into_buffer_and_checksums, which runs the same kernels)
@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_encoder_bit_exact(dtype):
    """The device encoder (statistics, model fit, tables, symbols, planes, rANS, placement) writes the
    reference's bytes, and the device decoder reads them from a tensor (chunk heads gathered there)."""
    pytest.importorskip("triton")
    from codegen import device as tb

    x = _encoder_case(dtype)
    blob = codec.encode(x, chunk_size=128, backend="triton")
    ref = codec.encode(x, chunk_size=128, backend="reference")
    assert isinstance(blob, bytearray) and blob == ref
    chunks = codec.inspect(ref)["chunks"]
    assert [c["kind"] for c in chunks] == ["coded", "coded", "const", "raw", "coded", "coded", "coded", "sparse",
                                           "coded"]
    assert chunks[1]["zero_block_size"] == 16 and chunks[8]["dropped_mantissa_bits"] >= 1
    assert [chunks[i]["sign"] for i in (0, 4, 5, 6)] == ["stored", "positive", "negative", "positive"]
    assert chunks[6]["dropped_high_bits"] == max(0, layout_for(dtype).man_bits - 1 - 3)
    h, words = tb.decode_stream(torch.frombuffer(bytearray(ref), dtype=torch.uint8))
    assert h.shape == x.shape
    assert np.array_equal(words.numpy().view(layout_for(dtype).uint), x.view(layout_for(dtype).uint))


# interpreted: CI's slow step
@pytest.mark.slow
@pytest.mark.parametrize("dtype, zero_runs", [("bfloat16", True)])
def test_triton_encoder_writes_format_7(monkeypatch, dtype, zero_runs):
    """Format 7 (codec.format.WRITE_VERSION = 7): the device encoder chooses and writes the explicit tables
    the reference does (codegen.device._explicit_tables), plain and with zero-block bitmaps, and the device
    decoder reads them (their heads' prefixes gathered with the tables)."""
    pytest.importorskip("triton")
    from codec import format as fmt
    from codegen import device as tb
    from tests.test_explicit_tables import _explicit_chunks, _mixed_scales

    monkeypatch.setattr(fmt, "WRITE_VERSION", 7)
    x = _mixed_scales(dtype, 3000, 1, zero_runs)
    ref = codec.encode(x, chunk_size=1024, checksum=True, backend="reference")
    assert _explicit_chunks(bytes(ref))
    assert codec.encode(x, chunk_size=1024, checksum=True, backend="triton") == ref
    h, words = tb.decode_stream(torch.frombuffer(bytearray(ref), dtype=torch.uint8))
    assert np.array_equal(words.numpy().view(layout_for(dtype).uint), x.view(layout_for(dtype).uint))
    assert np.array_equal(codec.decode(bytes(ref), backend="triton").view(layout_for(dtype).uint),
                          x.view(layout_for(dtype).uint))


# ~14 s interpreted on Zen 3: CI's slow step (the README's run checks each Triton decoder against the reference)
@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e5m2"])
def test_triton_one_and_two_pass_decoders_agree(dtype):
    """The one-pass decoder (rANS walk and values together) and the two-pass one (the default) both give
    the input back, into garbage-filled outputs; the GPU check times the two."""
    pytest.importorskip("triton")
    from codegen import device as dv
    from codegen.kernels import kernel_set

    x = _encoder_case(dtype)
    lay = layout_for(dtype)
    blob = bytes(codec.encode(x, chunk_size=128))
    h = fmt.parse_header(blob)
    for split in (False, True):
        words = torch.full((h.numel,), 0x5A, dtype=lay.torch_words)
        plan = dv.decode_into(h, torch.frombuffer(bytearray(blob), dtype=torch.uint8), range(h.n_chunks), words,
                              kernels=kernel_set("triton", dtype), launch=False)
        plan.run(split=split)
        plan.check()
        assert np.array_equal(words.numpy().view(lay.uint), x.view(lay.uint)), split


def test_triton_encoder_into_buffer_and_checksums():
    pytest.importorskip("triton")
    x = make_values("gaussian", "bfloat16", 300, 7, -2.0)
    ref = codec.encode(x, chunk_size=160, checksum=True, backend="reference")
    buf = bytearray(b"\xee" * codec.max_encoded_size(x, chunk_size=160, checksum=True))
    view = codec.encode(x, chunk_size=160, checksum=True, backend="triton", out=buf)
    assert bytes(view) == bytes(ref)
    assert codec.encode(np.zeros(0, x.dtype), backend="triton") == codec.encode(np.zeros(0, x.dtype))


def test_cuda_backend_without_a_gpu_says_so():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    from codegen.kernels import kernel_set

    kernel_set.cache_clear()
    x = make_values("gaussian", "bfloat16", 100, 1)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        codec.encode(x, backend="cuda")
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        codec.decode(codec.encode(x), backend="cuda")


@pytest.mark.parametrize("k", [8, 32])
def test_triton_rans_lanes(k):
    """The rANS walk on 8 and 32 lanes (chunks of 8K-32K values; too slow for the interpreter whole):
    the kernel run on rows that set the lane count, against the reference rANS."""
    pytest.importorskip("triton")
    from codec.codebook import chunk_tables, load_family, sample_histogram, sample_step, select_codebook
    from codec.layouts import log2_magnitude, split
    from reference import codec as ref

    lay = layout_for("bfloat16")
    x = make_values("laplace", "bfloat16", 40 * k + 3, k, -1.0)
    x[::7] = 0
    w = x.view(lay.uint)
    e, sm = split(w, lay)
    nz = (w & 0x7FFF) != 0
    lg = np.where(nz, log2_magnitude(e, sm, lay), 0)
    cb, r = select_codebook(len(w), int((w == 0).sum()), int(nz.sum()), int(lg.sum()),
                            sample_histogram(w, lay.exp_bits, lay.man_bits, sample_step(len(w))), lay.exp_bits,
                            lay.has_inf, load_family())
    freq, cum, _ = chunk_tables(cb, r, lay.exp_bits, lay.has_inf)
    sym = ref._symbols(ref._keys(e, sm, lay.man_bits, 0), 1, w == 0, r, freq)
    states, words = ref.rans_encode(sym[None, :], freq[None, :].astype(np.int64), cum[None, :-1].astype(np.int64), k)
    t = lambda a: torch.as_tensor(np.asarray(a, dtype=np.int64))  # noqa: E731
    wt = _words(x)
    rows = t([[0, len(w), k, 0, 0, 0, r, 0, 0]])
    counts = torch.zeros((1, 3), dtype=torch.int64)
    mod = gen.load_triton("bfloat16")
    scratch = torch.zeros(4 * 32 + 2 * len(w), dtype=torch.uint8)
    mod.enc_rans[(1,)](wt, rows, t(freq[None, :]), t(cum[None, :-1]), t([0]), counts, scratch)
    assert counts[0, 0] == len(words[0]) and counts[0, 1] == (sym != 0).sum() and counts[0, 2] == (sym == 1).sum()
    out = torch.zeros(4 * k + 2 * len(words[0]), dtype=torch.uint8)
    mod.enc_place[(1,)](t([[0, k, len(words[0]), 0]]), scratch, out, BLOCK=256)
    assert bytes(out.numpy()) == states[0].astype("<u4").tobytes() + words[0].astype("<u2").tobytes()


def test_device_model_fit_matches_the_host():
    """select_codebooks / sample_histograms / clipped_tables (tensor ops) against codebook.select_codebook /
    sample_histogram / chunk_tables."""
    from codec.codebook import N_CODEBOOKS, chunk_tables, n_bins, sample_histogram, sample_step, select_codebook
    from codegen import device as tb

    rng = np.random.default_rng(1)
    t = lambda a: torch.as_tensor(a, dtype=torch.int64)  # noqa: E731
    for dtype in DTYPES:
        lay = layout_for(dtype)
        m = 300
        n = rng.integers(1, 1 << 20, m)
        n_zero = (rng.random(m) ** 3 * n).astype(np.int64)
        n_log = np.where(rng.random(m) < 0.05, 0, n - n_zero)
        top = 1 << lay.exp_bits
        mean = rng.uniform(-8, top + 4, m)
        s1 = np.round(mean * n_log).astype(np.int64)
        # sample histograms: a bell of random width around each row's mean, some rows with Inf/NaN/+0
        nb = n_bins(lay.exp_bits)
        b = np.arange(nb - 1)
        width = rng.uniform(0.3, 12, m)[:, None]
        hist = np.floor(rng.uniform(0, 4000, m)[:, None] * np.exp(-0.5 * ((b // 2 - mean[:, None]) / width) ** 2))
        hist = np.concatenate([hist, rng.integers(0, 500, m)[:, None]], axis=1).astype(np.int64)
        hist[::7, -2:] += rng.integers(0, 30, (len(hist[::7]), 2))
        cb, ref = tb.select_codebooks(t(n), t(n_zero), t(n_log), t(s1), t(hist), lay)
        want = [select_codebook(*map(int, v[:4]), v[4], lay.exp_bits, lay.has_inf)
                for v in zip(n, n_zero, n_log, s1, hist)]
        assert [tuple(v) for v in zip(cb.tolist(), ref.tolist())] == want
        # scored a few candidates per pass (passes that split a chunk's candidates): the same choice
        cb2, ref2 = tb.select_codebooks(t(n), t(n_zero), t(n_log), t(s1), t(hist), lay, rows_per_pass=37)
        assert torch.equal(cb2, cb) and torch.equal(ref2, ref)
        # the chunks' sample histograms, a short last chunk included
        for cs in (1000, 20000):
            w = rng.integers(0, 1 << (8 * lay.itemsize), 3 * cs + cs // 3).astype(lay.uint)
            w[::5] = 0
            got = tb.sample_histograms(torch.from_numpy(w.view(lay.view_ints)), lay, cs).numpy()
            for c in range(4):
                part = w[c * cs:(c + 1) * cs]
                assert np.array_equal(got[c], sample_histogram(part, lay.exp_bits, lay.man_bits, sample_step(len(part))))
    for dtype in DTYPES:
        lay = layout_for(dtype)
        cbs = rng.integers(0, N_CODEBOOKS, 400)
        refs = rng.integers(-40, (1 << lay.exp_bits) + 40, 400)
        freq, cum = tb.clipped_tables(t(cbs), t(refs), lay)
        entries, hi = tb.decode_tables(t(cbs), t(refs), lay)
        top = (1 << lay.exp_bits) - 1
        for j in range(400):
            f, c, slots = chunk_tables(int(cbs[j]), int(refs[j]), lay.exp_bits, lay.has_inf)
            assert np.array_equal(freq[j].numpy(), f) and np.array_equal(cum[j].numpy(), c[:-1])
            sym = slots.astype(np.int64)          # the decoders' table: slot -> symbol, offset, frequency
            want = sym | ((np.arange(len(sym)) - c[sym].astype(np.int64)) << 7) | (f[sym].astype(np.int64) << 19)
            assert np.array_equal(entries[j].numpy(), want)
            s = np.arange(len(f))
            e = (s - 2) // 2 + int(refs[j]) - 31
            want_hi = np.where((s >= 2) & (e >= 0) & (e <= top), (e << lay.man_bits) | (((s - 2) & 1) << (lay.man_bits - 1)), -1)
            assert np.array_equal(hi[j].numpy(), want_hi)


def _same_fields(a, b):
    import dataclasses

    for f in dataclasses.fields(a):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        assert (np.array_equal(va, vb) if isinstance(va, np.ndarray) else va == vb), f.name


def test_header_from_a_prefix():
    """What the device decoder copies to the host (header extent, chunk head prefixes) parses like the
    whole stream, and a forged length is caught."""
    x = make_values("gaussian", "float16", 5000, 3, -1.0)     # (mostly +0 would be SPARSE chunks)
    x[1500:1500 + 400] = 0                   # zero blocks
    x[3000:3000 + 48] = 0
    for checksum in (False, True):
        blob = bytes(codec.encode(x, chunk_size=1024, checksum=checksum))
        pre = blob[:fmt.header_extent(blob[:fmt.header_nbytes(fmt.MAX_NDIM, 0, False)])]
        assert len(pre) == fmt.parse_header(blob).payload_start
        h = fmt.parse_header(pre, len(blob))
        _same_fields(h, fmt.parse_header(blob))
        coded = np.flatnonzero(h.kinds == fmt.KIND_CODED)
        assert len(coded) and any(fmt.parse_chunk_head(h, blob, int(i)).mode for i in coded)
        for i in map(int, coded):
            a = h.chunk_span(i)[0]
            _same_fields(fmt.parse_chunk_head(h, None, i, blob[a:a + fmt.chunk_head_extent(h, i)]),
                         fmt.parse_chunk_head(h, blob, i))
        with pytest.raises(fmt.FormatError, match="does not match"):
            fmt.parse_header(pre, len(blob) + 1)
        # the device decoders' two-step gather: every chunk's header, the bitmaps of zero-block chunks
        from codegen import device as dv

        got, at = dv._chunk_prefixes(h, torch.frombuffer(bytearray(blob), dtype=torch.uint8), coded)
        for i, a, e in zip(coded, at, fmt.chunk_head_extent(h, coded)):
            start, used = h.chunk_span(int(i))[0], e if fmt.parse_chunk_head(h, blob, int(i)).mode else 20
            assert got[a:a + used].tobytes() == blob[start:start + used]


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


def test_cuda_helpers_lint():
    """The hand-written CUDA code: no standard headers, no allocation, no recursion, fixed-size shared
    memory, and no raw loop over a stream without a bound."""
    src = gen.HELPERS["cuda"][0].read_text()
    assert "#include" not in src and "malloc" not in src and "new " not in src
    functions = re.findall(r"__device__ __forceinline__ \w+ (\w+)\(", src)
    assert {"decode", "enc_stats", "enc_rans", "enc_place", "enc_planes", "enc_copy", "dec_copy"} <= set(functions)
    for fn in functions:
        body = src.split(fn + "(", 1)[1]
        body = body[:body.find("\n}")]
        assert fn + "(" not in body and fn + "<L>(" not in body, f"{fn} calls itself"
    for decl in re.findall(r"__shared__ [^;]+;", src):
        assert re.search(r"\[[\w:{} *]+\]", decl), decl                   # fixed-size shared arrays only
    assert "while" not in src                                              # every loop has a counted bound


def test_generated_sources_lint():
    """Templates only inject constants; the sources avoid the usual pitfalls."""
    for dialect, dtype, arch in gen.all_targets():
        name, src = gen.render(dialect, dtype, arch)
        assert "{" + "key}" not in src and "{dtype}" not in src           # fully rendered
        if dialect == "cuda":
            # the generated file: constants and forwarding entry points only
            assert re.findall(r"#include.*", src) == ['#include "zipccl_codec.cuh"']   # NVRTC: no standard headers
            entries = re.findall(r'extern "C" __global__ void __launch_bounds__\(\d+\)\s*(\w+)\([^)]*\)\s*\{([^}]*)\}', src)
            assert len(entries) == 7
            for name, body in entries:
                assert re.fullmatch(r"\s*zipccl::\w+<L>\([\w, ]*\);\s*", body), (name, body)
        else:                                # the generated module: constants and forwarding entry points
            assert "tl.load" not in src and "tl.store" not in src
            entries = re.findall(r"\ndef (\w+)\(([^)]*)\):\n    lib\.(\w+)\(", src)
            assert len(entries) == 9 and all(a == b for a, _, b in entries)


def test_triton_helpers_lint():
    """The hand-written Triton code: every data load is masked; unmasked loads read only a program's own
    row of offsets and counts, or one table entry / first word that row addresses."""
    src = gen.HELPERS["triton"][0].read_text()
    loads = re.findall(r"tl\.load\((?:[^()]|\([^()]*\))*\)", src)
    assert len(loads) > 30
    for load in loads:
        scalar = re.match(r"tl\.load\((mrow|row|frow|words \+ start|(sym_at|err) \+ c\))", load)
        assert "mask=" in load or scalar, load


def test_cli_generates_and_lists(tmp_path, capsys):
    from codegen.__main__ import main

    assert main(["--dtype", "e5m2", "--dialect", "cuda", "--arch", "sm_100", "--out", str(tmp_path)]) == 0
    assert len(list(tmp_path.glob("cuda_codec_float8_e5m2_sm_100_*.cu"))) == 1
    assert main(["--list", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "generated  cuda_codec_float8_e5m2_sm_100" in out and "missing" in out


# ---------------------------------------------------------------- CUDA kernels, emulated on the CPU
def _emulated(dtype):
    import shutil

    if not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
        pytest.skip("no host C++ compiler to emulate the CUDA kernels")
    from codegen.kernels import kernel_set

    return kernel_set("cuda-emulated", dtype)


def _words(x):
    from codegen import device as dv

    lay = layout_for(x.dtype)
    signed = np.ascontiguousarray(x).reshape(-1).view({1: np.uint8, 2: np.int16, 4: np.int32}[lay.itemsize])
    return torch.from_numpy(signed.copy()).view(lay.torch_words)


def _cuda_roundtrip(x, chunk_size, checksum=False):
    """Encode and decode with the CUDA kernels (emulated): the numba encoder's bytes, the input's bits."""
    from codegen import device as dv

    lay = layout_for(x.dtype)
    kern = _emulated(lay.name)
    flags = fmt.FLAG_CHECKSUM if checksum else 0
    got = dv.encode_stream(_words(x), lay, x.shape, chunk_size, flags, kernels=kern)
    want = codec.encode(x, chunk_size=chunk_size, checksum=checksum)
    assert bytes(got.numpy()) == bytes(want)
    h, words = dv.decode_stream(torch.frombuffer(bytearray(want), dtype=torch.uint8), kernels=kern)
    assert np.array_equal(words.numpy().view(lay.uint), np.ascontiguousarray(x).reshape(-1).view(lay.uint))


# 20-37 s a dtype emulated on Zen 3 (since their inputs include explicit tables): all in CI's slow step (the
# README's run keeps test_cuda_decoder_rejects_corruption_emulated)
@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_kernels_bit_exact_emulated(dtype):
    """The generated CUDA encoder and decoder, run on the CPU by codegen.emulate (a host thread per GPU
    thread, warp votes emulated): the reference's bytes on 150K values with the default chunk size
    (32 rANS lanes), zero blocks, escapes and a short last chunk, and on the five-path small case."""
    x = make_values("gaussian", dtype, 150_001, 3, -2.0)
    x[::9] = 0
    x[70_000:90_000] = 0
    x[100:140] = make_values("random_bits", dtype, 40, 1)
    _cuda_roundtrip(x, codec.api.default_chunk_size(layout_for(dtype)))
    _cuda_roundtrip(_encoder_case(dtype), 128, checksum=True)
    from tests.test_explicit_tables import _mixed_scales

    mix = _mixed_scales(dtype, 4 * 4096, 31, zero_runs=True)     # format 7's explicit tables, with and without a bitmap
    want = codec.encode(mix, chunk_size=4096)
    h = fmt.parse_header(want)
    heads = [fmt.parse_chunk_head(h, want, i) for i in range(h.n_chunks) if h.kinds[i] == fmt.KIND_CODED]
    assert {hd.mode > 0 for hd in heads if hd.codebook == fmt.CB_EXPLICIT} == {False, True}
    _cuda_roundtrip(mix, 4096, checksum=True)
    one = make_values("constant", dtype, 240, 0, -1.0)      # an explicit table giving one symbol all of TOTAL
    one[80:96] = 0                                          # (its frequency once overflowed the u32 slot entry)
    _cuda_roundtrip(one, 100)


from hypothesis import given, strategies as st  # noqa: E402


@pytest.mark.slow
@given(dtype=st.sampled_from(DTYPES), n=st.integers(0, 6000), chunk_size=st.sampled_from([64, 100, 1024, 2048, 4096]),
       dist=st.sampled_from(["gaussian", "laplace", "mostly_zeros", "constant", "random_bits", "lognormal"]),
       seed=st.integers(0, 2**16), zero_run=st.integers(0, 3000))
def test_cuda_kernels_property_emulated(dtype, n, chunk_size, dist, seed, zero_run):
    x = make_values(dist, dtype, n, seed, -1.0)
    x[n // 3:n // 3 + zero_run] = 0
    _cuda_roundtrip(x, chunk_size)


def test_cuda_decoder_rejects_corruption_emulated():
    from codegen import device as dv

    kern = _emulated("float16")
    x = make_values("gaussian", "float16", 5000, 2, -1.0)
    blob = bytearray(codec.encode(x, chunk_size=4096))
    h = fmt.parse_header(blob)
    hd = fmt.parse_chunk_head(h, blob, 0)
    blob[hd.words + 3] ^= 0x21                   # a rANS word
    with pytest.raises(codec.FormatError, match="chunk 0"):
        dv.decode_stream(torch.frombuffer(blob, dtype=torch.uint8), kernels=kern)


_ASAN_SCRIPT = r"""
import numpy as np, torch
import codec
from codec import format as fmt
from codegen import device as dv
from codegen.kernels import kernel_set
from codec.layouts import layout_for
from tests.helpers import make_values
from tests.test_codegen import _encoder_case
from tests.test_explicit_tables import _mixed_scales
rng = np.random.default_rng(0)
for dtype in ("bfloat16", "float8_e4m3fn"):           # 16- and 8-bit words, with and without Inf
    lay, kern = layout_for(dtype), kernel_set("cuda-emulated", dtype)
    for x, cs in ((_encoder_case(dtype), 128), (make_values("laplace", dtype, 9000, 1, -1.0), 4096), (_mixed_scales(dtype, 4 * 4096, 31, zero_runs=True), 4096)):
        x[3000:3700] = 0
        w = torch.from_numpy(x.view(lay.view_ints).copy()).view(lay.torch_words)
        blob = bytes(dv.encode_stream(w, lay, x.shape, cs, 0, kernels=kern).numpy())
        assert blob == bytes(codec.encode(x, chunk_size=cs))
        h = fmt.parse_header(blob)
        for trial in range(12):                    # forged payload bytes: FormatError or some output, never a stray access
            bad = bytearray(blob)
            for p in rng.integers(h.payload_start, len(bad), 1 + trial % 4):
                bad[p] = int(rng.integers(0, 256))
            try:
                dv.decode_stream(torch.frombuffer(bad, dtype=torch.uint8), kernels=kern)
            except codec.FormatError:
                pass
print("asan-clean")
"""


@pytest.mark.slow
def test_cuda_kernels_have_no_stray_accesses_under_asan():
    """The emulated CUDA encoder and decoder compiled with AddressSanitizer (every buffer torch allocates
    gets red zones): valid streams and 24 forged ones for bf16 and e4m3, and no access outside a buffer."""
    import shutil
    import subprocess
    import sys

    gcc = shutil.which("gcc")
    asan = subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip() if gcc else ""
    if not asan or not os.path.exists(asan):
        pytest.skip("no libasan to preload")
    env = dict(os.environ, ZIPCCL_EMULATE_ASAN="1", LD_PRELOAD=asan, ASAN_OPTIONS="detect_leaks=0")
    env.pop("TRITON_INTERPRET", None)
    run = subprocess.run([sys.executable, "-c", _ASAN_SCRIPT], env=env, capture_output=True, text=True, timeout=600,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert run.returncode == 0 and "asan-clean" in run.stdout, run.stderr[-3000:]


@given(pos=st.integers(0, 10_000), value=st.one_of(st.integers(0, 255), st.sampled_from([0, 1, 4, 6, 8, 9, 10, 255])),
       count=st.integers(0, 3), offset=st.one_of(st.none(), st.integers(0, 27)))
def test_device_head_parse_agrees_with_the_host(pos, value, count, offset):
    """The device decoders' chunk-head parse (tensor ops, tables built there) accepts exactly the streams
    format.parse_chunk_heads accepts, and gives the plan the host would build (metas, tables, block lists)."""
    from codegen import device as dv

    x = make_values("gaussian", "float16", 9000, 4, -1.0)
    x[::5] = 0
    x[2000:3100] = 0
    x[3960:4000] = 0                           # chunk 3 ends in zero blocks, the last one short (1000 % 16 = 8)
    x[6000:6010] = make_values("random_bits", "float16", 10, 2)
    blob = bytearray(codec.encode(x, chunk_size=1000))
    h = fmt.parse_header(blob)
    ids = np.flatnonzero(h.kinds == fmt.KIND_CODED)
    assert fmt.parse_chunk_head(h, blob, 3).mode and fmt.parse_chunk_head(h, blob, 3).zero_blocks[-1]
    i = int(ids[pos % len(ids)])
    extent = fmt.chunk_head_extent(h, i)
    for j in range(count):
        blob[h.chunk_span(i)[0] + ((offset if offset is not None else pos // len(ids)) + 7 * j) % extent] = (value + j) & 0xFF
    buf = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    words = torch.empty(h.numel, dtype=torch.uint16)
    kern = object()                               # nothing is launched
    got = dv._device_heads(h, buf, ids, ids * h.chunk_size)
    try:
        want = dv.decode_into(h, buf, range(h.n_chunks), words, host=np.frombuffer(bytes(blob), np.uint8),
                              kernels=kern, launch=False)
    except fmt.FormatError:
        assert got is None
        return
    assert got is not None
    metas, tables, his, nzb = got
    assert torch.equal(metas, want.metas) and torch.equal(tables, want.tables) and torch.equal(his, want.his)
    assert torch.equal(nzb, want.nzb) if nzb is not None else not want.zero_first


def test_sampled_positions_in_zero_blocks_match_the_reference_rule():
    """The device encoder's count of the fit's sampled positions that fall in skipped zero blocks (it
    subtracts them from the chunk's sample) against the reference's: the kept mask, sampled."""
    from codec.codebook import sample_step
    from codec.format import ZERO_BLOCK_MODES
    from codegen import device as tb

    rng = np.random.default_rng(3)
    for mode in ZERO_BLOCK_MODES:
        bs = 1 << mode
        ns = np.array([1000, 16383, 16384, 20000, 32767, 32768, 40000, 65536, 65535])
        width = -(-int(ns.max()) // bs)
        nz = (rng.random((len(ns), width)) < 0.5).astype(np.uint8)
        got = tb._sampled_in_zero_blocks(torch.as_tensor(nz), torch.as_tensor(ns), mode).tolist()
        for j, n in enumerate(ns):
            nb = -(-int(n) // bs)
            skipped = np.repeat(nz[j, :nb] == 0, bs)[:n]
            assert got[j] == int(skipped[::sample_step(int(n))].sum()), (mode, n)
