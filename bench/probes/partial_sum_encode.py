"""Probe: encode speed of an all-reduce's partial sums (what each reduce-scatter hop re-encodes).

    python -m bench.probes.partial_sum_encode

Takes the emulated cluster's gradient data (``bench.collectives_bench._data``: MiniLM's flattened bf16 gradient,
rolled per rank), cuts 64 MiB of it into 16 slices of 4 MiB (the ring's slices), and for each slice encodes the
sum of 1, 2, 3 and 4 ranks' values (one codec thread, into a reused buffer, best of 9), printing MiB/s, the ratio
and the share of exact +0 values.  Summing moves zeros around (the ranks' zero rows do not line up), so a hop's
partial sum can code much more slowly than the inputs did.
"""
from __future__ import annotations

import torch

import codec
from bench.collectives_bench import _data
from bench.speed import _best


def main() -> int:
    torch.set_num_threads(1)
    xs = [_data(32 << 20, r, "gradients") for r in range(4)]
    n = (4 << 20) // 2
    total = [0.0] * 4
    print("| slice | " + " | ".join(f"{m} rank{'s' if m > 1 else ''}: MiB/s, ratio, zeros" for m in range(1, 5)) + " |")
    print("|---|---|---|---|---|")
    for off in range(16):
        sl = slice(off * n, (off + 1) * n)
        acc = xs[0][sl].clone()
        cells = []
        for m in range(4):
            if m:
                acc = acc + xs[m][sl]
            buf = torch.empty(codec.max_encoded_size(acc), dtype=torch.uint8)
            t = _best(lambda: codec.encode(acc, out=buf), 9)[0]
            total[m] += t
            ratio = acc.numel() * 2 / len(codec.encode(acc))
            zeros = float((acc.view(torch.int16) == 0).float().mean())
            cells.append(f"{4 / t:.0f}, {ratio:.1f}, {zeros:.0%}")
        print(f"| {off} | " + " | ".join(cells) + " |", flush=True)
    print("| all 64 MiB | " + " | ".join(f"{64 / t:.0f} MiB/s" for t in total) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
