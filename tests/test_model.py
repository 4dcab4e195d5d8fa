"""The analytic model, the codebook family and the model fit."""
import math

import numpy as np
import pytest

from codec import codebook as cbk
from codec.model import SHAPES, Shape, _selfcheck_gaussian, exponent_pmf
from tests.helpers import make_values, np_dtype


def test_gaussian_pmf_matches_textbook_formula():
    assert _selfcheck_gaussian() < 1e-12


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_pmf_sums_to_one(shape):
    d = np.arange(-400, 120)
    for phase in (0.0, 0.3, 0.99):
        assert abs(exponent_pmf(shape, phase, d).sum() - 1) < 1e-9


def test_laplace_pmf_closed_form():
    # |x| ~ Exp(1): P(2^k <= |x| < 2^(k+1)) = exp(-2^k) - exp(-2^(k+1))
    k = np.arange(-10, 5)
    want = np.exp(-np.exp2(k * 1.0)) - np.exp(-np.exp2(k + 1.0))
    assert np.allclose(exponent_pmf(Shape("gengauss", 1.0), 0.0, k), want, atol=1e-14)


def test_family_file_matches_model():
    """The shipped tables are exactly what the model generates (SciPy on this platform)."""
    fam = cbk.load_family()
    gen = cbk.generate_family()
    assert np.array_equal(gen["freqs"], fam.freqs)
    for k in ("mean_offsets", "variances", "zero_thresholds", "code_lengths"):
        assert np.array_equal(gen[k], getattr(fam, k))
    assert cbk._digest(gen) == cbk.FAMILY_SHA256


def test_family_1_is_a_prefix_of_family_2():
    """Family 1's tables, as v1 shipped them (pinned digest), are family 2's first ids: one table array
    decodes streams of both."""
    arrays = {k: getattr(cbk.load_family(), k) for k in ("freqs", "mean_offsets", "variances", "zero_thresholds")}
    arrays["code_lengths"] = cbk.load_family().code_lengths
    assert cbk._digest(cbk.family_prefix(arrays, 1)) == cbk.FAMILY1_SHA256
    assert cbk.n_codebooks(1) < cbk.n_codebooks(2) == cbk.N_CODEBOOKS


def test_code_lengths():
    cl = cbk.load_family().code_lengths
    assert cl[cbk.TOTAL] == 0 and cl[1] == cbk.PROB_BITS << cbk.LENGTH_FRAC_BITS and np.all(np.diff(cl[1:]) <= 0)


def test_family_tables_are_valid():
    fam = cbk.load_family()
    assert fam.freqs.shape == (cbk.N_CODEBOOKS, cbk.N_SYMBOLS)
    assert np.all(fam.freqs.sum(axis=1) == cbk.TOTAL)
    assert np.all(fam.freqs[:, cbk.SYM_ESC] >= 1)
    z0 = [cbk.codebook_id(s, q, 0) for s in range(len(SHAPES)) for q in range(cbk.PHASES)]
    assert np.all(fam.freqs[z0, cbk.SYM_ZERO] == 0)


@pytest.mark.parametrize("ref", [-60, -20, 0, 5, 40, 120, 250, 300])
@pytest.mark.parametrize("exp_bits,has_inf", [(8, True), (5, True), (4, False)])
def test_clip_to_dtype_keeps_total_and_removes_impossible_fields(ref, exp_bits, has_inf):
    fam = cbk.load_family()
    f = cbk.clip_to_dtype(fam.freqs[cbk.codebook_id(6, 3, 2)], ref, exp_bits, has_inf)
    assert f.sum() == cbk.TOTAL and f[cbk.SYM_ESC] >= 1
    for field in range(ref - cbk.WINDOW_LOW, ref - cbk.WINDOW_LOW + cbk.WINDOW):
        if not 0 <= field < (1 << exp_bits):
            for bit in (0, 1):
                assert f[cbk.window_symbol(field, ref, bit)] == 0


def test_quantize_frequencies():
    p = np.zeros(cbk.N_SYMBOLS)
    p[5], p[6], p[7] = 0.7, 0.29999, 0.00001
    f = cbk.quantize_frequencies(p)
    assert f.sum() == cbk.TOTAL and f[cbk.SYM_ESC] >= 1 and f[7] == 0 and f[5] > f[6] > 0


def _fit(x):
    from codec.layouts import layout_for, log2_magnitude, split

    lay = layout_for(x.dtype)
    w = x.view(lay.uint)
    e, sm = split(w, lay)
    nz = (w & ((1 << (8 * lay.itemsize - 1)) - 1)) != 0
    lg = log2_magnitude(e, sm, lay)[nz]
    hist = cbk.sample_histogram(w, lay.exp_bits, lay.man_bits, cbk.sample_step(len(w)))
    cb, ref = cbk.select_codebook(len(w), int((w == 0).sum()), int(nz.sum()), int(lg.sum()), hist, lay.exp_bits,
                                  lay.has_inf)
    return cbk.codebook_params(cb), ref - lay.bias


@pytest.mark.parametrize("sigma", [1e-3, 0.02, 1.0, 300.0])
def test_fit_recovers_gaussian_scale_and_shape(sigma):
    x = make_values("gaussian", "float32", 1 << 16, 0, math.log10(sigma))
    (s, q, z), ref = _fit(x)
    assert SHAPES[s] == Shape("gengauss", 2.0) and z == 0
    log2_alpha = math.log2(sigma * math.sqrt(2))
    assert abs(ref + (q + 0.5) / cbk.PHASES - log2_alpha) <= 1 / cbk.PHASES


def test_fit_picks_heavier_shape_for_laplace_and_zero_level():
    x = make_values("laplace", "float32", 1 << 16, 1)
    (s, _, _), _ = _fit(x)
    assert SHAPES[s].kind == "gengauss" and 0.7 <= SHAPES[s].param <= 1.5
    x = make_values("mostly_zeros", "bfloat16", 1 << 16, 2)
    (_, _, z), _ = _fit(x)
    assert abs(cbk.ZERO_LEVELS[z] - 0.95) < 0.04
