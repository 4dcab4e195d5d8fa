"""Could format 7's explicit tables come from a sparser histogram (EXPLICIT_STEP > 1: half or a quarter of
the histogram's cost, the encoder's only new per-value work)?  Per chunk of every bench.ratio tensor over
64 KiB whose gate opens (dense chunks, as the reference codes them without zero blocks), the table is
quantised from every st-th value, kept by the STEP-scaled estimate, and charged what it really costs on the
chunk (values the sample missed escape where their symbol has no slot).  ``f``: the sample's counts filled
where every backend knows more for free: +0 from the statistics' exact count, a slot of 1 for every
window symbol between the chunk's lowest and highest field (a max/min the statistics pass could carry),
ESC where a value falls outside the window.  Tensors at or above the best peer
(bench/results/ratio.csv, each tensor's size moved by the change in its chunks' savings):

    python -m bench.probes.sample_step_study     (after python -m bench.ratio; about two minutes)

Measured (AMD EPYC f25 m1, 631 tensors): s1 514 (format 7), s2 481, s2f 501, s4 430, s4f 481, s8 421, s8f 474.
"""
import csv, numpy as np
from bench.corpus import build_corpus
from bench.ratio import RESULTS
from codec import codebook as C, layouts as LY
from codec.api import default_chunk_size
from bench.probes.gate_study import DTYPES, fit


fam = C.load_family(); CL = fam.code_lengths.astype(np.int64)

def true_len(cf, fe):
    esc = CL[fe[C.SYM_ESC]] + C.ESC_LENGTH if fe[C.SYM_ESC] else 10**9
    L = 0
    for s in range(C.N_SYMBOLS):
        if cf[s] == 0: continue
        L += cf[s] * (CL[fe[s]] if fe[s] > 0 else esc) + (C.ESC_LENGTH * cf[s] if s == C.SYM_ESC else 0)
    return L + C.explicit_table_nbytes(fe) * C._BYTE_LENGTH

def variants(row, lay, n):
    M = lay.man_bits
    hist, full, f, ref = fit(row, lay, n)
    c = C.explicit_counts(hist, ref); ns = int(c.sum())
    fs = np.where(c > 0, np.maximum(c * C.TOTAL // ns, 1), 0)
    tb = C.explicit_table_nbytes(fs) * C._BYTE_LENGTH
    est = (C.fitted_length(hist, f, ref, CL, M) - (C.explicit_length(c, fs, CL) - tb)) * n / ns
    if est <= 2 * tb: return None
    cf = C.explicit_counts(full, ref)
    fitted = C.fitted_length(full, f, ref, CL, M)
    occ = np.flatnonzero(cf[C.SYM_WINDOW0:])
    res = []
    for st in (1, 2, 4, 8):
        for fill in (False, True):
            hs = C.sample_histogram(row, lay.exp_bits, M, st)
            cs = C.explicit_counts(hs, ref)
            if st > 1: cs[C.SYM_ESC] = max(cs[C.SYM_ESC], 1) if not fill else cs[C.SYM_ESC]
            if fill:
                if len(occ):
                    lo, hi = occ[0] & ~1, occ[-1] | 1
                    seg = cs[C.SYM_WINDOW0 + lo:C.SYM_WINDOW0 + hi + 1]
                    seg[seg == 0] = 1
                if cf[C.SYM_ESC] > 0: cs[C.SYM_ESC] = max(cs[C.SYM_ESC], 1)
                cs[C.SYM_ZERO] = cf[C.SYM_ZERO] // st if cf[C.SYM_ZERO] else 0   # exact zeros from the stats
                if cf[C.SYM_ZERO] and cs[C.SYM_ZERO] == 0: cs[C.SYM_ZERO] = 1
            fe = C.explicit_frequencies(cs, CL)
            tbe = C.explicit_table_nbytes(fe) * C._BYTE_LENGTH
            hs_fit = C.fitted_length(hs, f, ref, CL, M)
            if st * (C.explicit_length(cs, fe, CL) - tbe) + tbe < st * hs_fit:
                res.append((fitted - true_len(cf, fe)) / 256)
            else:
                res.append(0.0)
    return res


def main():
    rows = {r["tensor"]: r for r in csv.DictReader(open(RESULTS / "ratio.csv"))}
    names = [f"s{st}{'f' if fl else ''}" for st in (1,2,4,8) for fl in (False, True)]
    wins = np.zeros(len(names)); tot = 0
    for name, x in build_corpus(dtypes=DTYPES):
        r = rows.get(name)
        if r is None or x.nbytes <= 64 << 10: continue
        lay = LY.layout_for(x.dtype); w = x.reshape(-1).view(lay.uint); n = default_chunk_size(lay)
        sav = np.zeros(len(names))
        for c0 in range(0, len(w) - n + 1, n):
            row = w[c0:c0+n]
            if np.all(row == row[0]): continue
            v = variants(row, lay, n)
            if v is not None: sav += np.array(v)
        best = max(float(r[p]) for p in r if p not in ("tensor","numel","zipccl","bound","best_peer","margin_vs_best_peer","gap_to_bound"))
        base = x.nbytes / float(r["zipccl"]) + sav[0] / 8
        wins += [x.nbytes / (base - s / 8) >= best for s in sav]; tot += 1
    print(tot, dict(zip(names, wins.astype(int))))


if __name__ == "__main__":
    main()
