"""The analytic codebook family: rANS frequency tables derived from :mod:`codec.model`.

A chunk is coded with one table of the family, named by a small integer id stored in
its header; the decoder looks the table up by id, never from the stream.

Symbols (``N_SYMBOLS = 42``)::

    0            ZERO   the word is exactly +0.0 (no sign+mantissa stored)
    1            ESC    exponent field stored raw in the chunk's escape plane
    2 + j        exponent field == ref + j - WINDOW_LOW, j in [0, WINDOW)

Why rANS and not Huffman: exact zeros are common (gradients of unused embedding
rows) and a prefix code spends at least 1 bit on them, rANS ``-log2(p)``; and an
rANS chunk with ``LANES`` interleaved states decodes in lock step across a warp with
one table lookup per symbol and at most one 16-bit refill (DietGPU's scheme).

Family v1: ``len(SHAPES) x PHASES x len(ZERO_LEVELS)`` tables, id =
``(shape * PHASES + phase) * len(ZERO_LEVELS) + zero_level``.  The tables, generated
by ``python -m codec.codebook --write``, ship as ``codec/data/codebooks_v1.npz``
whose SHA-256 is pinned below: floating-point rounding can differ across SciPy
builds, so tables are data, not something each process recomputes.
"""
from __future__ import annotations

import functools
import hashlib
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .model import SHAPES, exponent_pmf, pmf_moments

FAMILY_VERSION = 1
PROB_BITS = 12                    # rANS probability precision: tables sum to 4096
TOTAL = 1 << PROB_BITS
WINDOW = 40                       # coded relative exponents d in [-WINDOW_LOW, WINDOW - WINDOW_LOW)
WINDOW_LOW = 31
SYM_ZERO, SYM_ESC, SYM_WINDOW0 = 0, 1, 2
N_SYMBOLS = SYM_WINDOW0 + WINDOW
PHASES = 8                        # phase of log2(alpha) quantised to 1/8 binade
#: point masses at +0 of the zero-inflated family; 0 means "no ZERO symbol" (zeros escape)
ZERO_LEVELS = (0.0, 0.002, 0.01, 0.03, 0.07, 0.15, 0.25, 0.4, 0.55, 0.7, 0.82, 0.9, 0.95, 0.98, 0.993, 0.998)
N_CODEBOOKS = len(SHAPES) * PHASES * len(ZERO_LEVELS)
STAT_FRAC_BITS = 8                # fixed point of the fitted mean/variance of the exponent
ZERO_FRAC_BITS = 24               # fixed point of the zero fraction thresholds
_ESC_COST_BITS = 20.0             # approx. cost of an escaped zero, for the level thresholds
FAMILY_FILE = Path(__file__).with_name("data") / f"codebooks_v{FAMILY_VERSION}.npz"
FAMILY_SHA256 = "UNSET"


def codebook_id(shape: int, phase: int, zero_level: int) -> int:
    return (shape * PHASES + phase) * len(ZERO_LEVELS) + zero_level


def codebook_params(cb: int) -> tuple[int, int, int]:
    """Inverse of :func:`codebook_id`: ``(shape, phase, zero_level)``."""
    sp, z = divmod(cb, len(ZERO_LEVELS))
    s, q = divmod(sp, PHASES)
    return s, q, z


def quantize_frequencies(p: np.ndarray, total: int = TOTAL, *, min_slots: float = 0.2) -> np.ndarray:
    """Integer frequencies summing to ``total`` that minimise the expected code length.

    Symbols with ``p * total < min_slots`` get 0 (they are rarer than the slot they
    would take is worth; the encoder escapes them), except ESC which always gets >= 1.
    Greedy on the marginal gain ``p log2((f+1)/f)``: optimal for this separable convex problem.
    """
    p = np.asarray(p, dtype=np.float64)
    eligible = p * total >= min_slots
    eligible[SYM_ESC] = True
    f = np.where(eligible, np.maximum(1, np.floor(p * total)), 0).astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        while f.sum() < total:
            gain = np.where(eligible, p * np.log2((f + 1) / np.maximum(f, 1)), -np.inf)
            f[int(np.argmax(gain))] += 1
        while f.sum() > total:
            loss = np.where(f > 1, p * np.log2(f / np.maximum(f - 1, 1)), np.inf)
            f[int(np.argmin(loss))] -= 1
    return f


