"""GPU check: bit-exact encode/decode on the device for every dtype and both dialects, and throughput.

    bash bench/gpu_check.sh RESULTS_DIR      # installs the wheels in bench/wheels, runs the GPU tests, then this

Needs a CUDA GPU.  For each dialect (Triton, CUDA through NVRTC + cuda.core), dtype and size from 1
value to 1 GiB, a tensor made on the GPU is encoded there and decoded there; the decode must give its
bits back, and up to 2^24 values the stream must be the CPU (numba) encoder's bytes, which the test
suite proves equal to the NumPy reference's (the reference's itself, up to 2^20, where numba does not
run); above that the two dialects must agree with each other.
Throughput, 256 MiB of bfloat16 (Gaussian weights with a few exact zeros): encode and decode end to
end (host work included) and the decode kernels alone, beside torch's device-to-device copy in the
same run and, where they install, nvCOMP's ANS and DFloat11.  Writes RESULTS_DIR/gpu_check.json and
gpu_check.md.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

# the whole check must end well inside 8 minutes; optional parts stop here (gpu_check.sh passes what
# its own 8-minute budget leaves after the tests)
BUDGET_S = int(os.environ.get("ZIPCCL_GPU_BUDGET_S", "400"))


def _sync():
    import torch

    torch.cuda.synchronize()


def _time(fn, reps=5):
    """Median seconds of ``fn`` (after one warm-up), synchronised."""
    fn()
    _sync()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        _sync()
        out.append(time.perf_counter() - t)
    return float(np.median(out))


def _kernel_time(fn, reps=10):
    """Median milliseconds of ``fn`` between CUDA events (device time, no host work measured)."""
    import torch

    fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return float(np.median(times)) / 1e3


def _tensor(dtype, n, seed):
    """A Gaussian weight-like tensor on the GPU with zero runs, scattered zeros and random bit patterns."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(n, generator=g, device="cuda") * 0.02).to(getattr(torch, dtype))
    if n > 100:
        ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[x.element_size()]
        v = x.view(ints)
        v[n // 5:n // 5 + n // 7] = 0
        v[::97] = 0
        v[7:40] = torch.randint(-(1 << 7), 1 << 7, (33,), device="cuda", dtype=torch.int64).to(ints)
    return x


def _bits(t):
    import torch

    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def _cpu_encoder():
    """``(backend, largest size to compare)``: numba if it works here (it needs numba >= 0.68), else
    the NumPy reference on smaller sizes."""
    import codec

    try:
        codec.encode(np.zeros(10, np.float32), backend="numba")
        return "numba", 1 << 24
    except Exception as e:                                # noqa: BLE001
        print(f"numba encoder unusable here ({type(e).__name__}: {e}); comparing with the reference", flush=True)
        return "reference", 1 << 20


def exactness(report, t0):
    import torch

    import codec
    from tests.helpers import DTYPES

    cpu_backend, cpu_limit = _cpu_encoder()
    report["cpu_encoder"] = cpu_backend

    sizes = [1, 2, 1000, 65_537, (1 << 20) + 3, 1 << 24]
    for dtype in DTYPES:
        big = [1 << 29] if dtype == "bfloat16" else [1 << 27]          # 1 GiB of bf16; 128M values otherwise
        for n in sizes + big:
            if n > (1 << 24) and time.perf_counter() - t0 > BUDGET_S * 0.6:
                report["skipped"].append(f"exactness {dtype} n={n}: time budget")
                continue
            x = _tensor(dtype, n, n % 9973)
            streams = {}
            for dialect in ("triton", "cuda"):
                row = {"dtype": dtype, "n": n, "dialect": dialect}
                try:
                    t = time.perf_counter()
                    s = codec.encode(x, backend=dialect)
                    y = codec.decode(s, backend=dialect)
                    _sync()
                    row["seconds"] = round(time.perf_counter() - t, 3)
                    row["roundtrip_bit_exact"] = bool(torch.equal(_bits(y), _bits(x)))
                    row["ratio"] = round(x.numel() * x.element_size() / s.numel(), 4)
                    streams[dialect] = s
                    del y
                except Exception as e:                    # noqa: BLE001  (recorded, the check goes on)
                    row["error"] = f"{type(e).__name__}: {e}"[:500]
                    row["trace"] = traceback.format_exc()[-1500:]
                report["exact"].append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "trace"}), flush=True)
            if n <= cpu_limit:
                want = bytes(codec.encode(x.cpu(), backend=cpu_backend))   # the CPU encoder's bytes
                for dialect, s in streams.items():
                    report["exact"].append({"dtype": dtype, "n": n, "dialect": dialect,
                                            "same_bytes_as_cpu_encoder": bytes(s.cpu().numpy()) == want})
            elif len(streams) == 2:
                report["exact"].append({"dtype": dtype, "n": n, "dialect": "triton vs cuda",
                                        "same_bytes": bool(torch.equal(streams["triton"], streams["cuda"]))})
            del streams, x
            torch.cuda.empty_cache()
    _repeated_rows(report, cpu_backend)


