"""Probe (issue #18, format 9): what the row-repeat section gains and what its search costs.

    python -m bench.probes.repeat_cost [--dtypes bfloat16,float16,float32,float8_e4m3fn] [--rounds 21]

For every tensor of the ratio corpus of two or more dimensions and at least codec.repeats.MIN_TENSOR_BYTES
(the only ones the encoder searches), one codec thread: the stream's size with the search (the default
encode) and without it (``partition=[0, numel]``, which turns it off and changes nothing else), the median
encode time of each over ``--rounds`` alternating rounds and the median of the rounds' ratios, and the search
alone (``codec.repeats.find``, best of the rounds).
Decode time where a section was written.  Prints a markdown table and the CPU model.
"""
from __future__ import annotations

import argparse

import numpy as np

import codec
from bench.corpus import build_corpus_f32, cast, uint_view
from bench.speed import _best
from bench.speed import _cpu_model as cpu_model
from codec import repeats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bfloat16,float16,float32,float8_e4m3fn")
    ap.add_argument("--rounds", type=int, default=21)
    a = ap.parse_args(argv)
    codec.set_num_threads(1)
    corpus = build_corpus_f32()
    print(f"CPU: {cpu_model()}; one codec thread; {a.rounds} alternating rounds\n")
    print("| tensor | dtype | shape | repeated rows | ratio without | ratio with | encode without (ms) | "
          "encode with (ms) | with / without (median of rounds) | search alone (ms) | decode (ms) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in sorted(corpus):
        x32 = corpus[name]
        if x32.ndim < 2:
            continue
        for dt in a.dtypes.split(","):
            x = cast(x32, dt)
            if x.nbytes < repeats.MIN_TENSOR_BYTES:
                continue
            w = uint_view(x).reshape(-1)
            off = [0, x.size]
            with_, without = codec.encode(x), codec.encode(x, partition=off)
            t_on, t_off = [], []
            for _ in range(a.rounds):                 # alternating, paired: the host's drift cancels
                t_off.append(_best(lambda: codec.encode(x, partition=off), 1)[0])
                t_on.append(_best(lambda: codec.encode(x), 1)[0])
            ratio = float(np.median(np.array(t_on) / np.array(t_off)))
            t_on, t_off = float(np.median(t_on)), float(np.median(t_off))
            t_find = _best(lambda: repeats.find(w, x.shape, x.itemsize), a.rounds)[0]
            rep = codec.inspect(with_)["row_repeats"]
            dec = f"{1e3 * _best(lambda: codec.decode(with_), a.rounds)[0]:.2f}" if rep else "-"
            print(f"| {name} | {dt} | {tuple(x.shape)} | {rep['rows'] if rep else 0} | {x.nbytes / len(without):.3f} | "
                  f"{x.nbytes / len(with_):.3f} | {1e3 * t_off:.2f} | {1e3 * t_on:.2f} | {ratio:.3f} | "
                  f"{1e3 * t_find:.3f} | {dec} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
