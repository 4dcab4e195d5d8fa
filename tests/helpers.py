"""Shared test helpers: bit-exact comparison and value generators."""
import ml_dtypes
import numpy as np

from codec.layouts import layout_for

DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2")
DISTRIBUTIONS = ("gaussian", "laplace", "student_t", "mostly_zeros", "constant", "random_bits", "lognormal")


def np_dtype(name):
    return np.dtype(name) if name in ("float16", "float32") else np.dtype(getattr(ml_dtypes, name))


def bits(a):
    """Unsigned-integer view of an array or torch tensor (NaN payloads and -0 compare exactly)."""
    if type(a).__module__.startswith("torch"):
        import torch

        lay = layout_for(a.dtype)
        ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[lay.itemsize]
        return a.contiguous().view(ints).numpy().view(lay.uint)
    a = np.asarray(a)
    return np.ascontiguousarray(a).view(layout_for(a.dtype).uint)


def assert_bit_equal(a, b):
    ba, bb = bits(a), bits(b)
    assert ba.shape == bb.shape, (ba.shape, bb.shape)
    assert str(getattr(a, "dtype")) == str(getattr(b, "dtype"))
    if not np.array_equal(ba, bb):
        i = int(np.flatnonzero(ba.ravel() != bb.ravel())[0])
        raise AssertionError(f"first difference at flat index {i}: {ba.ravel()[i]:#x} != {bb.ravel()[i]:#x}")


def make_values(dist: str, dtype: str, n: int, seed: int, log10_sigma: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np_dtype(dtype)
    sigma = 10.0 ** log10_sigma
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        if dist == "gaussian":
            x = rng.normal(0, 1, n) * sigma
        elif dist == "laplace":
            x = rng.laplace(0, 1, n) * sigma
        elif dist == "student_t":
            x = rng.standard_t(3, n) * sigma
        elif dist == "lognormal":
            x = np.exp(rng.normal(0, 0.1, n)) * sigma
        elif dist == "mostly_zeros":
            x = np.where(rng.random(n) < 0.95, 0.0, rng.normal(0, 1, n) * sigma)
        elif dist == "constant":
            x = np.full(n, rng.normal() * sigma)
        elif dist == "random_bits":
            lay = layout_for(dt)
            return rng.integers(0, 1 << (8 * lay.itemsize), n, dtype=np.uint64).astype(lay.uint).view(dt)
        else:
            raise ValueError(dist)
        return x.astype(dt)
