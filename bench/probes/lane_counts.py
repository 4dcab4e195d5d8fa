"""Encode and decode speed by a chunk's rANS lane count (codec.format.lanes: 1 lane a 1,024 values, 16-value
SIMD rounds from 16 lanes): chunks of fewer than 16,384 values are where the rounds leave the 16-lane
path (a tensor's last chunk, the kept values of a zero-block payload, a small chunk_size).

    python -m bench.probes.lane_counts [--out FILE.md] [--label TEXT]

One thread, 8 Mi bf16 Gaussian values (sigma 0.02) coded with each chunk_size, best of 9 calls into
reused buffers; MB/s of uncompressed data.  Run it on two checkouts (each with its own NUMBA_CACHE_DIR),
alternating, to compare them.
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

import codec
from codec import format as fmt

from ..speed import _best
from ..speed import _cpu_model as cpu_model
from . import emit

SIZES = (2048, 4096, 8191, 8192, 12000, 16383, 16384, 32768, 65536)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="append the table to this markdown file")
    ap.add_argument("--label", default="", help="a name for this run's rows (e.g. the commit)")
    args = ap.parse_args(argv)
    codec.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(8 << 20, generator=g) * 0.02).to(torch.bfloat16)
    rows = [f"| {args.label} | chunk_size | lanes | encode_MBps | decode_MBps |", "|---|---|---|---|---|"]
    for n in SIZES:
        buf = np.empty(codec.max_encoded_size(x, chunk_size=n), np.uint8)
        blob = codec.encode(x, chunk_size=n)
        y = torch.empty_like(x)
        codec.decode(blob, out=y)
        assert torch.equal(y.view(torch.int16), x.view(torch.int16))
        te, _ = _best(lambda: codec.encode(x, chunk_size=n, out=buf), 9)
        td, _ = _best(lambda: codec.decode(blob, out=y), 9)
        rows.append(f"| {args.label} | {n} | {fmt.lanes(n)} | {x.nbytes / te / 1e6:.0f} | {x.nbytes / td / 1e6:.0f} |")
    text = f"CPU: {cpu_model()}\n\n" + "\n".join(rows) + "\n"
    emit(text, args.out, "a")


if __name__ == "__main__":
    main()
