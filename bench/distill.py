"""Layer-wise curriculum distillation vs end-to-end distillation, same data and wall-clock budget.

    python -m bench.distill                    # -> bench/results/distill.md
    python -m bench.distill --budget 20 --train 128 --quick   # smoke run, prints only

Teacher: all-MiniLM-L6-v2 (offline package).  Student: the same network with every FFN pruned
to half its width (structured, by weight norm).  Data: paragraphs of standard-library
docstrings, split into train and held-out.  Both methods train from the same pruned student on
the same teacher features, served by the same compressed feature cache, for the same
wall-clock budget.  Reported: held-out cosine similarity of student and teacher sentence
embeddings, peak extra memory of the training run (RSS high-water mark above the start),
wall time, steps; and for the cache: raw vs compressed bytes and the share of the step time
spent waiting on decoding.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench.speed import reset_peak_rss, rss
from trainers.distill import (Batches, Curriculum, build_feature_cache, cosine_to_teacher, distill_end_to_end,
                              distill_layerwise, even_segments, load_teacher, prune_ffn, split_texts,
                              stdlib_texts)

RESULTS = Path(__file__).resolve().parent / "results"


def _setup(args):
    torch.manual_seed(0)
    texts = stdlib_texts()
    train, held = split_texts(texts)
    teacher, tok = load_teacher()
    tb = Batches.from_texts(tok, train[:args.train], args.batch, args.max_length)
    vb = Batches.from_texts(tok, held, args.batch, args.max_length)
    curriculum = Curriculum(even_segments(len(teacher.encoder.layer), args.segments))
    t = time.perf_counter()
    cache = build_feature_cache(teacher, tb, curriculum.boundaries())
    build_s = time.perf_counter() - t
    cache.get(next(iter(cache._mem)))          # load the decoder kernels outside the timed run
    return teacher, tb, vb, curriculum, cache, build_s


def _run_method(args) -> dict:
    """One method in this (fresh) process: peak memory is this run's alone."""
    teacher, tb, vb, curriculum, cache, build_s = _setup(args)
    torch.manual_seed(0)
    student = prune_ffn(teacher)
    before = cosine_to_teacher(student, teacher, vb)
    reset_peak_rss()
    rss0 = rss("VmRSS")
    if args.method == "end-to-end":
        log = distill_end_to_end(student, tb, cache, budget_s=args.budget)
    else:
        log = distill_layerwise(student, tb, cache, curriculum, budget_s=args.budget)
    peak = rss("VmHWM") - rss0
    st = cache.stats()
    return {"method": args.method, "held-out cosine": cosine_to_teacher(student, teacher, vb),
            "peak extra memory MiB": peak / 2**20, "wall s": log.seconds, "steps": log.steps,
            "decode wait share": log.wait_seconds / log.seconds, "_before": before, "_cache": st,
            "_build_s": build_s, "_boundaries": curriculum.boundaries(), "_batches": len(tb)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=90.0, help="seconds of training per method")
    ap.add_argument("--train", type=int, default=640, help="training paragraphs")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--segments", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="print only")
    ap.add_argument("--method", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.method:
        print("RESULT " + json.dumps(_run_method(args)))
        return 0
    rows = []
    for method in ("end-to-end", "layer-wise curriculum"):
        cmd = [sys.executable, "-m", "bench.distill", "--method", method] + [
            a for a in (argv if argv is not None else sys.argv[1:]) if a != "--quick"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=RESULTS.parent.parent)
        rows.append(json.loads(next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))[7:]))
        print({k: v for k, v in rows[-1].items() if not k.startswith("_")}, file=sys.stderr)
    from bench.ratio import to_markdown

    cols = [k for k in rows[0] if not k.startswith("_")]
    table = to_markdown(rows, cols, "{:.4f}")
    e2e, lw = rows
    st = lw["_cache"]
    text = (f"Student before distillation (pruned FFN 1536 -> 768): held-out cosine {lw['_before']:.4f}.\n\n"
            f"{table}\n\nLayer-wise vs end-to-end: cosine {lw['held-out cosine'] - e2e['held-out cosine']:+.4f}, "
            f"peak extra memory x{lw['peak extra memory MiB'] / max(e2e['peak extra memory MiB'], 1e-9):.2f}.\n\n"
            f"Feature cache: {st['items']} tensors (teacher hidden states at layers {lw['_boundaries']} for "
            f"{lw['_batches']} batches of {args.batch} x <= {args.max_length} tokens), "
            f"{st['raw_bytes'] / 2**20:.1f} MiB raw -> {st['compressed_bytes'] / 2**20:.1f} MiB compressed "
            f"(ratio {st['ratio']:.3f}, float32, lossless), built in {lw['_build_s']:.1f} s; during the layer-wise run "
            f"decoding took {st['decode_seconds']:.2f} s in the prefetch threads, of which the training loop waited "
            f"{st['wait_seconds']:.2f} s ({100 * lw['decode wait share']:.2f}% of the run).\n")
    print(text)
    if not args.quick:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "distill.md").write_text(
            "# Layer-wise curriculum vs end-to-end distillation (all-MiniLM-L6-v2, FFN pruned to 50%)\n\n"
            f"Regenerate: `python -m bench.distill --budget {args.budget:g} --train {args.train} --batch {args.batch} "
            f"--max-length {args.max_length} --segments {args.segments}` (2 CPU cores; each method in a fresh "
            "process with the same budget, data, initial student and compressed teacher-feature cache).\n\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
