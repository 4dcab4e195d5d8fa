"""Where the device encoder's and decoder's end-to-end time goes, beyond the kernels (a CUDA GPU):
``python -m bench.gpu_profile OUT_DIR [n_values] [dialects]`` (dialects: ``triton,cuda``; without a GPU it
runs on the CPU, Triton under ``TRITON_INTERPRET=1``: a smoke test, ~100 s for 3000 values, triton).

Writes OUT_DIR/profile_{dialect}.txt per dialect: the end-to-end times of one encode and one decode
of bf16 values (after a warm-up), the Python functions with the most own time (cProfile: a torch op
that waits for the device shows the wait), and torch's operator table (host time per op, device time
per kernel).  Used to find the host work and synchronisations that bench/gpu_check.py's breakdown
reports as 'other'.
"""
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    import codec
    from codegen import device as dv

    argv = sys.argv[1:] if argv is None else list(argv)
    out = Path(argv[0] if argv else "gpu-profile")
    out.mkdir(parents=True, exist_ok=True)
    n = int(argv[1]) if len(argv) > 1 else 128 << 20
    dialects = argv[2].split(",") if len(argv) > 2 else ["triton", "cuda"]
    gpu = torch.cuda.is_available()
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    x = (torch.randn(n, device="cuda" if gpu else "cpu") * 0.02).to(torch.bfloat16)
    x.view(torch.int16)[::53] = 0
    lay = codec.layouts.layout_for("bfloat16")
    words = x.view(torch.uint16)
    for dialect in dialects:
        kern = dv.kernel_set(dialect, "bfloat16")
        enc = lambda: dv.encode_stream(words, lay, x.shape, 1 << 16, 0, kernels=kern)   # noqa: E731
        s = enc()
        dec = lambda: dv.decode_stream(s, kernels=kern)                                 # noqa: E731
        dec()
        sync()
        lines = [f"# {dialect}: {n} bf16 values on {torch.cuda.get_device_name() if gpu else 'the CPU'}"]
        for name, fn in (("encode", enc), ("decode", dec)):
            times = []
            for _ in range(5):
                t = time.perf_counter()
                fn()
                sync()
                times.append((time.perf_counter() - t) * 1e3)
            lines.append(f"{name}: {sorted(times)[2]:.2f} ms (median of 5; all {[round(v, 2) for v in times]})")
            prof = cProfile.Profile()
            prof.enable()
            fn()
            sync()
            prof.disable()
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(35)
            lines += [f"## {name}: cProfile, by own time", buf.getvalue()]
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(30)
            lines += [f"## {name}: cProfile, by cumulative time", buf.getvalue()]
            with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])) as p:
                fn()
                sync()
            ka = p.key_averages()
            lines += [f"## {name}: torch ops by host time", ka.table(sort_by="self_cpu_time_total", row_limit=30),
                      f"## {name}: by device time", ka.table(sort_by="self_device_time_total", row_limit=20)]
        (out / f"profile_{dialect}.txt").write_text("\n".join(lines))
        print("\n".join(lines[:3]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
