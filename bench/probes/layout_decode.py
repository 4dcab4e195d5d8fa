"""What format 8's symbol layouts cost the numba decoder (a draft: its layout chunks are assembled one value
at a time): real tensors of the bench.ratio corpus written as format 7 (numba) and format 8 (the reference,
the only encoder of the draft), each decoded by numba on one thread (best of --repeat), side by side.

    python -m bench.probes.layout_decode [--repeat 5]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import codec
from bench.corpus import build_corpus
from codec import format as fmt

TENSORS = ("activations/encoder.layer.5.intermediate.gelu@bfloat16",
           "activations/encoder.layer.5.intermediate.gelu@float16",
           "activations/encoder.layer.5.intermediate.gelu@float8_e4m3fn",
           "weights/embeddings.word_embeddings.weight@float8_e4m3fn",
           "weights/embeddings.word_embeddings.weight@bfloat16",
           "optimizer/exp_avg.encoder.layer.0.intermediate.dense.weight@float16",
           "gradients/encoder.layer.0.attention.self.query.weight@float16")


def _best(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    codec.set_num_threads(1)
    want = set(TENSORS)
    corpus = {n: x for n, x in build_corpus(dtypes=("bfloat16", "float16", "float8_e4m3fn")) if n in want}
    print("| tensor | ratio v7 | ratio v8 | layout chunks | decode v7 MB/s | decode v8 MB/s | v8/v7 |")
    print("|---|---|---|---|---|---|---|")
    for name in TENSORS:
        x = corpus[name]
        fmt.WRITE_VERSION = 7
        b7 = bytes(codec.encode(x))
        fmt.WRITE_VERSION = 8
        b8 = bytes(codec.encode(x, backend="reference"))
        fmt.WRITE_VERSION = fmt.FORMAT_VERSION
        h = fmt.parse_header(b8)
        coded = [i for i in range(h.n_chunks) if h.kinds[i] == fmt.KIND_CODED]
        lay = sum(fmt.parse_chunk_head(h, b8, i).layout != 0 for i in coded)
        for b in (b7, b8):
            y = codec.decode(b)
            assert np.array_equal(np.asarray(y).view(np.uint8), x.view(np.uint8))
        t7 = _best(lambda: codec.decode(b7), args.repeat)
        t8 = _best(lambda: codec.decode(b8), args.repeat)
        mb = x.nbytes / 1e6
        print(f"| {name} | {x.nbytes / len(b7):.4f} | {x.nbytes / len(b8):.4f} | {lay}/{h.n_chunks} | "
              f"{mb / t7:.0f} | {mb / t8:.0f} | {t7 / t8:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
