"""What the format-7 design was chosen from: how many tensors of the bench.ratio corpus (over 64 KiB) a
change of the coded symbol would lift to the best peer, estimated from each chunk's histogram against
format 6's actual sizes (``bench/results/ratio_v6.csv``).  Four chunks a tensor (first, thirds, last).

    python -m bench.probes.table_study          (after python -m bench.ratio --format 6; about a minute)

* ``lead2``: format 6's fitted table (the chunk's codebook and ref, as every encoder picks them) but with
  the symbol carrying two leading mantissa bits instead of one, the model's pmf split at
  ``1 + t/4`` (codec.model.exponent_pmf), quantised as the family is, clipped to the dtype like
  codec.codebook.clip_to_dtype; the plane one bit narrower.
* ``explicit``: per chunk the smaller of the fitted table and the chunk's own histogram quantised to
  TOTAL (codec.codebook.explicit_frequencies), at 2 bytes per listed symbol and 2 more (the table).
"""
from __future__ import annotations

import csv
import functools
import math

import numpy as np

from bench.corpus import build_corpus
from bench.ratio import RESULTS
from codec import codebook as C
from codec import layouts as LY
from codec.model import SHAPES, exponent_pmf

PEERS = ["zipnn", "zstd3", "zstd9", "lz4", "blosc2_shuffle_zstd5", "blosc2_bitshuffle_zstd5"]
DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2")


@functools.cache
def _lead_table(cb: int, lead: int) -> np.ndarray:
    """Family table ``cb`` with ``lead`` leading mantissa bits in each window symbol (unclipped)."""
    s, q, z = C.codebook_params(cb)
    shape, phase, pi = SHAPES[s], (q + 0.5) / C.PHASES, C.ZERO_LEVELS[z]
    d = np.arange(-C.WINDOW_LOW, C.WINDOW - C.WINDOW_LOW, dtype=np.float64)
    edges = [np.zeros_like(d)] + [exponent_pmf(shape, phase, d, upper=math.log2(1 + (t + 1) / (1 << lead)))
                                  for t in range(1 << lead)]
    pw = np.stack([np.maximum(b - a, 0) for a, b in zip(edges, edges[1:])], axis=1).ravel()
    p = np.concatenate([[pi, max(0.0, (1 - pi) * (1 - pw.sum()))], (1 - pi) * pw])
    return C.quantize_frequencies(p)


def _clip(f, ref, E, lead, has_inf):
    """codec.codebook.clip_to_dtype for ``lead`` leading bits: field -k's symbols to field 0's (its
    subnormals), fields above the top to Inf (or the NaN of formats without Inf)."""
    f = f.astype(np.int64).copy()
    nb, top = 1 << lead, (1 << E) - 1
    for j in range(C.WINDOW):
        field = ref - C.WINDOW_LOW + j
        if 0 <= field <= top:
            continue
        for t in range(nb):
            if field < 0:
                tj = -ref + C.WINDOW_LOW
                tt = (nb + t) >> -field if -field <= lead else 0
            else:
                tj, tt = top - ref + C.WINDOW_LOW, 0 if has_inf else nb - 1
            target = 2 + nb * tj + tt if 0 <= tj < C.WINDOW else 1
            f[target] += f[2 + nb * j + t]
            f[2 + nb * j + t] = 0
    return f


def _bits(keys, zeros, f, ref, lead):
    """Q8 bits of the symbols of ``keys`` (field << lead | leading bits) and ``zeros`` +0 under ``f``."""
    cl = C.load_family().code_lengths
    esc = cl[f[C.SYM_ESC]] + C.ESC_LENGTH
    h = np.bincount(keys)
    k = np.flatnonzero(h)
    j = (k >> lead) - ref + C.WINDOW_LOW
    inside = (j >= 0) & (j < C.WINDOW)
    fs = np.where(inside, f[2 + (np.clip(j, 0, C.WINDOW - 1) << lead) + (k & ((1 << lead) - 1))], 0)
    total = int((h[k] * np.where(fs > 0, cl[np.minimum(fs, C.TOTAL)], esc)).sum())
    if f[C.SYM_ZERO] > 0:
        return total + zeros * int(cl[f[C.SYM_ZERO]])
    return total + zeros * int(esc)


def _chunk_gains(w, lay):
    """Bits saved in one chunk of words ``w`` by ``lead2`` and by ``explicit`` (>= 0: the fitted table
    is kept where the other is larger)."""
    E, M = lay.exp_bits, lay.man_bits
    mag = w & ((1 << (8 * lay.itemsize - 1)) - 1)
    nonzero = mag != 0
    zeros = int((w == 0).sum())
    lg = LY.log2_magnitude((mag >> M) & ((1 << E) - 1), mag, lay)
    hs = C.sample_histogram(w, E, M, C.sample_step(len(w)))
    cb, ref = C.select_codebook(len(w), zeros, int(nonzero.sum()), int(lg[nonzero].sum()), hs, E, lay.has_inf)
    nz = w[w != 0]
    key1 = (((nz >> M) & ((1 << E) - 1)) << 1) | ((nz >> (M - 1)) & 1)
    fitted = _bits(key1, zeros, C.chunk_tables(cb, ref, E, lay.has_inf)[0].astype(np.int64), ref, 1) / 256
    lead2 = fitted
    if M >= 2:
        key2 = (((nz >> M) & ((1 << E) - 1)) << 2) | ((nz >> (M - 2)) & 3)
        lead2 = _bits(key2, zeros, _clip(_lead_table(cb, 2), ref, E, 2, lay.has_inf), ref, 2) / 256 - len(nz)
    c = C.explicit_counts(C.sample_histogram(w, E, M, 1), ref)
    f = C.explicit_frequencies(c, C.load_family().code_lengths)
    explicit = C.explicit_length(c, f, C.load_family().code_lengths) / 256
    return max(0.0, fitted - lead2), max(0.0, fitted - explicit)


def main() -> int:
    rows = {r["tensor"]: r for r in csv.DictReader(open(RESULTS / "ratio_v6.csv"))}
    wins = {"format 6": 0, "lead2": 0, "explicit": 0}
    n = 0
    for name, x in build_corpus(dtypes=DTYPES):
        if name not in rows or x.nbytes <= 64 << 10:
            continue
        lay = LY.layout_named(name.rsplit("@", 1)[1])
        u = x.view(lay.uint).ravel().astype(np.int64)
        cs = 16384 if lay.itemsize == 4 else 65536
        nch = -(-len(u) // cs)
        gains, seen = np.zeros(2), 0
        for c in sorted({0, nch // 3, 2 * nch // 3, nch - 1}):
            w = u[c * cs:(c + 1) * cs]
            seen += len(w)
            if not (w == w[0]).all():
                gains += _chunk_gains(w, lay)
        saved = gains / 8 * x.size / seen                    # bytes, scaled to the whole tensor
        size6 = x.nbytes / float(rows[name]["zipccl"])
        best = max(float(rows[name][p]) for p in PEERS)
        n += 1
        wins["format 6"] += x.nbytes / size6 >= best
        wins["lead2"] += x.nbytes / (size6 - saved[0]) >= best
        wins["explicit"] += x.nbytes / (size6 - saved[1]) >= best
    print(f"tensors over 64 KiB at or above the best peer, of {n}: "
          + ", ".join(f"{k} {v} ({100 * v / n:.1f} %)" for k, v in wins.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
