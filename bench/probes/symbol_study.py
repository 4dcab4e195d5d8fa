"""What coding more of each word in the rANS symbol would gain (a format-8 study): per chunk of every
bench.ratio tensor over 64 KiB, the empirical order-0 entropy of symbols made of the exponent field and
the top ``1 + k`` mantissa bits (k extra bits beyond format 7's leading bit), optionally with the sign,
plus the raw bits left over and an explicit table of ~1.5 bytes a used symbol; the best variant's saving
per chunk against format 7's (field, lead bit) symbol is taken off the tensor's measured stream
(bench/results/ratio.csv), and the tensors then at or above the best peer are counted.

    python -m bench.probes.symbol_study        (after python -m bench.ratio)
"""
from __future__ import annotations

import csv
import sys

import numpy as np

from bench.corpus import build_corpus
from bench.ratio import RESULTS
from codec import layouts as LY
from codec.api import default_chunk_size

WINDOW_SYMBOLS = 80
DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2")


def _entropy_bits(keys: np.ndarray) -> tuple[float, int]:
    _, c = np.unique(keys, return_counts=True)
    p = c / c.sum()
    return float(-(c * np.log2(p)).sum()), len(c)


def chunk_bits(row: np.ndarray, lay, k: int, joint_sign: bool, window: int = WINDOW_SYMBOLS) -> float:
    """Bits of a chunk coded with symbols (sign?, field, top 1+k mantissa bits) in a window of ``window``
    symbols placed where it covers the most values (the rest escape: ESC plus 16 raw bits), +0 its own
    symbol, with a table of 12 bits a window symbol between the first and last used one."""
    E, M = lay.exp_bits, lay.man_bits
    w = row.astype(np.uint64)
    nb = 8 * lay.itemsize
    k = min(k, M - 1)
    b = 1 + k + int(joint_sign)             # symbol bits below the field
    mag = w & np.uint64((1 << (nb - 1)) - 1)
    field = (mag >> np.uint64(M)).astype(np.int64)
    sub = (mag >> np.uint64(M - 1 - k)) & np.uint64((1 << (1 + k)) - 1)
    if joint_sign:
        sub = sub | ((w >> np.uint64(nb - 1)) << np.uint64(1 + k))
    nz = w != 0
    key = (field << b) | sub.astype(np.int64)
    key = key[nz]
    hist = np.bincount(key, minlength=1 << (E + b))
    per_field = window >> b
    ff = np.add.reduceat(hist, np.arange(0, hist.size, 1 << b))
    cov = np.convolve(ff, np.ones(per_field, dtype=np.int64), mode="full")[per_field - 1:per_field - 1 + ff.size]
    f0 = int(np.argmax(cov))
    lo, hi = f0 << b, min((f0 + per_field) << b, hist.size)
    inwin = hist[lo:hi]
    n_esc = int(hist.sum() - inwin.sum())
    counts = np.concatenate([inwin[inwin > 0], [int((~nz).sum()), n_esc]])
    counts = counts[counts > 0]
    p = counts / counts.sum()
    h = float(-(counts * np.log2(p)).sum())
    used = np.nonzero(inwin)[0]
    span = int(used[-1] - used[0] + 1) if used.size else 0
    raw = int(nz.sum()) * (M - 1 - k + (0 if joint_sign else 1)) + n_esc * 16
    return h + raw + (span + 2) * 12


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=int, default=WINDOW_SYMBOLS, help="window symbols (format 7: 80)")
    window = ap.parse_args(argv).window
    rows = {r["tensor"]: r for r in csv.DictReader(open(RESULTS / "ratio.csv"))}
    variants = [(k, s) for s in (False, True) for k in range(0, 4)]
    wins = {v: 0 for v in variants}
    wins_best = 0
    wins_now = 0
    n_big = 0
    detail = []
    for name, x in build_corpus(dtypes=DTYPES):
        if x.nbytes <= 65536 or name not in rows:
            continue
        n_big += 1
        r = rows[name]
        lay = LY.layout_for(x.dtype)
        words = np.ascontiguousarray(x).reshape(-1).view(lay.uint)
        n = default_chunk_size(lay)
        best_peer = float(r[r["best_peer"]])
        now = x.nbytes / float(r["zipccl"])
        wins_now += float(r["zipccl"]) >= best_peer
        saving = {v: 0.0 for v in variants}
        best = 0.0
        for c0 in range(0, words.size, n):
            row = words[c0:c0 + n]
            if np.all(row == row[0]):
                continue
            base = chunk_bits(row, lay, 0, False, WINDOW_SYMBOLS)
            s = {v: base - chunk_bits(row, lay, *v, window) for v in variants}
            for v in variants:
                saving[v] += max(s[v], 0.0)
            best += max(0.0, *s.values())
        for v in variants:
            wins[v] += x.nbytes / (now - saving[v] / 8) >= best_peer
        new = x.nbytes / (now - best / 8)
        wins_best += new >= best_peer
        detail.append((name, float(r["zipccl"]), new, best_peer, r["best_peer"]))
        print(f"{name}: now {float(r['zipccl']):.4f} best variant {new:.4f} peer {best_peer:.4f}", file=sys.stderr)
    print(f"window {window} symbols; tensors over 64 KiB: {n_big}; at or above the best peer now {wins_now}, with the best variant per "
          f"chunk {wins_best}")
    for v in variants:
        print(f"  k={v[0]} joint_sign={v[1]}: {wins[v]}")
    print("still below the best peer:")
    for name, z, new, bp, p in sorted(detail, key=lambda d: d[2] / d[3]):
        if new < bp:
            print(f"  {name}: {z:.4f} -> {new:.4f} vs {p} {bp:.4f} ({new / bp - 1:+.4f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
