"""How format 7's gate (codec.codebook.explicit_may_pay) spends the full histogram: per chunk of every
bench.ratio tensor over 64 KiB (dense chunks, as the reference codes them without zero blocks), the
gate's estimate of the saving against the table's size, and the saving the full histogram then finds.
Rules are compared by the tensors they leave at or above the best peer (bench/results/ratio.csv, with
each tensor's size grown by the savings its closed chunks lose) and by the chunks they open (each costs a
full histogram).

    python -m bench.probes.gate_study        (after python -m bench.ratio)
"""
from __future__ import annotations

import csv

import numpy as np

from bench.corpus import build_corpus
from bench.ratio import RESULTS
from codec import codebook as C
from codec import layouts as LY
from codec.api import default_chunk_size

DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2")


def fit(row, lay, n):
    """``(sample histogram, full histogram, fitted table, ref)`` of a chunk ``row`` of ``n`` words, as the
    reference encoder fits a dense chunk."""
    fam = C.load_family()
    hist = C.sample_histogram(row, lay.exp_bits, lay.man_bits, C.sample_step(n))
    full = C.sample_histogram(row, lay.exp_bits, lay.man_bits, 1)
    e, sm = LY.split(row[None, :], lay)
    mag = (row & lay.uint.type((1 << (8 * lay.itemsize - 1)) - 1)) != 0
    lg = np.where(mag[None, :], LY.log2_magnitude(e, sm.astype(np.uint32), lay), 0)
    cb, ref = C.select_codebook(n, int((row == 0).sum()), int(mag.sum()), int(lg.sum()), hist, lay.exp_bits,
                                lay.has_inf, fam)
    return hist, full, C.chunk_tables(cb, ref, lay.exp_bits, lay.has_inf)[0], ref


def chunk_rows(words, lay, n):
    fam = C.load_family()
    M = lay.man_bits
    out = []
    for c0 in range(0, len(words) - n + 1, n):
        row = words[c0:c0 + n]
        if np.all(row == row[0]):
            continue
        hist, full, f, ref = fit(row, lay, n)
        c = C.explicit_counts(hist, ref)
        ns = int(c.sum())
        fs = np.where(c > 0, np.maximum(c * C.TOTAL // ns, 1), 0)
        tb = C.explicit_table_nbytes(fs) * C._BYTE_LENGTH
        est = (C.fitted_length(hist, f, ref, fam.code_lengths, M) - (C.explicit_length(c, fs, fam.code_lengths) - tb)) * n / ns
        cf = C.explicit_counts(full, ref)
        fe = C.explicit_frequencies(cf, fam.code_lengths)
        fitted = C.fitted_length(full, f, ref, fam.code_lengths, M)
        actual = fitted - C.explicit_length(cf, fe, fam.code_lengths)
        out.append((est / 256, tb / 256, max(actual, 0) / 256, fitted / 256 + n * (M - 1 + 1)))  # bits
    return out


def main():
    rows = {r["tensor"]: r for r in csv.DictReader(open(RESULTS / "ratio.csv"))}
    data = []
    for name, x in build_corpus(dtypes=DTYPES):
        r = rows.get(name)
        if r is None or x.nbytes <= 64 << 10:
            continue
        lay = LY.layout_for(x.dtype)
        words = x.reshape(-1).view(lay.uint)
        ch = chunk_rows(words, lay, default_chunk_size(lay))
        best = max(float(r[p]) for p in r if p not in ("tensor", "numel", "zipccl", "bound", "best_peer",
                                                         "margin_vs_best_peer", "gap_to_bound"))
        data.append((name, x.nbytes, float(r["zipccl"]), best, np.array(ch).reshape(-1, 4)))
    rules = [("current G=2", 2, 0)] + [(f"G={g} R={r}", g, r) for g in (2, 3, 4) for r in (0, 1/512, 1/256, 1/128, 1/64)]
    print(f"{'rule':16} {'wins':>5} {'open':>6} {'useful':>6} / tensors {len(data)}, chunks {sum(len(d[4]) for d in data)}")
    for label, g, rr in rules:
        wins = opened = useful = 0
        for name, nb, ratio, best, ch in data:
            est, tb, act, size = ch.T if len(ch) else (np.zeros(0),) * 4
            cur = est > 2 * tb
            new = (est > g * tb) & (est > rr * size)
            lost = act[cur & ~new].sum() / 8
            wins += nb / (nb / ratio + lost) >= best
            opened += new.sum()
            useful += (new & (act > 0)).sum()
        print(f"{label:16} {wins:5d} {opened:6d} {useful:6d}")


if __name__ == "__main__":
    main()
