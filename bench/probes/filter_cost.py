"""Probe (issue #18, format 10): what the row filter gains and what its gate, its second coding and its
inverse cost.

    python -m bench.probes.filter_cost [--dtypes bfloat16,float16,float32,float8_e4m3fn,float8_e5m2] [--rounds 11]

For every tensor of the ratio corpus of two or more dimensions and at least codec.filters.MIN_TENSOR_BYTES
(the only ones whose filter the encoder tries), one codec thread: the stream's size with the filter (the default
encode) and without it (codec.filters.MIN_TENSOR_BYTES set past every tensor, which turns it off and changes
nothing else), the median encode and decode time of each over ``--rounds`` alternating rounds and the median of
the rounds' ratios (with / without), and the gate alone (``codec.filters.choose`` with the numba backend's
costs, as encode runs it; best of the rounds, the tensor warm in cache).
Prints a markdown table, the CPU model, and the medians over the tensors whose gate stayed closed.
"""
from __future__ import annotations

import argparse

import numpy as np

import codec
from bench.corpus import build_corpus_f32, cast, uint_view
from bench.speed import _best
from bench.speed import _cpu_model as cpu_model
from codec import backends, filters
from codec.layouts import layout_for


def _off(fn):
    """``fn()`` with the filter turned off."""
    keep = filters.MIN_TENSOR_BYTES
    filters.MIN_TENSOR_BYTES = 1 << 62
    try:
        return fn()
    finally:
        filters.MIN_TENSOR_BYTES = keep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bfloat16,float16,float32,float8_e4m3fn,float8_e5m2")
    ap.add_argument("--rounds", type=int, default=11)
    a = ap.parse_args(argv)
    codec.set_num_threads(1)
    corpus = build_corpus_f32()
    print(f"CPU: {cpu_model()}; one codec thread; {a.rounds} alternating rounds\n")
    print("| tensor | dtype | shape | filtered chunks | ratio without | ratio with | encode without (ms) | "
          "encode with (ms) | encode with / without | gate (ms) | decode without (ms) | decode with (ms) | "
          "decode with / without |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    closed_enc, closed_dec = [], []
    for name in sorted(corpus):
        x32 = corpus[name]
        if x32.ndim < 2:
            continue
        for dt in a.dtypes.split(","):
            x = cast(x32, dt)
            if x.nbytes < filters.MIN_TENSOR_BYTES:
                continue
            w = uint_view(x).reshape(-1)
            lay = layout_for(x.dtype)
            cs = codec.api.default_chunk_size(lay)
            with_, without = codec.encode(x), _off(lambda: codec.encode(x))
            te_on, te_off, td_on, td_off = [], [], [], []
            for _ in range(a.rounds):                 # alternating, paired: the host's drift cancels
                te_off.append(_best(lambda: _off(lambda: codec.encode(x)), 1)[0])
                te_on.append(_best(lambda: codec.encode(x), 1)[0])
                td_off.append(_best(lambda: codec.decode(without), 1)[0])
                td_on.append(_best(lambda: codec.decode(with_), 1)[0])
            enc = float(np.median(np.array(te_on) / np.array(te_off)))
            dec = float(np.median(np.array(td_on) / np.array(td_off)))
            gate = backends.get("numba").filter_costs                  # what encode runs
            t_gate = _best(lambda: filters.choose(w, x.shape, lay, cs, gate), a.rounds)[0]
            filt = codec.inspect(with_)["row_filter"]
            if filt is None:
                closed_enc.append(enc)
                closed_dec.append(dec)
            print(f"| {name} | {dt} | {tuple(x.shape)} | {filt['chunks'] if filt else 0} | "
                  f"{x.nbytes / len(without):.3f} | {x.nbytes / len(with_):.3f} | {1e3 * np.median(te_off):.2f} | "
                  f"{1e3 * np.median(te_on):.2f} | {enc:.3f} | {1e3 * t_gate:.3f} | {1e3 * np.median(td_off):.2f} | "
                  f"{1e3 * np.median(td_on):.2f} | {dec:.3f} |", flush=True)
    if closed_enc:
        print(f"\nGate closed on {len(closed_enc)} tensors: encode with / without, median "
              f"{np.median(closed_enc):.3f} (range {min(closed_enc):.3f}-{max(closed_enc):.3f}); decode "
              f"{np.median(closed_dec):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