def _repeated_rows(report, cpu_backend) -> None:
    """Format 9: a padded batch's repeated rows, encoded from the GPU (the search's gate reads the device
    tensor; the rows are then compared on the host) and decoded there (the section applied to the device's
    words); format 10: a column-scaled tensor's row filter (the gate and the transform on the device, the
    inverse on the decoded words there): the CPU encoder's bytes, the input's bits."""
    from tests.helpers import column_scaled, padded_batch

    for case, x in (("format 9 row repeats", padded_batch("bfloat16", 17, 128, 256, 1, 40)),
                    ("format 10 row filter", column_scaled("bfloat16", 4608, 128, 3, 32))):
        _device_case(report, cpu_backend, case, x)


def _device_case(report, cpu_backend, case, x) -> None:
    import torch

    import codec

    host = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    want = bytes(codec.encode(host, backend=cpu_backend))             # a torch tensor's stream: FLAG_TORCH, as the GPU's
    xt = host.cuda()
    for dialect in ("triton", "cuda"):
        row = {"dtype": "bfloat16", "n": int(x.size), "dialect": dialect, "case": case}
        try:
            s = codec.encode(xt, backend=dialect)
            y = codec.decode(s, backend=dialect)
            _sync()
            row["format_version"] = codec.inspect(s.cpu().numpy())["format_version"]
            row["same_bytes_as_cpu_encoder"] = bytes(s.cpu().numpy()) == want
            row["roundtrip_bit_exact"] = bool(torch.equal(_bits(y), _bits(xt)))
        except Exception as e:                        # noqa: BLE001  (recorded, the check goes on)
            row["error"] = f"{type(e).__name__}: {e}"[:500]
            row["trace"] = traceback.format_exc()[-1500:]
        report["exact"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "trace"}), flush=True)


def throughput(report):
    import torch

    import codec
    from codegen import device as dv

    n = 128 << 20                                                          # 256 MiB of bfloat16
    x = (torch.randn(n, device="cuda") * 0.02).to(torch.bfloat16)
    x.view(torch.int16)[::53] = 0
    nbytes = x.numel() * 2
    y = torch.empty_like(x)
    copy_s = _kernel_time(lambda: y.copy_(x))
    rows = [{"what": "torch device-to-device copy (bytes copied / s)", "GBps": nbytes / copy_s / 1e9}]
    for dialect in ("triton", "cuda"):
        try:
            s = codec.encode(x, backend=dialect)
            ratio = nbytes / s.numel()
            enc = _time(lambda: codec.encode(x, backend=dialect))
            dec = _time(lambda: codec.decode(s, backend=dialect))
            h = codec.format.parse_header(s[:codec.format.header_extent(s[:272].cpu().numpy())].cpu().numpy(), s.numel())
            words = torch.empty(n, dtype=torch.uint16, device="cuda")
            plan = dv.decode_into(h, s, range(h.n_chunks), words, kernels=dv.kernel_set(dialect, "bfloat16"),
                                  launch=False)
            rows += [{"what": f"zipccl {dialect} encode, end to end", "GBps": nbytes / enc / 1e9, "ratio": ratio},
                     {"what": f"zipccl {dialect} decode, end to end", "GBps": nbytes / dec / 1e9}]
            for split in ((False, True) if dialect == "triton" else (False,)):
                words.fill_(0x5A5A)
                kern = _kernel_time(lambda: plan.run(split=split))
                plan.check()
                exact = bool(torch.equal(words.view(torch.int16), x.view(torch.int16)))
                rows.append({"what": f"zipccl {dialect} decode kernels, {'two passes' if split else 'one pass'}",
                             "GBps": nbytes / kern / 1e9, "bit_exact": exact})
        except Exception as e:                            # noqa: BLE001
            rows.append({"what": f"zipccl {dialect}", "error": f"{type(e).__name__}: {e}"[:500],
                         "trace": traceback.format_exc()[-1500:]})
    rows += _nvcomp(x, nbytes) + _dfloat11(x)
    for r in rows:
        if "GBps" in r:
            r["vs_copy"] = round(r["GBps"] / rows[0]["GBps"], 4)
            r["GBps"] = round(r["GBps"], 2)
    report["throughput"] = rows
    print(json.dumps(rows, indent=1), flush=True)