def _zero_thresholds() -> np.ndarray:
    """Zero fractions at which the best level switches, in units of 2**-ZERO_FRAC_BITS."""
    def line(q):  # expected bits/value = a + rho * b for a chunk with zero fraction rho
        if q == 0.0:
            return 0.0, _ESC_COST_BITS
        return -math.log2(1 - q), -math.log2(q) + math.log2(1 - q)

    out = []
    for qa, qb in zip(ZERO_LEVELS, ZERO_LEVELS[1:]):
        (aa, ba), (ab, bb) = line(qa), line(qb)
        out.append(round((ab - aa) / (ba - bb) * (1 << ZERO_FRAC_BITS)))
    return np.array(out, dtype=np.int64)


def generate_family() -> dict[str, np.ndarray]:
    """Compute family v1 from the model (needs SciPy)."""
    d = np.arange(-WINDOW_LOW, WINDOW - WINDOW_LOW, dtype=np.float64)
    freqs = np.zeros((N_CODEBOOKS, N_SYMBOLS), dtype=np.uint16)
    mean_offsets = np.zeros((len(SHAPES), PHASES), dtype=np.int64)
    variances = np.zeros(len(SHAPES))
    for s, shape in enumerate(SHAPES):
        for q in range(PHASES):
            phase = (q + 0.5) / PHASES
            mean, var = pmf_moments(shape, phase)
            mean_offsets[s, q] = round(mean * (1 << STAT_FRAC_BITS))
            variances[s] += var / PHASES
            pw = exponent_pmf(shape, phase, d)
            for z, pi in enumerate(ZERO_LEVELS):
                p = np.zeros(N_SYMBOLS)
                p[SYM_ZERO] = pi
                p[SYM_WINDOW0:] = (1 - pi) * pw
                p[SYM_ESC] = max(0.0, (1 - pi) * (1 - pw.sum()))
                freqs[codebook_id(s, q, z)] = quantize_frequencies(p)
    order = np.argsort(variances)
    if not np.array_equal(order, np.arange(len(SHAPES))):
        raise AssertionError(f"SHAPES must be ordered by exponent variance, got {variances}")
    var_fixed = variances * (1 << STAT_FRAC_BITS)
    var_thresholds = np.round((var_fixed[1:] + var_fixed[:-1]) / 2).astype(np.int64)
    return {
        "freqs": freqs,
        "mean_offsets": mean_offsets,
        "var_thresholds": var_thresholds,
        "zero_thresholds": _zero_thresholds(),
    }


def _serialize(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **{k: arrays[k] for k in sorted(arrays)})
    return buf.getvalue()


