"""Probe (issue #16): how much faster two cores of this machine do two codec calls than one, beside what
the codec's own two threads reach.

    python -m bench.probes.parallel_capacity [--seconds 6] [--out FILE]

For each input, three ways of keeping the machine busy for ``--seconds``, each a loop of the same call into a
reused buffer (``encode(x, out=)`` / ``decode(blob, out=)``), MB/s of uncompressed data over the whole loop:
one process with one codec thread (the base); two processes started together, each one thread (their MB/s
summed: what two cores give two independent copies of the work, with nothing shared but the machine's memory
and caches); one process with two codec threads.  ``machine`` = two processes / one, ``codec`` = two threads /
one: two-thread scaling is the codec's to improve only where ``codec`` falls short of ``machine``.  On a
virtual machine whose two vCPUs share a physical core, or a host whose memory bandwidth the codec saturates,
``machine`` itself sits below 2.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

from . import emit

_INPUTS = ("bf16", "fp16", "fp32")


def _tensor(name: str):
    import ml_dtypes

    rng = np.random.default_rng(0)
    if name == "bf16":
        return rng.standard_normal(32 << 20, np.float32).astype(ml_dtypes.bfloat16)
    if name == "fp16":
        return rng.standard_normal(16 << 20, np.float32).astype(np.float16)
    return rng.standard_normal(8 << 20, np.float32)


def _worker(name: str, op: str, threads: int, start: float, seconds: float) -> float:
    """MB/s of ``op`` on input ``name`` with ``threads`` codec threads, looped from wall time ``start``."""
    import codec

    codec.set_num_threads(threads)
    x = _tensor(name)
    blob = codec.encode(x)
    enc_out = np.empty(codec.max_encoded_size(x), np.uint8)
    dec_out = np.empty_like(x)

    def call():
        if op == "encode":
            codec.encode(x, out=enc_out)
        else:
            codec.decode(blob, out=dec_out)

    call()
    call()
    while time.time() < start:
        time.sleep(0.001)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        call()
        n += 1
    return n * x.nbytes / (time.perf_counter() - t0) / 1e6


def _run(name: str, op: str, threads: int, procs: int, seconds: float) -> float:
    start = time.time() + 4.0                  # after every process has imported numba and built its input
    cmd = [sys.executable, "-m", "bench.probes.parallel_capacity", "--worker", name, op, str(threads),
           repr(start), repr(seconds)]
    ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    outs = [p.communicate()[0] for p in ps]
    if any(p.returncode for p in ps):
        raise RuntimeError(f"a worker failed: {outs}")
    return sum(json.loads(o.strip().splitlines()[-1]) for o in outs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--inputs", default=",".join(_INPUTS))
    ap.add_argument("--out")
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        name, op, threads, start, seconds = a.worker
        print(json.dumps(_worker(name, op, int(threads), float(start), float(seconds))))
        return 0
    from bench.speed import _cpu_model

    lines = [f"CPU: {_cpu_model()}; {a.seconds:g} s a loop, Gaussian inputs of 64 MiB (bf16) / 32 MiB (fp16, fp32).",
             "", "| input | op | 1 process, 1 thread MB/s | 2 processes MB/s (sum) | 1 process, 2 threads MB/s | "
             "machine (2 processes / 1) | codec (2 threads / 1) | codec / machine |", "|---|---|---|---|---|---|---|---|"]
    emit("\n".join(lines), a.out)
    for name in a.inputs.split(","):
        for op in ("encode", "decode"):
            one = _run(name, op, 1, 1, a.seconds)
            two_procs = _run(name, op, 1, 2, a.seconds)
            two_threads = _run(name, op, 2, 1, a.seconds)
            m, c = two_procs / one, two_threads / one
            emit(f"| {name} | {op} | {one:.0f} | {two_procs:.0f} | {two_threads:.0f} | {m:.3f} | {c:.3f} | {c / m:.3f} |",
                 a.out, "a")
    return 0


if __name__ == "__main__":
    sys.exit(main())
