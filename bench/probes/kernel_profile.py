"""Probe: where the numba kernels spend their time, by instruction, without hardware counters or JIT symbols.

    python -m bench.probes.kernel_profile decode [bfloat16] [--seconds 8] [--top 12] [--window 24]
    python -m bench.probes.kernel_profile encode float16
    python -m bench.probes.kernel_profile encode bfloat16 --input relu   (or pruned90, gradsum, sum2)

Runs single-thread encode or decode(out=buf) of 8 Mi Gaussian values in a child process under
``perf record -e cpu-clock`` (a software event: works in VMs that expose no PMU), while the child writes
the executable mappings its JIT-compiled kernels live in to files.  The parent maps each sample's address
into those dumps, disassembles it with objdump and prints the hottest instructions with their
neighbourhood, each annotated with its share of all samples.  A timer-interrupt sample lands on the
instruction *after* the one that was waiting (skid): read a hot line as "the instruction above me was
slow to retire".  Needs ``perf`` (Debian's linux-perf) and binutils' objdump; root or
perf_event_paranoid <= 1 for the samples.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

_CHILD = r'''
import ctypes, json, sys, time
import ml_dtypes, numpy as np
import codec
from codec import _numba as N
what, dtype, seconds, dump, kind = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5]
codec.set_num_threads(1)
dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
rng = np.random.default_rng(0)
x = rng.normal(0, 0.02, 8 << 20)
if kind == "relu":
    x = np.maximum(x, 0)
elif kind.startswith("pruned"):                 # pruned90: 90 % of the values +0, scattered
    x[rng.random(len(x)) < int(kind[6:]) / 100] = 0
elif kind == "sum2":                             # the sum of two bf16 tensors (bench.speed's row): rare exact
    x = (x.astype(dt).astype(np.float32) + rng.normal(0, 0.02, len(x)).astype(dt).astype(np.float32))  # cancellations
elif kind == "gradsum":                          # an all-reduce's partial sum: 2 ranks' MiniLM gradients, the
    from bench.collectives_bench import _data    # mostly-zero head of the flattened tensor (bench.probes.partial_sum_encode)
    x = (_data(8 << 20, 0, "gradients") + _data(8 << 20, 1, "gradients")).float().numpy()
x = x.astype(dt)
blob = codec.encode(x)
out = np.empty_like(x)
codec.decode(blob, out=out)
kernel = list(N._DECODERS.values())[0] if what == "decode" else N._encode_window
bases = [ov.library.get_pointer_to_function(ov.fndesc.llvm_func_name) for ov in kernel.overloads.values()]
regions = []
with open("/proc/self/maps") as f:
    for line in f:
        span, perms = line.split()[:2]
        lo, hi = (int(v, 16) for v in span.split("-"))
        if "x" in perms and any(lo <= b < hi for b in bases):
            regions.append((lo, hi))
for i, (lo, hi) in enumerate(regions):      # each mapping apart: the gaps between them are not readable
    with open(f"{dump}.{i}", "wb") as f:
        f.write(ctypes.string_at(lo, hi - lo))
t0 = time.perf_counter()
calls = 0
while time.perf_counter() - t0 < seconds:
    codec.decode(blob, out=out) if what == "decode" else codec.encode(x)
    calls += 1
mbps = calls * x.nbytes / (time.perf_counter() - t0) / 1e6
print(json.dumps({"regions": regions, "bases": bases, "MBps": mbps}))
'''


def _disassemble(dump: str, lo: int) -> list[tuple[int, str]]:
    text = subprocess.run(["objdump", "-D", "-b", "binary", "-mi386:x86-64", f"--adjust-vma={lo:#x}", dump],
                          check=True, capture_output=True, text=True).stdout
    rows = []
    for line in text.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s*(?:[0-9a-f]{2} )+\s*(.*)", line)
        if m and m.group(2).strip():
            rows.append((int(m.group(1), 16), " ".join(m.group(2).split())))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("encode", "decode"))
    ap.add_argument("dtype", nargs="?", default="bfloat16")
    ap.add_argument("--input", default="gaussian", help="gaussian, relu (half +0), pruned<P> (P %% +0, scattered), gradsum (two ranks' gradients summed), sum2 (two tensors of dtype summed)")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--top", type=int, default=12, help="hot spots shown")
    ap.add_argument("--window", type=int, default=24, help="instructions shown before each hot spot")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        dump, data = os.path.join(tmp, "code.bin"), os.path.join(tmp, "perf.data")
        child = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "4000", "-o", data, sys.executable,
                                "-c", _CHILD, args.what, args.dtype, str(args.seconds), dump, args.input],
                               check=True, capture_output=True, text=True)
        info = json.loads(child.stdout.strip().splitlines()[-1])
        ips = subprocess.run(["perf", "script", "-i", data, "-F", "ip"], check=True, capture_output=True,
                             text=True).stdout.split()
        regions = info["regions"]
        rows = [row for i, (r_lo, _) in enumerate(regions) for row in _disassemble(f"{dump}.{i}", r_lo)]
    lo = regions[0][0]                           # offsets below are from the first mapping's start
    size = sum(r_hi - r_lo for r_lo, r_hi in regions)
    counts = collections.Counter(int(ip, 16) for ip in ips)
    total = sum(counts.values())
    inside = sum(n for a, n in counts.items() if any(r_lo <= a < r_hi for r_lo, r_hi in regions))
    from bench.speed import _cpu_model
    print(f"# {args.what} {args.dtype} {args.input}: {info['MBps']:.0f} MB/s single thread; {_cpu_model()}")
    print(f"# {total} samples, {100 * inside / max(total, 1):.1f} % inside the kernels' code "
          f"({size} bytes in {len(regions)} mapping(s) from {lo:#x}; kernel entries at {', '.join(hex(b) for b in info['bases'])})")
    index = {a: i for i, (a, _) in enumerate(rows)}
    hot = sorted(index[a] for a in [a for a, _ in counts.most_common() if a in index][:args.top])
    spans = []                                   # each hot line's neighbourhood, overlapping ones merged
    for i in hot:
        lo_i, hi_i = max(0, i - args.window), min(len(rows), i + 4)
        if spans and lo_i <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], hi_i)
        else:
            spans.append([lo_i, hi_i])
    for a0, a1 in spans:
        share = sum(counts.get(rows[j][0], 0) for j in range(a0, a1)) / total
        print(f"\n## +{rows[a0][0] - lo:#x} .. +{rows[a1 - 1][0] - lo:#x}: {100 * share:.1f} % of the samples")
        for j in range(a0, a1):
            addr, ins = rows[j]
            n = counts.get(addr, 0)
            print(f"{addr - lo:8x} {100 * n / total:6.2f}%  {ins}" if n else f"{addr - lo:8x}          {ins}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
