"""The numba kernels' variants side by side on this CPU: how the rounds read their small tables
(codec._simd.TABLE_LOOKUPS: permutes, gathers or scalar loads) or move stream words
(codec._simd.STREAM_MOVES: register forms of vpexpandw/vpcompressw, pshufb shuffles, or the generic
memory forms); each knob runs every variant the compile target can (permutes need AVX-512 VBMI, register
forms VBMI2, shuffles and gathers AVX2, scalar loads a target without AVX-512; NUMBA_CPU_NAME=haswell
NUMBA_CPU_FEATURES="" measures an AVX2 build's).

    python -m bench.variants --knob lookups [--rounds 3]
    python -m bench.variants --knob moves

Each variant runs in a fresh process with a numba cache of its own (the choice is made when the kernels
compile), the two alternating ``--rounds`` times, so that a shared machine's drift hits both; each
process times single-thread encode and decode (into a reused buffer) of 8 Mi Gaussian values per
dtype, best of 5/7 calls.  Prints MB/s of uncompressed data per round and the median over rounds.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

_RUN = r'''
import json, time
import ml_dtypes, numpy as np
import codec
from codec import _simd
codec.set_num_threads(1)
rng = np.random.default_rng(0)
res = {"variant": (_simd.STREAM_MOVES, _simd.TABLE_LOOKUPS)}
for dt in (ml_dtypes.bfloat16, np.float16, np.float32):
    x = rng.normal(0, 0.02, 8 << 20).astype(dt)
    blob = codec.encode(x)
    out = np.empty_like(x)
    codec.decode(blob, out=out)
    def best(fn, reps):
        ts = []
        for _ in range(reps):
            t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
        return min(ts)
    res[np.dtype(dt).name] = [x.nbytes / best(lambda: codec.encode(x), 5) / 1e6,
                              x.nbytes / best(lambda: codec.decode(blob, out=out), 7) / 1e6]
print(json.dumps(res))
'''


KNOBS = {"lookups": ("ZIPCCL_TABLE_LOOKUPS", "TABLE_LOOKUP_FORMS"),
         "moves": ("ZIPCCL_STREAM_MOVES", "STREAM_MOVE_FORMS")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--knob", choices=sorted(KNOBS), default="lookups")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    from bench.speed import _cpu_model
    from codec import _simd

    var, forms = KNOBS[args.knob]
    results = {v: [] for v in _simd.usable_variants(getattr(_simd, forms))}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for variant in results:
                env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(tmp, variant))
                env[var] = variant
                out = subprocess.run([sys.executable, "-W", "ignore", "-c", _RUN], env=env, capture_output=True,
                                     text=True, check=True)
                results[variant].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{var}; CPU: {_cpu_model()}; MB/s, single thread, encode / decode(out=buf); {args.rounds} rounds, alternating\n")
    print("| variant | dtype | encode per round | decode per round | encode median | decode median |")
    print("|---|---|---|---|---|---|")
    for variant, runs in results.items():
        for dt in ("bfloat16", "float16", "float32"):
            enc = [r[dt][0] for r in runs]
            dec = [r[dt][1] for r in runs]
            print(f"| {variant} | {dt} | {', '.join(f'{v:.0f}' for v in enc)} | {', '.join(f'{v:.0f}' for v in dec)} "
                  f"| {np.median(enc):.0f} | {np.median(dec):.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
