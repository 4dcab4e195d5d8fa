"""Where one chunk's encode goes, phase by phase: timers around the numba backend's per-chunk functions.

    python -m bench.probes.encode_phases [--out FILE.md]

For a 64 Ki-value chunk of each input (Gaussian bf16 / fp16 / fp32, sigma 0.02, and the densest chunk of
MiniLM's flattened bf16 gradient, whose explicit table uses more than 32 symbols), one thread, the chunk in
cache, best of 200 calls: the whole chunk (``_encode_chunk``), its statistics pass (``_stats``), the fit's
sample histogram (``_sample_hist``), the codebook selection and tables (``_select`` + ``_tables``), the
explicit-table choice with the every-value key histogram it builds (``_choose_explicit``), the payload
(``_code_values``: prepare pass, rANS rounds, copies into the slot) and its rANS rounds alone
(``_rans_rounds``) on the chunk's 32 lanes and, for comparison, on 16 (one chain of 16-lane groups instead
of two: the rounds are latency-bound where 16 lanes take longer per value).  The chunk re-encoded in cache
with warm branch predictors runs faster than inside a whole tensor's encode (``bench.speed``).
"""
from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np

from codec import _numba as N
from codec import format as fmt
from codec.layouts import layout_for

from ..speed import _cpu_model as cpu_model
from . import emit

CHUNK = 1 << 16


def _best(fn, k=200):
    t = float("inf")
    for _ in range(k):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t * 1e6


def _inputs():
    rng = np.random.default_rng(0)
    for name, dt in (("gaussian bf16", ml_dtypes.bfloat16), ("gaussian fp16", np.float16),
                     ("gaussian fp32", np.float32)):
        yield name, rng.normal(0, 0.02, CHUNK).astype(dt)
    import torch

    from ..collectives_bench import _data
    g = _data(32 << 20, 0, "gradients").view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    chunks = g[:len(g) // CHUNK * CHUNK].reshape(-1, CHUNK)
    yield "MiniLM gradient bf16 (densest chunk)", chunks[int(np.argmin((chunks.view(np.uint16) == 0).sum(1)))].copy()


def phases(x):
    lay = layout_for(x.dtype)
    E, M, isz = lay.exp_bits, lay.man_bits, lay.itemsize
    w = x.view(lay.uint)
    w.setflags(write=False)
    n = len(w)
    fam = N._family64()
    explicit = N.explicit_tables(fmt.WRITE_VERSION)
    out = np.empty(n * isz, np.uint8)
    row = {"chunk": _best(lambda: N._encode_chunk(w, n, isz, E, M, lay.has_inf, *fam, explicit, out, w))}
    step = min(N._SAMPLE_STEP, max(1, n // N._SAMPLE_MIN))
    row["statistics"] = _best(lambda: N._stats(w, n, E, M))
    row["sample histogram"] = _best(lambda: N._sample_hist(w, n, step, E, M))
    hist, occ, k_occ = N._sample_hist(w, n, step, E, M)
    stats = N._stats(w, n, E, M)
    f = np.empty(N.N_SYMBOLS, np.int64)
    cum = np.empty(N.N_SYMBOLS + 1, np.int64)

    def select():
        cb, ref = N._select(hist, occ, k_occ, 0, n, stats[0], stats[1], stats[2], E, lay.has_inf, *fam, f, cum)
        N._tables(fam[0], cb, ref, E, lay.has_inf, f, cum)
        return ref

    row["selection + tables"] = _best(select)
    ref = select()
    full = np.empty((2 << E) + 1, np.int64)
    state = np.zeros(2, np.int64)
    state[1] = stats[0]
    fe = np.empty(N.N_SYMBOLS, np.int64)

    def choose():
        state[0] = 0                     # the key histogram built again each call, as once per chunk
        return N._choose_explicit(w, n, stats[0], hist, 0, w, n, E, full, state, 0, f, ref, fam[2], M, fe)

    row["explicit choice"] = _best(choose) if explicit else 0.0
    chosen = bool(explicit and choose())
    sym = np.empty(n + N.LANES, np.uint8)
    wbuf = np.empty(n + 2 * N.MAX_LANES, np.uint16)

    def payload():
        state[0] = 0
        return N._code_values(w, n, stats, hist, occ, k_occ, 0, E, M, lay.has_inf, *fam, explicit, w, n, full,
                              state, 0, 0, np.empty(0, np.uint8), 0, out, sym, wbuf, w, -1)

    row["payload"] = _best(payload)
    tab = fe if chosen else f
    tcum = np.concatenate([[0], np.cumsum(tab)]).astype(np.int64)
    key = (w.astype(np.int64) >> (M - 1)) & ((2 << E) - 1)
    sym[:n] = N._symbol_table(tab, ref, E)[key]
    ent = np.empty(n + N.LANES, np.uint32)
    for lanes in (32, 16):
        x0 = np.full(lanes, fmt.RANS_L, np.uint32)
        row[f"rANS rounds, {lanes} lanes"] = _best(
            lambda: N._rans_rounds(x0.copy(), sym, ent, n, lanes, tab, tcum, wbuf, 0, -1, w))
    row["symbols used"] = int((tab > 0).sum())
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the table to this markdown file")
    args = ap.parse_args(argv)
    rows = [(name, phases(x)) for name, x in _inputs()]
    cols = list(rows[0][1])
    lines = [f"Per-chunk encode phases, us (64 Ki values, best of 200, one thread); {cpu_model()}",
             "", "| input | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, r in rows:
        lines.append(f"| {name} | " + " | ".join(f"{r[c]:.1f}" if isinstance(r[c], float) else str(r[c])
                                                 for c in cols) + " |")
    emit("\n".join(lines), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
