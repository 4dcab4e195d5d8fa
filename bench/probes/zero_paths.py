"""Decode speed of chunks with +0 values (ZERO symbols) and no zero blocks, by how common the zeros are,
and which path the rounds take for them (``codec._numba._open_chunk``'s ``dense``: 3, the dense value
assembly with a group holding a ZERO or ESC lane redone; 2, the window path).

    python -m bench.probes.zero_paths [--out FILE.md]

Inputs: 8 Mi bf16 values, standard normal; the sum of two such tensors (exact cancellations: 0.09 % +0),
+0 scattered at random at 0.3-50 %, and 0.2 % +0 with 0.2 % escapes (+inf).  One thread, decode into a
reused buffer, best of 7 calls, the inputs' calls interleaved.  The threshold between the paths is
``codec._numba._SHIFTED_MAX`` (a constant compiled into the kernels: to time the other path, change it and
run with another ``NUMBA_CACHE_DIR``).
"""
from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np

from . import emit


def _inputs(n):
    bf = ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    a = rng.standard_normal(n, dtype=np.float32).astype(bf)
    b = rng.standard_normal(n, dtype=np.float32).astype(bf)
    out = [("sum of two bf16 tensors", (a.astype(np.float32) + b.astype(np.float32)).astype(bf))]
    for q in (0.003, 0.01, 0.03, 0.1, 0.5):
        x = a.copy()
        x.view(np.uint16)[rng.random(n) < q] = 0
        out.append((f"{100 * q:g} % +0", x))
    x = a.copy()
    x.view(np.uint16)[rng.random(n) < 0.002] = 0
    x.view(np.uint16)[rng.random(n) < 0.002] = 0x7F80
    out.append(("0.2 % +0, 0.2 % +inf", x))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import codec
    from codec import _numba as N
    from bench.speed import _cpu_model

    codec.set_num_threads(1)
    cases = [(name, x, codec.encode(x)) for name, x in _inputs(8 << 20)]
    out = np.empty_like(cases[0][1])
    best = {}
    for _ in range(7):
        for name, x, blob in cases:
            t = time.perf_counter()
            codec.decode(blob, out=out)
            best[name] = min(best.get(name, 1e9), time.perf_counter() - t)
    lines = [f"CPU: {_cpu_model()}; threshold f[ZERO] + f[ESC] <= {N._SHIFTED_MAX} of 4096", "",
             "| input | +0 share | path (dense) of chunk 0 | decode MB/s |", "|---|---|---|---|"]
    for name, x, blob in cases:
        codec.decode(blob, out=out)
        assert np.array_equal(out.view(np.uint16), x.view(np.uint16))
        zeros = float(np.mean(x.view(np.uint16) == 0))
        lines.append(f"| {name} | {100 * zeros:.2f} % | {N.chunk_path(blob, 0)} | {x.nbytes / best[name] / 1e6:,.0f} |")
    emit("\n".join(lines), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
