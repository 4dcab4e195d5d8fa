"""Information-theoretic reference points for the codec.

:func:`entropy_bound_bits` is what an ideal coder of the codec's own model would need: the
exponent field coded at its order-0 entropy (with exact +0 words as an extra symbol, as the
codec's ZERO symbol), the ``1 + M`` sign+mantissa bits of every other word stored raw.
"""
from __future__ import annotations

import numpy as np

from .layouts import FloatLayout, as_words, split

__all__ = ["exponent_histogram", "entropy_from_histogram", "entropy_bound_bits"]

_BLOCK = 1 << 22     # values per pass: bounds the temporaries of split() on big tensors


def _words(x) -> tuple[np.ndarray, FloatLayout]:
    words, lay, _, _ = as_words(x)
    return words, lay


def exponent_histogram(x) -> tuple[np.ndarray, FloatLayout]:
    """``(counts, layout)``: ``counts[0]`` = exact +0 words, ``counts[1 + e]`` = other words with exponent field ``e``."""
    words, lay = _words(x)
    counts = np.zeros(2 + (1 << lay.exp_bits), dtype=np.int64)
    for i in range(0, words.size, _BLOCK):
        w = words[i:i + _BLOCK]
        zero = w == 0
        exp, _ = split(w[~zero], lay)
        counts[0] += int(zero.sum())
        counts[1:] += np.bincount(exp, minlength=(1 << lay.exp_bits) + 1)[: (1 << lay.exp_bits) + 1]
    return counts, lay


def entropy_from_histogram(counts: np.ndarray, lay: FloatLayout) -> float:
    """Bits per value of the bound for a histogram from :func:`exponent_histogram`."""
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.sum()
    if n == 0:
        return 0.0
    p = counts[counts > 0] / n
    h = float(-(p * np.log2(p)).sum())
    frac_pos_zero = counts[0] / n
    return max(h, 0.0) + (1.0 - frac_pos_zero) * lay.sm_bits


def entropy_bound_bits(x: np.ndarray) -> float:
    """Exponent-entropy bound of ``x`` in bits per value (0.0 for an empty array).

    ``H0(symbol) + (1 - frac_pos_zero) * (1 + mantissa_bits)``, where a word's symbol is
    "+0" if the word is exactly +0 (all bits zero) and its exponent field otherwise, ``H0``
    is the order-0 (empirical) entropy of those symbols, and ``frac_pos_zero`` the fraction
    of +0 words.  ``x``: NumPy array (or torch CPU tensor) of a dtype in ``codec.SUPPORTED``.
    """
    counts, lay = exponent_histogram(x)
    return entropy_from_histogram(counts, lay)
