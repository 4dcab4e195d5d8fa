r"""Analytic exponent model: the pmf of a float's exponent field under a scale family.

Why: the exponent of a value ``x`` is ``floor(log2 |x|)``, so its distribution is the
distribution of ``log2 |x|`` binned into unit-width binades.  For a scale family
``x = alpha * y`` (``y`` a fixed unit-scale law) the pmf depends on ``alpha`` only
through a shift ``r = floor(log2 alpha)`` and a *phase* ``phi = frac(log2 alpha)``:

.. math::

    P(e = r + d) = G(d + 1 - \varphi) - G(d - \varphi),
    \qquad G(t) = P(\log_2 |y| < t)

(``d`` is the exponent relative to the chunk's reference ``r``).  A zero-inflated
family adds a point mass ``pi`` at exact ``+0`` and scales the rest by ``1 - pi``.
For the Gaussian ``x ~ N(0, sigma^2)`` this is the textbook
``P(e = k) = 2 [Phi(2^{k+1-bias}/sigma) - Phi(2^{k-bias}/sigma)]``.

Shapes (all closed form):

* **generalized Gaussian** ``p(y) ∝ exp(-|y|^beta)``: ``|y|^beta ~ Gamma(1/beta, 1)``,
  so ``G(t) = P(1/beta, 2^{beta t})`` (regularized lower incomplete gamma).
  ``beta = 2`` is the Gaussian (``alpha = sigma sqrt 2``), ``beta = 1`` Laplace,
  ``beta < 1`` heavier tails (activations, gradients).
* **log-normal magnitude** ``log2 |y| ~ N(0, s^2)``: ``G(t) = Phi(t / s)``.  It covers
  tensors concentrated in a few binades (LayerNorm gains, Adam second moments),
  narrower than any generalized Gaussian can be (``Var log2|y| >= 1/ln(2)^2``).

Per chunk the shape and ``(r, phi)`` are fitted from two integer statistics of the
exponent field over the non-zero values, its mean and its variance (plus the count of
exact zeros for ``pi``): see :mod:`codec.codebook`.  SciPy is needed only to
*regenerate* the codebook family, never to encode or decode.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Shape", "SHAPES", "exponent_pmf", "pmf_moments"]


@dataclass(frozen=True)
class Shape:
    kind: str      # "gengauss" or "lognormal"
    param: float   # beta for gengauss, s (binades) for lognormal

    @property
    def name(self) -> str:
        return f"{self.kind}({self.param:g})"

    def cdf_log2(self, t: np.ndarray) -> np.ndarray:
        """``G(t) = P(log2 |y| < t)`` for the unit-scale law."""
        from scipy import special

        t = np.asarray(t, dtype=np.float64)
        if self.kind == "gengauss":
            b = self.param
            return special.gammainc(1.0 / b, np.exp2(np.clip(b * t, -1074.0, 1000.0)))
        if self.kind == "lognormal":
            return special.ndtr(t / self.param)
        raise ValueError(self.kind)


#: The shapes of the codebook families: version 1 has the first 12 (ordered by the variance of the exponent),
#: version 2 appends wider log-normal magnitudes (Adam second moments, variances: nearly symmetric in
#: log2 and wider than lognormal(1.3), where version 1 could only offer left-skewed generalized Gaussians).
SHAPES = (
    Shape("lognormal", 0.12),
    Shape("lognormal", 0.25),
    Shape("lognormal", 0.45),
    Shape("lognormal", 0.7),
    Shape("lognormal", 1.0),
    Shape("lognormal", 1.3),
    Shape("gengauss", 2.0),
    Shape("gengauss", 1.5),
    Shape("gengauss", 1.0),
    Shape("gengauss", 0.7),
    Shape("gengauss", 0.5),
    Shape("gengauss", 0.35),
    Shape("lognormal", 1.6),
    Shape("lognormal", 2.0),
    Shape("lognormal", 2.5),
    Shape("lognormal", 3.2),
)
#: how many of SHAPES each codebook family version has (a family's ids are a prefix of the next one's)
FAMILY_SHAPES = {1: 12, 2: 16}

_D_LO, _D_HI = -400, 120   # relative binades summed over for moments (mass outside < 1e-30)


def exponent_pmf(shape: Shape, phase: float, d: np.ndarray, *, upper: float = 1.0) -> np.ndarray:
    """``P(e = r + d)`` for relative exponents ``d`` given the phase ``frac(log2 alpha)``.

    With ``upper < 1``: the mass of ``[2^e, 2^(e + upper))``, the first part of the binade
    (``upper = log2 1.5`` is the half with leading mantissa bit 0).
    """
    d = np.asarray(d, dtype=np.float64)
    return np.maximum(shape.cdf_log2(d + upper - phase) - shape.cdf_log2(d - phase), 0.0)


def pmf_moments(shape: Shape, phase: float) -> tuple[float, float]:
    """Mean and variance of the relative exponent ``d`` (all binades, no window)."""
    d = np.arange(_D_LO, _D_HI, dtype=np.float64)
    p = exponent_pmf(shape, phase, d)
    p = p / p.sum()
    mean = float((p * d).sum())
    return mean, float((p * (d - mean) ** 2).sum())


def entropy_bits(p: np.ndarray) -> float:
    p = np.asarray(p, dtype=np.float64)
    p = p[p > 0]
    return float(-(p * np.log2(p)).sum()) if p.size else 0.0


def _selfcheck_gaussian() -> float:
    """Max abs difference between the gengauss(2) pmf and the textbook Gaussian formula."""
    from scipy import special

    sigma = 0.37
    alpha = sigma * math.sqrt(2.0)
    r = math.floor(math.log2(alpha))
    phi = math.log2(alpha) - r
    d = np.arange(-30, 8)
    ours = exponent_pmf(Shape("gengauss", 2.0), phi, d)
    k = r + d
    ref = 2 * (special.ndtr(np.exp2(k + 1.0) / sigma) - special.ndtr(np.exp2(k * 1.0) / sigma))
    return float(np.abs(ours - ref).max())