def _digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(k.encode() + str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class Family:
    """Family tables: ``freqs`` ``(N_CODEBOOKS, N_SYMBOLS)`` uint16 (each row sums to ``TOTAL``)
    and the integer constants of the model fit (see :func:`select_codebook`)."""
    freqs: np.ndarray
    mean_offsets: np.ndarray
    var_thresholds: np.ndarray
    zero_thresholds: np.ndarray
    digest: str


@functools.cache
def load_family() -> Family:
    with np.load(FAMILY_FILE) as z:
        arrays = {k: z[k] for k in z.files}
    digest = _digest(arrays)
    if FAMILY_SHA256 != "UNSET" and digest != FAMILY_SHA256:
        raise RuntimeError(f"{FAMILY_FILE} does not match codebook family v{FAMILY_VERSION} (sha256 {digest})")
    for a in arrays.values():
        a.setflags(write=False)
    return Family(arrays["freqs"], arrays["mean_offsets"], arrays["var_thresholds"], arrays["zero_thresholds"],
                  digest)


def clip_to_dtype(freqs: np.ndarray, ref: int, exp_bits: int) -> np.ndarray:
    """The table a chunk really uses: ``freqs`` with impossible exponent fields merged away.

    Field 0 holds every magnitude below the smallest normal (subnormals), and the top
    field every overflow, so the frequencies of window symbols for fields ``< 0`` are
    added to field 0's symbol and those for fields ``> 2^E - 1`` to the top field's
    (to ESC where that field is outside the window).  Integer-only, so the decoder
    derives the same table from ``(codebook, ref, E)``.
    """
    f = np.array(freqs, dtype=np.int64)
    top = (1 << exp_bits) - 1
    lo_sym = SYM_WINDOW0 + WINDOW_LOW - ref           # symbol of field 0
    hi_sym = SYM_WINDOW0 + WINDOW_LOW - ref + top     # symbol of the top field
    last = N_SYMBOLS - 1
    if lo_sym > SYM_WINDOW0:
        below = slice(SYM_WINDOW0, min(lo_sym, N_SYMBOLS))
        mass = int(f[below].sum())
        f[below] = 0
        f[lo_sym if lo_sym <= last else SYM_ESC] += mass
    if hi_sym < last:
        above = slice(max(hi_sym + 1, SYM_WINDOW0), N_SYMBOLS)
        mass = int(f[above].sum())
        f[above] = 0
        f[hi_sym if hi_sym >= SYM_WINDOW0 else SYM_ESC] += mass
    return f


@functools.lru_cache(maxsize=4096)
def chunk_tables(cb: int, ref: int, exp_bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(freq, cum, slot_symbol)`` of codebook ``cb`` clipped to a dtype with ``exp_bits`` at ``ref``."""
    f = clip_to_dtype(load_family().freqs[cb], ref, exp_bits).astype(np.uint32)
    cum = np.zeros(N_SYMBOLS + 1, dtype=np.uint32)
    np.cumsum(f, out=cum[1:])
    slots = np.repeat(np.arange(N_SYMBOLS, dtype=np.uint8), f)
    for a in (f, cum, slots):
        a.setflags(write=False)
    return f, cum, slots


def select_codebook(n: int, n_zero: int, n_log: int, sum_e: int, sum_e2: int,
                    family: Family | None = None) -> tuple[int, int]:
    """Fit the model to a chunk's statistics; return ``(codebook id, reference exponent)``.

    ``n`` values of which ``n_zero`` are exactly +0; ``sum_e``/``sum_e2`` are the sum and
    sum of squares of :func:`codec.layouts.log2_magnitude` (the exponent field, extended
    below 1 for subnormals) over the ``n_log`` values whose magnitude is not 0.
    All integer arithmetic (floor division), so every backend selects identically:

    * mean ``m = floor(256 sum_e / n_log)``, variance ``v = floor(256 sum_e2 / n_log) - floor(m^2 / 256)``
      (both 0 when ``n_log == 0``);
    * shape ``s`` = number of ``var_thresholds`` ``<= v``;
    * ``(ref, phase)`` minimise ``|m - 256 ref - mean_offsets[s, phase]|`` (first phase on ties),
      ``ref = floor((m - mean_offsets[s, phase] + 128) / 256)``;
    * zero level = number of ``zero_thresholds`` ``t`` with ``n_zero * 2^24 >= t * n``.
    """
    fam = family or load_family()
    m = v = 0
    if n_log:
        m = (sum_e << STAT_FRAC_BITS) // n_log
        v = (sum_e2 << STAT_FRAC_BITS) // n_log - ((m * m) >> STAT_FRAC_BITS)
    s = 0
    for t in fam.var_thresholds:
        s += int(v >= int(t))
    best_q, best_ref, best_err = 0, 0, -1
    for q in range(PHASES):
        off = int(fam.mean_offsets[s, q])
        ref = (m - off + (1 << (STAT_FRAC_BITS - 1))) >> STAT_FRAC_BITS
        err = abs(m - off - (ref << STAT_FRAC_BITS))
        if best_err < 0 or err < best_err:
            best_q, best_ref, best_err = q, ref, err
    z = 0
    for t in fam.zero_thresholds:
        z += int((n_zero << ZERO_FRAC_BITS) >= int(t) * n)
    return codebook_id(s, best_q, z), best_ref


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m codec.codebook", description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"regenerate {FAMILY_FILE.name} from the model")
    args = ap.parse_args(argv)
    arrays = generate_family()
    digest = _digest(arrays)
    if args.write:
        FAMILY_FILE.parent.mkdir(exist_ok=True)
        FAMILY_FILE.write_bytes(_serialize(arrays))
        print(f"wrote {FAMILY_FILE} ({FAMILY_FILE.stat().st_size} bytes)")
    print(f"family v{FAMILY_VERSION}: {N_CODEBOOKS} codebooks, sha256 {digest}")
    print(f"pinned: {FAMILY_SHA256} ({'match' if digest == FAMILY_SHA256 else 'DIFFERENT'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
