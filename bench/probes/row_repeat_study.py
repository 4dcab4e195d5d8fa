"""Probe (issue #18): how much of the activations' gap to LZ-style peers is row structure.

    python -m bench.probes.row_repeat_study [--dtypes bfloat16,float16,float8_e4m3fn]

For every activation tensor of the ratio corpus (rows = its last dimension: a token's hidden state, an
attention row, a GELU output row), counts the rows that repeat an earlier row bit for bit (padding tokens,
repeated tokens at the embedding layer), then estimates what a "repeated row" mode would reach: zipccl
(format as written by default) on the distinct rows only, plus one bit a row (repeat or not) and two bytes a
repeat (the index of the row it repeats, as a varint of the distance would about take); a "trailing zeros"
mode (each row's values up to its last non-zero one, coded together, plus a byte a row for that length:
attention rows end in the mask's run of exact zeros); and the share of non-zero values equal to the value
one row above (same column: what LZ peers match on attention probabilities); against zipccl on the whole
tensor and the best of zstd9 and blosc2 (byte and bit shuffle) on it.  Bytes only: nothing here is a
format; it measures whether such a mode would close the gap (ratio table: bench/results/ratio*.md).
"""
from __future__ import annotations

import argparse

import numpy as np

import codec
from bench import peers
from bench.corpus import build_corpus_f32, cast, uint_view


def _repeats(u: np.ndarray) -> np.ndarray:
    """Boolean per row: the row equals an earlier row (bit for bit)."""
    rows = np.ascontiguousarray(u).view(np.dtype((np.void, u.shape[1] * u.itemsize))).ravel()
    _, first = np.unique(rows, return_index=True)
    rep = np.ones(len(rows), bool)
    rep[first] = False
    return rep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bfloat16,float16,float32,float8_e4m3fn")
    a = ap.parse_args(argv)
    corpus = build_corpus_f32()
    print("| tensor | dtype | rows | repeated rows | zipccl | repeated-row mode (est.) | trailing-zeros mode "
          "(est.) | non-zeros equal to the one above | zstd9 | blosc2 shuffle | blosc2 bitshuffle | best peer |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in sorted(k for k in corpus if k.startswith("activations/")):
        x32 = corpus[name]
        for dt in a.dtypes.split(","):
            x = cast(x32, dt)
            u = uint_view(x).reshape(-1, x.shape[-1])
            rep = _repeats(u)
            raw = x.nbytes
            whole = len(codec.encode(x))
            distinct = x.reshape(-1, x.shape[-1])[~rep]
            est = len(codec.encode(np.ascontiguousarray(distinct))) + -(-len(rep) // 8) + 2 * int(rep.sum())
            xr = x.reshape(-1, x.shape[-1])
            nz = u != 0
            last = np.where(nz.any(1), u.shape[1] - np.argmax(nz[:, ::-1], axis=1), 0)
            prefixes = np.concatenate([xr[i, :last[i]] for i in range(len(xr))])
            trail = len(codec.encode(np.ascontiguousarray(prefixes))) + len(xr)
            above = ((u[1:] == u[:-1]) & nz[1:]).sum() / max(int(nz[1:].sum()), 1)
            z9 = peers.zstd9(x)[0]
            bl = peers.blosc2_shuffle_zstd5(x)[0]
            bb = peers.blosc2_bitshuffle_zstd5(x)[0]
            best = min(z9, bl, bb)
            print(f"| {name} | {dt} | {len(rep)} | {rep.mean():.1%} | {raw / whole:.3f} | {raw / est:.3f} | "
                  f"{raw / trail:.3f} | {above:.1%} | {raw / z9:.3f} | {raw / bl:.3f} | {raw / bb:.3f} | "
                  f"{raw / best:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
