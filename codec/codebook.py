"""The analytic codebook family: rANS frequency tables derived from :mod:`codec.model`.

A chunk is coded with one table of the family, named by a small integer id stored in
its header; the decoder looks the table up by id, never from the stream.

Symbols (``N_SYMBOLS = 82``)::

    0            ZERO   the word is exactly +0.0 (no sign+mantissa stored)
    1            ESC    exponent field and leading mantissa bit stored raw in the escape plane
    2 + 2j + b   exponent field == ref + j - WINDOW_LOW, j in [0, WINDOW), leading mantissa bit b

The leading mantissa bit is coded jointly with the exponent because the model predicts
it too: within a binade a bell-shaped density falls, so ``P(b = 1 | e)`` (the upper
third of the binade, ``[1.5, 2) * 2^e``) is well below 1/2 in the upper binades.  That
saves ~0.06 bit/value on Gaussians, more than a per-tensor Huffman code of the
exponent alone can reach.

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
#: the lowest reference exponent the encoder picks (format v2): the window then still reaches field 0,
#: where a chunk of subnormals puts every value (a lower one leaves them all to escapes)
REF_MIN = WINDOW_LOW - WINDOW + 1
SYM_ZERO, SYM_ESC, SYM_WINDOW0 = 0, 1, 2
N_SYMBOLS = SYM_WINDOW0 + 2 * WINDOW
_LOG2_1_5 = math.log2(1.5)        # the leading mantissa bit splits a binade at 1.5 * 2^e
PHASES = 8                        # phase of log2(alpha) quantised to 1/8 binade
#: point masses at +0 of the zero-inflated family; 0 means "no ZERO symbol" (zeros escape)
ZERO_LEVELS = (0.0, 0.002, 0.01, 0.03, 0.07, 0.15, 0.25, 0.4, 0.55, 0.7, 0.82, 0.9, 0.95, 0.98, 0.993, 0.998)
N_CODEBOOKS = len(SHAPES) * PHASES * len(ZERO_LEVELS)
STAT_FRAC_BITS = 8                # fixed point of the fitted mean/variance of the exponent
ZERO_FRAC_BITS = 24               # fixed point of the zero fraction thresholds
_ESC_COST_BITS = 20.0             # approx. cost of an escaped zero, for the level thresholds
FAMILY_FILE = Path(__file__).with_name("data") / f"codebooks_v{FAMILY_VERSION}.npz"
FAMILY_SHA256 = "78b54fe2e8d978ea5b352bcb848114cef65e0bf0e9bffbe0078dee59a34240a8"


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
    variances = np.zeros((len(SHAPES), PHASES), dtype=np.int64)
    for s, shape in enumerate(SHAPES):
        for q in range(PHASES):
            phase = (q + 0.5) / PHASES
            mean, var = pmf_moments(shape, phase)
            mean_offsets[s, q] = round(mean * (1 << STAT_FRAC_BITS))
            variances[s, q] = round(var * (1 << STAT_FRAC_BITS))
            lower = exponent_pmf(shape, phase, d, upper=_LOG2_1_5)                # [1, 1.5) * 2^e
            upper = exponent_pmf(shape, phase, d) - lower                          # [1.5, 2) * 2^e
            pw = np.stack([lower, np.maximum(upper, 0.0)], axis=1).ravel()          # symbol order (j, b)
            for z, pi in enumerate(ZERO_LEVELS):
                p = np.zeros(N_SYMBOLS)
                p[SYM_ZERO] = pi
                p[SYM_WINDOW0:] = (1 - pi) * pw
                p[SYM_ESC] = max(0.0, (1 - pi) * (1 - pw.sum()))
                freqs[codebook_id(s, q, z)] = quantize_frequencies(p)
    return {
        "freqs": freqs,
        "mean_offsets": mean_offsets,
        "variances": variances,
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
    variances: np.ndarray
    zero_thresholds: np.ndarray
    digest: str


@functools.cache
def load_family() -> Family:
    with np.load(FAMILY_FILE) as z:
        arrays = {k: z[k] for k in z.files}
    digest = _digest(arrays)
    if digest != FAMILY_SHA256:
        raise RuntimeError(f"{FAMILY_FILE} does not match codebook family v{FAMILY_VERSION} (sha256 {digest})")
    for a in arrays.values():
        a.setflags(write=False)
    return Family(arrays["freqs"], arrays["mean_offsets"], arrays["variances"], arrays["zero_thresholds"], digest)


def window_symbol(field: int, ref: int, bit: int) -> int:
    """Symbol of exponent ``field`` with leading mantissa bit ``bit`` (may fall outside the window)."""
    return SYM_WINDOW0 + 2 * (field - ref + WINDOW_LOW) + bit


def clip_to_dtype(freqs: np.ndarray, ref: int, exp_bits: int, has_inf: bool = True) -> np.ndarray:
    """The table a chunk really uses: ``freqs`` with impossible exponent fields merged away.

    Field 0 (zero and subnormals) holds every magnitude below the smallest normal
    ``2^(1-bias)``: its leading-mantissa-bit-1 half is exactly the binade of field -1, and
    its bit-0 half everything below.  So window symbols of field -1 move to ``(0, 1)`` and
    those of fields ``< -1`` to ``(0, 0)``; the overflow of fields ``> 2^E - 1`` moves to
    ``(top, 0)`` (Inf) or, for formats without Inf, ``(top, 1)`` (their NaN).  A target outside the window becomes ESC.  Integer-only, so the decoder
    derives the same table from ``(codebook, ref, E)``.
    """
    f = np.array(freqs, dtype=np.int64)
    top = (1 << exp_bits) - 1

    def move(fields, target):
        syms = [window_symbol(fl, ref, b) for fl in fields for b in (0, 1)]
        syms = [x for x in syms if SYM_WINDOW0 <= x < N_SYMBOLS]
        if not syms:
            return
        mass = int(f[syms].sum())
        f[syms] = 0
        f[target if SYM_WINDOW0 <= target < N_SYMBOLS else SYM_ESC] += mass

    lo_field, hi_field = ref - WINDOW_LOW, ref - WINDOW_LOW + WINDOW - 1   # fields covered by the window
    if lo_field < -1:
        move(range(lo_field, -1), window_symbol(0, ref, 0))
    if lo_field <= -1 <= hi_field:
        move([-1], window_symbol(0, ref, 1))
    if hi_field > top:
        move(range(max(top + 1, lo_field), hi_field + 1), window_symbol(top, ref, 0 if has_inf else 1))
    return f


@functools.lru_cache(maxsize=4096)
def chunk_tables(cb: int, ref: int, exp_bits: int, has_inf: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(freq, cum, slot_symbol)`` of codebook ``cb`` clipped to a dtype's exponent range at ``ref``."""
    f = clip_to_dtype(load_family().freqs[cb], ref, exp_bits, has_inf).astype(np.uint32)
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

    * mean ``m = floor(256 S1 / n)``, variance ``v = floor(256 floor((n S2 - S1^2) / n) / n)``
      (``S1 = sum_e``, ``S2 = sum_e2``, ``n = n_log``; both 0 when ``n_log == 0``);
    * for each shape ``s``: ``(ref_s, q_s)`` minimise ``|m - 256 ref - mean_offsets[s, q]|`` (first phase
      on ties), ``ref = floor((m - mean_offsets[s, q] + 128) / 256)``;
    * the shape is the one whose predicted variance ``variances[s, q_s]`` is nearest ``v``
      (first on ties);
    * zero level = number of ``zero_thresholds`` ``t`` with ``n_zero * 2^24 >= t * n``;
    * the reference is at least REF_MIN (format v2; v1 encoders did not clamp it).
    """
    fam = family or load_family()
    m = v = 0
    if n_log:
        m = (sum_e << STAT_FRAC_BITS) // n_log
        # exact in int64 for n_log <= 2^20, |e| < 2^8: n S2 - S1^2 < 2^56, no cancellation
        v = (((n_log * sum_e2 - sum_e * sum_e) // n_log) << STAT_FRAC_BITS) // n_log
    best = None
    for s in range(len(SHAPES)):
        best_q, best_ref, best_err = 0, 0, -1
        for q in range(PHASES):
            off = int(fam.mean_offsets[s, q])
            ref = (m - off + (1 << (STAT_FRAC_BITS - 1))) >> STAT_FRAC_BITS
            err = abs(m - off - (ref << STAT_FRAC_BITS))
            if best_err < 0 or err < best_err:
                best_q, best_ref, best_err = q, ref, err
        dist = abs(v - int(fam.variances[s, best_q]))
        if best is None or dist < best[0]:
            best = (dist, s, best_q, best_ref)
    _, s, best_q, best_ref = best
    z = 0
    for t in fam.zero_thresholds:
        z += int((n_zero << ZERO_FRAC_BITS) >= int(t) * n)
    return codebook_id(s, best_q, z), max(best_ref, REF_MIN)


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
