"""Reproducible torch CPU math for the trainers' bit-identity claims.

The trainers claim that a compressed run ends bit-identical to an uncompressed one, and that a
run resumed from a checkpoint ends bit-identical to one that never stopped.  The collectives
keep their side of that (lossless codec, a fixed summation order); the local training steps
must keep theirs: the same float operations in the same order every time.  On a CPU, torch's
results depend on the intra-op thread count (each reduction, each GEMM's split of its inner
dimension, is partitioned across the threads: TinyGPT after 6 AdamW steps differs in 936
parameters between 1 and 2 threads) and on whether the BLAS may change its thread count on
its own (MKL's dynamic adjustment).  :func:`pinned` fixes both for a block of work: a fixed
number of intra-op threads (one by default: then no reduction is split at all, and MKL has no
thread count to adjust) and torch's deterministic algorithms.
"""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def pinned(threads: int = 1, deterministic: bool = True):
    """Run the block with ``threads`` torch intra-op threads and, with ``deterministic``, torch's
    deterministic algorithms (and oneDNN's deterministic mode); the caller's settings come back
    after it.  ``threads=0`` keeps the caller's thread count (then the result is reproducible only
    where that count is the same every time)."""
    if threads < 0:
        raise ValueError(f"threads must be >= 0, got {threads}")
    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    old_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    old_dnn = torch.backends.mkldnn.deterministic
    try:
        if threads and threads != old_threads:
            torch.set_num_threads(threads)
        if deterministic:
            torch.use_deterministic_algorithms(True)
            torch.backends.mkldnn.deterministic = True
        yield
    finally:
        if torch.get_num_threads() != old_threads:
            torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det, warn_only=old_warn)
        torch.backends.mkldnn.deterministic = old_dnn
