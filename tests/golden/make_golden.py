"""Write the golden fixtures of a format version the encoders write: ``python -m tests.golden.make_golden
[VERSION]`` (FORMAT_VERSION by default, REPEATS_VERSION: the streams with a row-repeat section, or
FILTER_VERSION: the streams with a row filter).

Run this only together with a format or codebook-family version bump: it writes
``tests/golden/v<VERSION>/``, whose bytes ``tests/test_golden.py`` pins (the encoder must
reproduce them); the folders of older versions stay as they are, decoded forever.
"""
import json

import numpy as np

import codec
from codec.format import FILTER_VERSION, FORMAT_VERSION, REPEATS_VERSION
from codec.layouts import layout_for
from tests.golden import ROOT
from tests.helpers import column_scaled, make_values, padded_batch

CASES = {
    # name: (distribution, dtype, n, seed, log10 sigma, chunk_size, checksum)
    "gauss_bf16": ("gaussian", "bfloat16", 5000, 1, -1.7, 2048, False),
    "laplace_f16_crc": ("laplace", "float16", 3000, 2, -2.0, 1024, True),
    "student_f32": ("student_t", "float32", 2500, 3, 0.0, 4096, False),
    "zeros_bf16": ("gaussian", "bfloat16", 4000, 4, -2.0, 1024, False),      # + zero rows, see below
    "fp8_e4m3": ("gaussian", "float8_e4m3fn", 3000, 5, 0.0, 2048, False),
    "fp8_e5m2": ("laplace", "float8_e5m2", 3000, 6, -1.0, 1000, True),
    "lognormal_bf16": ("lognormal", "bfloat16", 384, 7, 0.0, 65536, False),
    "kinds_bf16": ("gaussian", "bfloat16", 1100, 8, 0.0, 256, True),         # + raw/const chunks, below
    # format v2: sign modes
    "signs_bf16": ("gaussian", "bfloat16", 1280, 10, -1.0, 256, False),      # chunks +, -, mixed, ReLU, -ReLU
    "adam_sq_f32": ("gaussian", "float32", 3000, 11, -4.0, 1024, True),      # squared: positive, many binades
    "logprob_f16": ("laplace", "float16", 2000, 12, 0.5, 1000, False),       # -|x|: negative
    "subnormal_f16": ("gaussian", "float16", 1500, 13, -3.5, 512, False),    # x^2: fp16 exp_avg_sq, subnormal
    # format v3: codebook family 2 (wide log-normal magnitudes), the shape fitted on a sample
    "wide_lognormal_bf16": ("gaussian", "bfloat16", 40000, 15, 0.0, 20000, False),   # 2^N(0, 2^2): sampled fit
    "sparse_f16": ("gaussian", "float16", 70000, 16, -2.5, 35000, False),    # scattered values: 256/1024-blocks
    # format v4: the compact head (at most 4 chunks)
    "underflow_f16": ("gaussian", "float16", 4096, 19, -2.0, 2048, False),   # all +0: two CONST chunks
    "kinds_compact_bf16": ("gaussian", "bfloat16", 1000, 20, 0.0, 256, True),   # coded, const, raw, short coded
    # format v5: the fit's stride-17 sample and top-of-window reference
    "softmax_bf16": ("gaussian", "bfloat16", 16384, 22, 0.0, 8192, False),   # attention rows, masked keys
    # format v6: SPARSE chunks (a few non-zero words and their positions)
    "sparse_kinds_bf16": ("gaussian", "bfloat16", 40000, 23, -3.0, 20000, True),   # signed, -0, NaN; 3-byte gaps
    "sparse_tiny_f16": ("gaussian", "float16", 20000, 24, -3.0, 4096, False),    # subnormal exp_avg_sq, narrow
    # format v7: explicit tables, where no analytic table fits (two scales inside a chunk)
    "mixture_bf16": ("gaussian", "bfloat16", 24576, 27, -2.0, 4096, False),   # per-value scales 1 and 1/256
    "mixture_zeros_f16": ("gaussian", "float16", 16384, 28, -1.0, 8192, True),   # + all-+0 256-blocks: a bitmap
    "mixture_f32": ("laplace", "float32", 8192, 29, 0.0, 4096, False),        # AdamW exp_avg-like: 3 scales
}