class _Timed:
    """A kernel set that times each call between CUDA events (for the per-kernel breakdown)."""

    def __init__(self, inner):
        self.inner, self.events = inner, []

    def __getattr__(self, name):
        import torch

        fn = getattr(self.inner, name)

        def timed(*args):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(*args)
            b.record()
            self.events.append((name, a, b))
        return timed

    def report(self):
        _sync()
        out = {}
        for name, a, b in self.events:
            out[name] = out.get(name, 0.0) + a.elapsed_time(b)
        self.events = []
        return {k: round(v, 4) for k, v in out.items()}


def breakdown(report):
    """Where one encode and one decode of 256 MiB bf16 spend their time: each kernel's device time, and
    the rest of the end-to-end time (tensor ops, syncs, host work, launches)."""
    import torch

    import codec
    from codegen import device as dv

    x = (torch.randn(128 << 20, device="cuda") * 0.02).to(torch.bfloat16)
    lay = codec.layouts.layout_for("bfloat16")
    words = x.view(torch.uint16)
    rows = []
    for dialect in ("triton", "cuda"):
        try:
            kern = _Timed(dv.kernel_set(dialect, "bfloat16"))
            dv.encode_stream(words, lay, x.shape, 1 << 16, 0, kernels=kern)          # warm-up
            kern.report()
            _sync()
            t = time.perf_counter()
            s = dv.encode_stream(words, lay, x.shape, 1 << 16, 0, kernels=kern)
            _sync()
            enc = (time.perf_counter() - t) * 1e3
            enc_k = kern.report()
            t = time.perf_counter()
            dv.decode_stream(s, kernels=kern)
            _sync()
            dec = (time.perf_counter() - t) * 1e3
            dec_k = kern.report()
            rows.append({"dialect": dialect, "encode_ms": round(enc, 3), "encode_kernels_ms": enc_k,
                         "encode_other_ms": round(enc - sum(enc_k.values()), 3), "decode_ms": round(dec, 3),
                         "decode_kernels_ms": dec_k, "decode_other_ms": round(dec - sum(dec_k.values()), 3)})
        except Exception as e:                            # noqa: BLE001
            rows.append({"dialect": dialect, "error": f"{type(e).__name__}: {e}"[:500]})
    report["breakdown"] = rows
    print(json.dumps(rows, indent=1), flush=True)


def _nvcomp(x, nbytes):
    try:
        from nvidia import nvcomp
    except Exception as e:                                # noqa: BLE001
        return [{"what": "nvCOMP ANS", "error": f"not installed: {e}"}]
    try:
        import torch

        raw = x.view(torch.uint8)
        c = nvcomp.Codec(algorithm="ANS")
        arr = nvcomp.as_array(raw)
        enc = c.encode(arr)
        comp = torch.from_dlpack(enc) if hasattr(enc, "__dlpack__") else None
        size = comp.numel() if comp is not None else int(getattr(enc, "buffer_size", 0))
        t_enc = _kernel_time(lambda: c.encode(arr), reps=5)
        t_dec = _kernel_time(lambda: c.decode(enc), reps=5)
        back = torch.from_dlpack(c.decode(enc)).view(torch.uint8)
        return [{"what": "nvCOMP ANS encode", "GBps": nbytes / t_enc / 1e9, "ratio": nbytes / size if size else None},
                {"what": "nvCOMP ANS decode", "GBps": nbytes / t_dec / 1e9,
                 "bit_exact": bool(torch.equal(back, raw))}]
    except Exception as e:                                # noqa: BLE001
        return [{"what": "nvCOMP ANS", "error": f"{type(e).__name__}: {e}"[:500], "trace": traceback.format_exc()[-1500:]}]


