"""Shared test helpers: bit-exact comparison and value generators."""
from __future__ import annotations

import os

import numpy as np

from codec.layouts import LAYOUTS, layout_for

DTYPES = tuple(lay.name for lay in LAYOUTS)
DISTRIBUTIONS = ("gaussian", "laplace", "student_t", "mostly_zeros", "constant", "random_bits", "lognormal")


def np_dtype(name):
    return layout_for(name).numpy_dtype


def bits(a):
    """Unsigned-integer view of an array or torch tensor (NaN payloads and -0 compare exactly)."""
    if type(a).__module__.startswith("torch"):
        lay = layout_for(a.dtype)
        return a.contiguous().view(lay.torch_view_ints).numpy().view(lay.uint)
    a = np.asarray(a)
    return np.ascontiguousarray(a).view(layout_for(a.dtype).uint)


def assert_bit_equal(a, b):
    ba, bb = bits(a), bits(b)
    assert ba.shape == bb.shape, (ba.shape, bb.shape)
    assert str(getattr(a, "dtype")) == str(getattr(b, "dtype"))
    if not np.array_equal(ba, bb):
        i = int(np.flatnonzero(ba.ravel() != bb.ravel())[0])
        raise AssertionError(f"first difference at flat index {i}: {ba.ravel()[i]:#x} != {bb.ravel()[i]:#x}")


def restamp(blob, compact: bool) -> bytearray:
    """``blob`` with its head rewritten in the compact (format v4) or the fixed-width layout, the
    payloads unchanged: tests that forge a field at a fixed offset ask for the fixed-width one."""
    from codec import format as fmt

    h = fmt.parse_header(blob)
    head = fmt.pack_header(h.layout, h.shape, h.chunk_size, h.flags, h.kinds, np.diff(h.ends, prepend=0),
                           h.crcs, compact=compact)
    return bytearray(head) + bytearray(memoryview(blob).cast("B")[h.payload_start:])


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


def padded_batch(dtype: str, batch: int, seq: int, width: int, seed: int, most: int | None = None) -> np.ndarray:
    """A (batch, seq, width) tensor like an embedding layer's output for a padded batch: each sequence's
    first 1..``most`` (default ``seq``) rows are its tokens' (distinct Gaussian rows), the rest are the
    padding token's row at that position, the same in every sequence (rows that repeat rows a sequence,
    ``seq`` rows, or more before them)."""
    rng = np.random.default_rng(seed)
    pad = rng.normal(0, 1, (seq, width))
    x = np.broadcast_to(pad, (batch, seq, width)).copy()
    for b, n in enumerate(rng.integers(1, (most or seq) + 1, batch)):
        x[b, :n] = rng.normal(0, 1, (n, width))
    return x.astype(np_dtype(dtype))


def warm(part: str, claims: str | None = None, last_first: bool = False) -> None:
    """Compile (or load from numba's on-disk cache) one part of the numba kernels: ``"decoders"`` (one
    per supported dtype) or ``"encoders"`` (one per word size), so that two processes can compile them
    side by side (conftest does, on a first run).  No cache file is written by both parts, nor by two
    dtypes' decoders: each layout's decoder calls copies of the helpers of its own
    (codec._numba._layout_namespace).  That matters: numba writes a function's index and data files apart,
    so two processes saving different signatures of one function at once can leave an index naming the
    other's code (numba/numba#10128's kind of race; until 2026-12-07 both parts compiled ``_tables``).

    ``claims``: a folder both processes share; a decoder is then compiled only by the process that claims
    its dtype there first (a file created exclusively), so the two split the decoders between them.
    ``last_first``: claim from the last dtype on (the process that compiled the encoders first takes the
    decoders from the other end)."""
    import codec

    if part not in ("decoders", "encoders"):
        raise ValueError(f"unknown part {part!r}: decoders or encoders")
    for lay in (LAYOUTS[::-1] if last_first else LAYOUTS):
        x = (np.arange(40_000) % 251).astype(lay.uint).view(lay.numpy_dtype)
        x.view(lay.uint)[16384:32768] = np.where(np.arange(16384) % 1000 == 1, 5, 0).astype(lay.uint)  # SPARSE
        if part == "encoders":
            codec.encode(x, chunk_size=16384, backend="numba")
        elif claims is None or _claim(claims, lay.name):
            codec.decode(codec.encode(x, chunk_size=16384, backend="reference"), backend="numba")


def _claim(folder: str, name: str) -> bool:
    try:
        os.close(os.open(os.path.join(folder, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def interpret_triton_without_gpu() -> None:
    """Run the Triton kernels under the CPU interpreter where no GPU is (TRITON_INTERPRET=1), unless
    the caller chose; call before any generated kernel is imported."""
    if os.environ.get("TRITON_INTERPRET") is not None:
        return
    try:
        import torch
        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        os.environ["TRITON_INTERPRET"] = "1"


def column_scaled(dtype: str, rows: int, width: int, seed: int, masked: int = 0) -> np.ndarray:
    """A (rows, width) tensor whose columns each keep their own scale (a LayerNorm'd channel, one key's
    attention probabilities): column ``c`` is ``2^-(c % 9)`` times 1 + 1 % noise, positive; its last
    ``masked`` columns +0.  The value a row above is a far better guess of each exponent than the chunk's."""
    rng = np.random.default_rng(seed)
    scale = np.exp2(-(np.arange(width) % 9.0)) * rng.uniform(1, 2, width)
    x = scale * (1 + 0.01 * rng.normal(0, 1, (rows, width)))
    if masked:
        x[:, width - masked:] = 0
    return x.astype(np_dtype(dtype))
