"""GPU check: bit-exact decode and encode through the generated Triton kernels, decode throughput.

    bash bench/gpu_check.sh RESULTS_DIR        # installs wheels placed beside it, then runs this

Needs a CUDA GPU.  Streams are encoded on the CPU (numba, the reference's bytes) and decoded on
the GPU; every result is compared bit for bit with the input.  Throughput is reported next to
``torch`` device-to-device copy bandwidth measured in the same run.  The NVRTC-compiled CUDA
kernels are compiled for the device's arch as a check; launching them is not wired yet.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out_dir = Path(argv[0] if argv else "gpu-results")
    out_dir.mkdir(parents=True, exist_ok=True)
    import torch

    import codec
    from codegen import generate as gen
    from tests.helpers import DTYPES, make_values

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    report = {"device": torch.cuda.get_device_name(), "exact": [], "throughput": [], "nvrtc": []}
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    for dtype in DTYPES:
        if arch in gen.ARCHS:
            report["nvrtc"].append({"dtype": dtype, "arch": arch,
                                    "cubin_bytes": len(gen.compile_cuda(dtype, arch, output="cubin"))})
        for n in (1, 1000, 1 << 16, 1 << 20, 1 << 24):
            x = make_values("gaussian", dtype, n, n, -1.5)
            if n > 1000:
                x[: n // 8] = 0
            blob = codec.encode(x)
            y = codec.decode(blob, backend="triton")
            ok = bool(np.array_equal(y.view(np.uint8), x.view(np.uint8)))
            report["exact"].append({"dtype": dtype, "n": n, "what": "triton decode", "bit_exact": ok})
            print(dtype, n, "decode", "bit-exact" if ok else "MISMATCH", flush=True)
            if n <= 1 << 20:                       # the encoder's host analysis is the NumPy reference's: slow
                same = bytes(codec.encode(x, backend="triton")) == bytes(blob)
                report["exact"].append({"dtype": dtype, "n": n, "what": "triton encode", "bit_exact": same})
                print(dtype, n, "encode", "same bytes" if same else "MISMATCH", flush=True)
    # throughput: 256 MiB bf16, kernel time only (host-side table building excluded by the second call)
    x = make_values("gaussian", "bfloat16", 128 << 20, 0, -1.5)
    blob = codec.encode(x)
    for rep in range(3):
        torch.cuda.synchronize()
        t = time.perf_counter()
        codec.decode(blob, backend="triton")
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        report["throughput"].append({"what": "triton decode incl. host work", "GBps": x.nbytes / dt / 1e9})
    a = torch.empty(x.nbytes, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    torch.cuda.synchronize()
    report["throughput"].append({"what": "torch copy", "GBps": 10 * x.nbytes / (time.perf_counter() - t) / 1e9})
    (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report["throughput"], indent=1))
    return 0 if all(e["bit_exact"] for e in report["exact"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