def _dfloat11(x):
    """DFloat11's own GPU decoder on a tensor its (pure-Python) encoder can prepare in seconds: 4M values."""
    try:
        import math

        import cupy as cp
        import torch
        from dfloat11 import dfloat11 as df
        from dfloat11.dfloat11_utils import get_codec, get_32bit_codec, get_luts, encode_weights
    except Exception as e:                                # noqa: BLE001
        return [{"what": "DFloat11", "error": f"not installed: {e}"}]
    try:
        w = x[: 1 << 22].cpu()
        _, counter = get_codec(w)
        codec_, _, table = get_32bit_codec(counter)
        luts = get_luts(table)
        tpb, bpt = df.threads_per_block, df.bytes_per_thread
        encoded, other, positions, gaps, _ = encode_weights([w], codec_, bpt, tpb[0])
        dev = [t.cuda() for t in (luts, encoded, other, positions, gaps)]
        n_bytes, n = encoded.numel(), w.numel()
        out = torch.empty(n, dtype=torch.bfloat16, device="cuda")
        pos = positions.numpy().astype(np.int64)
        shared = tpb[0] * 4 + 4 + int((pos[1:] - pos[:-1]).max()) * 2
        grid = (int(math.ceil(n_bytes / (tpb[0] * bpt))),)

        def run():
            df._decode(grid=grid, block=tpb, shared_mem=shared,
                       args=[dev[0].data_ptr(), dev[1].data_ptr(), dev[2].data_ptr(), dev[3].data_ptr(),
                             dev[4].data_ptr(), out.data_ptr(), luts.shape[0], n_bytes, n])

        with cp.cuda.Device(0):
            t = _kernel_time(run)
        size = encoded.numel() + other.numel() + 4 * positions.numel() + gaps.numel()
        return [{"what": "DFloat11 decode (4M values: its encoder is pure Python)", "GBps": 2 * n / t / 1e9,
                 "ratio": 2 * n / size, "bit_exact": bool(torch.equal(out.cpu().view(torch.int16), w.view(torch.int16)))}]
    except Exception as e:                                # noqa: BLE001
        return [{"what": "DFloat11", "error": f"{type(e).__name__}: {e}"[:500], "trace": traceback.format_exc()[-1500:]}]


def _markdown(report) -> str:
    lines = [f"# GPU check: {report['device']}", "", f"torch {report['torch']}, triton {report['triton']}; "
             "regenerate: `bash bench/gpu_check.sh RESULTS_DIR`", "", "## Throughput, 256 MiB bfloat16", "",
             "| what | GB/s | vs torch copy | ratio | bit-exact |", "|---|---|---|---|---|"]
    for r in report.get("throughput", []):
        lines.append(f"| {r['what']} | {r.get('GBps', r.get('error', ''))} | {r.get('vs_copy', '')} | "
                     f"{round(r['ratio'], 4) if r.get('ratio') else ''} | {r.get('bit_exact', '')} |")
    lines += ["", "## Where the time goes (256 MiB bf16, ms: each kernel's device time, and the rest)", ""]
    lines += [f"- {json.dumps(r)}" for r in report.get("breakdown", [])]
    bad = [r for r in report["exact"] if r.get("error") or r.get("roundtrip_bit_exact") is False
           or r.get("same_bytes_as_cpu_encoder") is False or r.get("same_bytes") is False]
    lines += ["", "## Exactness", "", f"{len(report['exact'])} checks, {len(bad)} failed"]
    lines += [f"- {json.dumps({k: v for k, v in r.items() if k != 'trace'})}" for r in bad]
    lines += [f"- skipped: {s}" for s in report["skipped"]]
    lines += ["", "## Errors", ""] + [f"- {e}" for e in report.get("errors", [])] if report.get("errors") else []
    if report.get("imports"):
        lines += ["", f"## Imports (Python {report.get('python')})", ""]
        lines += [f"- {k}: {v}" for k, v in report["imports"].items()]
    if report.get("generated"):
        lines += ["", f"Dry run: {len(report['generated'])} kernel sources generated; no device used."]
    if report.get("cubins"):
        lines += ["", "CUDA kernels compiled through cuda.core (NVRTC), no device:", ""]
        lines += [f"- {k}: {v}" for k, v in report["cubins"].items()]
    return "\n".join(lines) + "\n"