def make_input(name: str) -> np.ndarray:
    dist, dtype, n, seed, ls, _, _ = CASES[name]
    x = make_values(dist, dtype, n, seed, ls)
    if name == "zeros_bf16":   # sparse rows, like the gradient of an embedding table
        rows = x.reshape(-1, 40)
        rows[np.random.default_rng(0).random(len(rows)) < 0.85] = 0
    if name == "kinds_bf16":   # chunk 1 all +0, chunk 2 random bits (stored raw), chunk 3 constant NaN
        x[256:512] = 0
        x[512:768] = make_values("random_bits", dtype, 256, 9)
        x.view(np.uint16)[768:1024] = 0x7FC1
    if name == "signs_bf16":   # one chunk per sign situation: all +, all -, mixed, +/0, -/0 (with -0.0)
        x[:256] = abs(x[:256])
        x[256:512] = -abs(x[256:512])
        x[768:1024] = np.maximum(x[768:1024], 0)
        x[1024:] = np.minimum(x[1024:], -0.0)
    if name == "adam_sq_f32":
        x = x * x
    if name == "subnormal_f16":   # squares underflow: zeros and a few ulps of the smallest subnormal
        x = (x.astype(np.float32) ** 2).astype(x.dtype)
        # chunk 0: mostly 1 ulp (a LayerNorm bias's exp_avg_sq): the model's reference exponent falls
        # below codebook.REF_MIN and is clamped, so the window reaches field 0
        ulps = np.random.default_rng(14).choice(6, 512, p=[0.38, 0.52, 0.07, 0.02, 0.005, 0.005])
        x[:512] = ulps.astype(np.uint16).view(x.dtype)
    if name == "wide_lognormal_bf16":   # magnitudes of Adam's second moment: log-normal, about 2 binades wide
        x = np.exp2(2.0 * x.astype(np.float32)).astype(x.dtype)
    if name == "sparse_f16":   # an fp16 exp_avg_sq: all but a few scattered tiny values underflowed to +0
        keep = np.zeros(n, bool)
        keep[np.random.default_rng(17).choice(n, 8, replace=False)] = True
        keep[35000:35000 + 300] |= np.random.default_rng(18).random(300) < 0.5     # and one denser run
        x = np.where(keep, abs(x), 0).astype(x.dtype)
    if name == "underflow_f16":   # an fp16 exp_avg_sq that underflowed everywhere
        x[:] = 0
    if name == "kinds_compact_bf16":   # chunk 1 all +0, chunk 2 random bits (raw); 4 chunks: a compact head
        x[256:512] = 0
        x[512:768] = make_values("random_bits", dtype, 256, 21)
    if name == "softmax_bf16":   # softmax over the first 40 of 128 keys (the rest masked: +0): a long
        # tail of tiny probabilities pulls the mean exponent far below the largest ones
        logits = x.astype(np.float32).reshape(-1, 128)[:, :40] * 3.0
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs = np.zeros((n // 128, 128), np.float32)
        probs[:, :40] = p / p.sum(axis=1, keepdims=True)
        x = probs.reshape(-1).astype(x.dtype)
    if name == "sparse_kinds_bf16":   # chunk 0: 7 values, one gap above 2^14, -0 and a NaN; chunk 1: 40
        w = x.view(np.uint16)      # scattered (gaps of 1, 2 and 3 bytes); the rest +0
        keep = np.zeros(n, bool)
        keep[[0, 1, 130, 17000, 17001, 19000, 19999]] = True
        keep[20000 + np.random.default_rng(25).choice(20000, 40, replace=False)] = True
        w[~keep] = 0
        w[17000] = 0x8000
        w[19000] = 0x7FC1
    if name == "sparse_tiny_f16":   # squares underflow to +0 or a few ulps (narrow packed words), one
        x = (x.astype(np.float32) ** 2).astype(x.dtype)     # chunk left dense (coded)
        x[4096:] = np.where(np.random.default_rng(26).random(n - 4096) < 0.01, x[4096:], 0)
    if name == "logprob_f16":
        x = -abs(x)
    if name in ("mixture_bf16", "mixture_zeros_f16", "mixture_f32"):   # rows of a gradient at other scales
        rng = np.random.default_rng(CASES[name][3] + 100)
        scales = np.array([1.0, 2.0 ** -8] if name != "mixture_f32" else [1.0, 2.0 ** -6, 2.0 ** -12])
        x = (x.astype(np.float32) * scales[rng.integers(0, len(scales), n)]).astype(x.dtype)
        if name == "mixture_bf16":       # the last chunk at one scale: the analytic fit (no table)
            x[16384:] = make_values("gaussian", dtype, n - 16384, 30, -2.0)
        if name == "mixture_zeros_f16":
            blocks = x.reshape(-1, 256)
            blocks[rng.random(len(blocks)) < 0.4] = 0
    return x


# format v9 (REPEATS_VERSION): a row-repeat section; the inputs are tensors of at least
# codec.repeats.MIN_TENSOR_BYTES, kept as their distinct rows and each row's index among them (.npz)
REPEAT_CASES = {
    # name: (dtype, shape, seed, most tokens a sequence, chunk_size, checksum)
    "padded_bf16": ("bfloat16", (64, 128, 64), 40, 8, 65536, False),           # fixed-width head, 8 chunks
    "padded_f32_crc": ("float32", (32, 128, 64), 41, 8, 1 << 17, True),         # compact head, checksums
}


# format v10 (FILTER_VERSION): a row filter; tensors of at least codec.filters.MIN_TENSOR_BYTES whose columns keep
# their scale, most of them masked (+0, as attention's masked keys), kept as distinct rows and indexes (.npz)
FILTER_CASES = {
    # name: (dtype, rows, width, seed, masked columns, chunk_size, checksum)
    "columns_bf16": ("bfloat16", 4608, 128, 50, 120, 65536, False),      # every chunk filtered
    "columns_e4m3_crc": ("float8_e4m3fn", 8704, 128, 51, 112, 131072, True),   # + a chunk of noise: not filtered
    "columns_repeats_f16": ("float16", 4608, 128, 52, 96, 65536, False),      # + repeated rows: both sections
}


def make_filter_input(name: str) -> np.ndarray:
    dtype, rows, width, seed, masked, _, _ = FILTER_CASES[name]
    x = column_scaled(dtype, rows, width, seed, masked)
    if name == "columns_e4m3_crc":
        x[1024:2048, :width - masked] = make_values("gaussian", dtype, 1024 * (width - masked), 53).reshape(1024, -1)
    if name == "columns_repeats_f16":
        x[3000:3600] = x[7]
    return x


def main(version: int = FORMAT_VERSION):
    folder = ROOT / f"v{version}"
    folder.mkdir(exist_ok=True)
    manifest = {}
    if version == REPEATS_VERSION:
        for name, (dtype, shape, seed, most, cs, crc) in REPEAT_CASES.items():
            x = padded_batch(dtype, *shape, seed, most)
            rows, index = np.unique(x.reshape(-1, shape[-1]).view(layout_for(x.dtype).uint), axis=0, return_inverse=True)
            np.savez_compressed(folder / f"{name}.input.npz", rows=rows, index=index.ravel().astype(np.uint32))
            blob = codec.encode(x, chunk_size=cs, checksum=crc, backend="reference")
            assert codec.inspect(blob)["format_version"] == version, name
            (folder / f"{name}.zccl").write_bytes(blob)
            manifest[name] = {"dtype": dtype, "numel": x.size, "shape": list(shape), "chunk_size": cs,
                              "checksum": crc, "nbytes": len(blob)}
    for name, (dtype, rows, width, _, _, cs, crc) in FILTER_CASES.items() if version == FILTER_VERSION else ():
        x = make_filter_input(name)
        distinct, index = np.unique(x.view(layout_for(x.dtype).uint), axis=0, return_inverse=True)
        np.savez_compressed(folder / f"{name}.input.npz", rows=distinct, index=index.ravel().astype(np.uint32))
        blob = codec.encode(x, chunk_size=cs, checksum=crc, backend="reference")
        assert codec.inspect(blob)["format_version"] == version, name
        (folder / f"{name}.zccl").write_bytes(blob)
        manifest[name] = {"dtype": dtype, "numel": x.size, "shape": [rows, width], "chunk_size": cs,
                          "checksum": crc, "nbytes": len(blob)}
    for name, (_, dtype, n, _, _, cs, crc) in CASES.items() if version == FORMAT_VERSION else ():
        x = make_input(name)
        (folder / f"{name}.input").write_bytes(x.tobytes())
        blob = codec.encode(x, chunk_size=cs, checksum=crc, backend="reference")
        (folder / f"{name}.zccl").write_bytes(blob)
        manifest[name] = {"dtype": dtype, "numel": n, "chunk_size": cs, "checksum": crc, "nbytes": len(blob)}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    import sys

    main(int(sys.argv[1]) if len(sys.argv) > 1 else FORMAT_VERSION)
