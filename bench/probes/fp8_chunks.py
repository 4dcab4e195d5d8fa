"""The float8 chunk size: bench.ratio's fp8 tensors (MiniLM weights and activations, e4m3 and e5m2) encoded at
64K to 1M values a chunk, class totals and tensors over 64 KiB at or above the best peer of
``bench/results/ratio.csv``; with the order-0 bounds of the chunk's own histogram of (field, leading
mantissa bit) symbols (what format 7 codes: sign and two mantissa bits raw) and of whole magnitudes.

    python -m bench.probes.fp8_chunks          (after python -m bench.ratio; a minute or two)
"""
from __future__ import annotations

import csv

import numpy as np

import codec
from bench.corpus import build_corpus
from bench.ratio import RESULTS

PEERS = ("zipnn", "zstd3", "zstd9", "lz4", "blosc2_shuffle_zstd5", "blosc2_bitshuffle_zstd5")
SIZES = (1 << 16, 1 << 17, 1 << 18, 1 << 20)


def _entropy(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())


def main():
    rows = {r["tensor"]: r for r in csv.DictReader(open(RESULTS / "ratio.csv"))}
    print("| dtype | class | chunk values | zipccl | best peer | tensors > 64 KiB >= best peer | bound: (field, lead) | bound: magnitude |")
    print("|---|---|---|---|---|---|---|---|")
    for dt in ("float8_e4m3fn", "float8_e5m2"):
        for cls in ("weights", "activations"):
            res = {cs: [0, 0, 0, 0, 0] for cs in SIZES}
            bits = np.zeros(2)
            for name, x in build_corpus(dtypes=(dt,)):
                if not name.startswith(cls + "/") or name not in rows:
                    continue
                best = max(float(rows[name][p]) for p in PEERS)
                w = x.reshape(-1).view(np.uint8)
                for c0 in range(0, len(w), 1 << 16):
                    mag = w[c0:c0 + (1 << 16)] & 0x7F
                    shift = 2 if dt == "float8_e4m3fn" else 1      # mantissa bits below the leading one
                    bits += [(_entropy(np.bincount(mag >> shift)) + shift + 1) * len(mag),
                             (_entropy(np.bincount(mag)) + 1) * len(mag)]
                for cs in SIZES:
                    b = len(codec.encode(x, chunk_size=min(cs, max(1, x.size))))
                    t = res[cs]
                    t[0] += x.nbytes
                    t[1] += b
                    t[2] += x.nbytes / best
                    if x.nbytes > 64 << 10:
                        t[3] += 1
                        t[4] += x.nbytes / b >= best
            for cs, t in res.items():
                print(f"| {dt} | {cls} | {cs} | {t[0] / t[1]:.4f} | {t[0] / t[2]:.4f} | {t[4]} of {t[3]} | "
                      f"{8 * t[0] / bits[0]:.4f} | {8 * t[0] / bits[1]:.4f} |")


if __name__ == "__main__":
    main()