def _imports(report) -> bool:
    """Import everything the check uses; record versions, or the error of what failed (optional peers
    only noted).  True when every required module imports."""
    required = ["numpy", "ml_dtypes", "crc32c", "torch", "triton", "cuda.core", "codec", "codegen.device",
                "codegen.kernels", "codegen.generate"]
    optional = ["numba", "cupy", "nvidia.nvcomp", "dfloat11"]
    import importlib

    ok = True
    found = {}
    for name in required + optional:
        try:
            mod = importlib.import_module(name)
            found[name] = str(getattr(mod, "__version__", "ok"))
        except Exception as e:                            # noqa: BLE001 - reported
            found[name] = f"{'MISSING' if name in required else 'absent'}: {type(e).__name__}: {e}"
            ok = ok and name not in required
    report["imports"] = found
    report["python"] = sys.version.split()[0]
    return ok


def _dry_run(report) -> None:
    """Everything but the device: the imports, every generated kernel source of both dialects, the
    CUDA ones compiled to cubins through cuda.core as the ``cuda`` backend does, the launch arguments
    and stream protocol built as for a launch, and the DLPack entry points the device API uses."""
    import torch

    from codegen import generate as gen
    from codegen import kernels

    made, cubins = [], {}
    for dialect, dtype, arch in gen.all_targets():
        made.append(str(gen.generate(dialect, dtype, arch).name))
        if dialect == "cuda":
            source, module = kernels.compile_with_cuda_core(dtype, arch)
            names = gen.cuda_entry_points(source)
            cubins[f"{dtype} {arch}"] = f"{len(module.code)} bytes, {len(names)} kernels"
    report["generated"] = made
    report["cubins"] = cubins
    from cuda.core import LaunchConfig

    LaunchConfig(grid=3, block=256)
    t = torch.zeros(4, dtype=torch.int32)
    args = kernels.launch_args("pqi", (t, 5, 6))
    assert [int(a) for a in args] == [t.data_ptr(), 5, 6], args
    assert kernels.TorchStream(7).__cuda_stream__() == (0, 7)
    assert callable(torch.from_dlpack) and hasattr(t, "__dlpack__")
    # bench.gpu_profile (run after the check): its imports and the profiler names it sorts by
    import bench.gpu_profile  # noqa: F401
    from torch.autograd.profiler_util import FunctionEventAvg
    from torch.profiler import ProfilerActivity

    assert ProfilerActivity.CUDA and all(hasattr(FunctionEventAvg, f"{k}_time_total_str") for k in ("self_cpu", "self_device"))
    try:
        import cupy
        import ml_dtypes
    except ImportError:
        return
    assert callable(cupy.from_dlpack) and hasattr(cupy.ndarray, "__dlpack__")
    report["cupy_bfloat16"] = str(cupy.dtype(ml_dtypes.bfloat16))


def _write(out_dir: Path, report) -> None:
    (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=1))
    (out_dir / "gpu_check.md").write_text(_markdown(report))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    dry = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    out_dir = Path(argv[0] if argv else "gpu-results")
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    report = {"device": "none (dry run)" if dry else "?", "torch": "?", "triton": "?", "dry_run": dry,
              "exact": [], "throughput": [], "skipped": [], "errors": []}
    try:
        imports_ok = _imports(report)
        report["torch"], report["triton"] = report["imports"]["torch"], report["imports"]["triton"]
        if not imports_ok:
            report["errors"].append("required imports failed: see imports")
            return 2
        if dry:
            _dry_run(report)
            return 0
        import torch

        if not torch.cuda.is_available():
            report["errors"].append("no CUDA device")
            print("no CUDA device", file=sys.stderr)
            return 2
        report["device"] = torch.cuda.get_device_name()
        # each phase on its own: a failure is recorded and the next phase still runs; the tables are
        # rewritten after every phase, so whatever was measured is on disk whatever happens later
        for phase in (throughput, breakdown, lambda r: exactness(r, t0)):
            try:
                phase(report)
            except Exception as e:                        # noqa: BLE001 - recorded in the results
                report["errors"].append(f"{getattr(phase, '__name__', 'exactness')}: {type(e).__name__}: {e}")
                traceback.print_exc()
            _write(out_dir, report)
    finally:
        report["seconds"] = round(time.perf_counter() - t0, 1)
        _write(out_dir, report)
    failed = [r for r in report["exact"] if r.get("error") or False in (r.get("roundtrip_bit_exact"),
              r.get("same_bytes_as_cpu_encoder"), r.get("same_bytes"))]
    return 1 if failed or report["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
