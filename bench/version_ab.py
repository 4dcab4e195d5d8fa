"""Two checkouts of zipccl, timed against each other: the same inputs encoded and decoded by each
checkout's own numba kernels, in fresh processes that alternate (A, B, A, B, ...; the order flips every
round, so a machine that slows down during the run burdens both), one codec thread.

    python -m bench.version_ab OLD_CHECKOUT NEW_CHECKOUT [--rounds 6] [--out FILE]

(``git worktree add --detach /tmp/old <commit>`` gives a checkout of an older commit.)  Each process
encodes its own stream of each input (so a format change is measured as users meet it) and reports the
best of several calls; the table gives NEW/OLD per round and their median.  For a change that must not
cost speed (a new format mode), where one process's figures vary by ±10 % on a shared machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import json, os, time, numpy as np, ml_dtypes, codec
codec.set_num_threads(1)
if os.environ.get("ZIPCCL_AB_FORMAT"):                  # the format this side writes (--format-old/--format-new)
    import codec.format
    codec.format.WRITE_VERSION = int(os.environ["ZIPCCL_AB_FORMAT"])
rng = np.random.default_rng(0)
out = {}
inputs = []
for name, dt, n in (("bf16 gaussian", ml_dtypes.bfloat16, 32 << 20), ("fp16 gaussian", np.float16, 32 << 20),
                    ("fp32 gaussian", np.float32, 16 << 20), ("bf16 abs(gaussian)", ml_dtypes.bfloat16, 32 << 20),
                    ("bf16 ReLU", ml_dtypes.bfloat16, 32 << 20)):
    x = rng.standard_normal(n) * 0.02
    x = abs(x) if "abs" in name else np.maximum(x, 0) if "ReLU" in name else x
    x = x.astype(dt)
    inputs.append((name, x))
# mostly-zero inputs: 90 % of 256-value blocks +0 (an embedding gradient's absent rows), and MiniLM's real
# gradients of one backward pass, flattened (bench.corpus; about half exact zeros; spelt out rather than
# bench.corpus.flat_gradients, since this runs in older checkouts too)
x = (rng.standard_normal(16 << 20) * 0.02).astype(ml_dtypes.bfloat16)
x.reshape(-1, 256)[rng.random((16 << 20) // 256) < 0.9] = 0
inputs.append(("bf16 90 % zero blocks", x))
# an fp16 Adam second moment that underflowed but for 0.2 % of its entries (scattered tiny values)
x = np.zeros(16 << 20, np.float16)
keep = rng.random(16 << 20) < 0.002
x[keep] = (rng.standard_normal(int(keep.sum())) * 2e-3) ** 2
inputs.append(("fp16 0.2 % non-zero", x))
# the sum of two bf16 tensors (a reduce-scatter hop's input): rare exact +0 from cancellations
a, b = (rng.standard_normal(32 << 20).astype(np.float32).astype(ml_dtypes.bfloat16) for _ in range(2))
inputs.append(("bf16 sum of two", (a.astype(np.float32) + b.astype(np.float32)).astype(ml_dtypes.bfloat16)))
# unstructured pruning: 90 % and 99 % of a weight's entries +0, scattered
for keep in (0.1, 0.01):
    x = (rng.standard_normal(16 << 20) * 0.02).astype(ml_dtypes.bfloat16)
    x[rng.random(16 << 20) >= keep] = 0
    inputs.append((f"bf16 {100 - 100 * keep:g} % pruned", x))
try:
    from bench.corpus import build_corpus_f32, tensor_class
    grads = build_corpus_f32()
    inputs.append(("bf16 MiniLM gradients", np.concatenate(
        [v.ravel() for k, v in grads.items() if tensor_class(k) == "gradients"]).astype(ml_dtypes.bfloat16)))
    # AdamW's moments after real steps, flattened (a sharded optimizer state): the tensors format 7's
    # explicit tables are for
    for moment in ("exp_avg", "exp_avg_sq"):
        inputs.append((f"bf16 MiniLM {moment}", np.concatenate(
            [v.ravel() for k, v in grads.items() if k.startswith(f"optimizer/{moment}.")]).astype(ml_dtypes.bfloat16)))
except Exception:                                        # no corpus here: the synthetic inputs only
    pass
for name, x in inputs:
    blob = codec.encode(x)
    dst = np.empty_like(x)
    def best(fn, k):
        t = []
        for _ in range(k):
            t0 = time.perf_counter(); fn(); t.append(time.perf_counter() - t0)
        return min(t)
    out[name] = {"ratio": x.nbytes / len(blob), "encode": x.nbytes / best(lambda: codec.encode(x), 5) / 1e6,
                 "decode": x.nbytes / best(lambda: codec.decode(blob, out=dst), 9) / 1e6}
print(json.dumps(out))
"""


def _run(checkout: Path, cache: str, fmt: int | None = None) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "ZIPCCL_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    if fmt is not None:
        env["ZIPCCL_AB_FORMAT"] = str(fmt)
    res = subprocess.run([sys.executable, "-c", _CHILD], cwd=checkout, env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    ap.add_argument("--format-old", type=int, default=None, help="the format OLD writes (default: its encoder's)")
    ap.add_argument("--format-new", type=int, default=None,
                    help="the format NEW writes (e.g. `. . --format-old 6 --format-new 7`: one checkout, two formats)")
    args = ap.parse_args(argv)
    fmts = {"old": args.format_old, "new": args.format_new}
    from bench.speed import _cpu_model

    caches = {k: tempfile.mkdtemp(prefix=f"zipccl-ab-{k}-") for k in ("old", "new")}
    for k in ("old", "new"):                     # compile both before timing anything
        _run(getattr(args, k), caches[k], fmts[k])
    rounds = []
    for r in range(args.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        got = {k: _run(getattr(args, k), caches[k], fmts[k]) for k in order}
        rounds.append(got)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    written = "".join(f", {k.upper()} writes format {v}" for k, v in fmts.items() if v is not None)
    lines = [f"CPU: {_cpu_model()}; one codec thread; NEW = {args.new}, OLD = {args.old}{written}; {args.rounds} rounds of "
             "fresh processes, alternating (order flipped every round); MB/s are the medians, best of 5 encodes / "
             "9 decodes (into a reused buffer) per process.", "",
             "| input | ratio old | ratio new | encode old | encode new | new/old per round | median | "
             "decode old | decode new | new/old per round | median |", "|---" * 11 + "|"]
    for name in rounds[0]["old"]:
        cells = [name, f"{rounds[0]['old'][name]['ratio']:.3f}", f"{rounds[0]['new'][name]['ratio']:.3f}"]
        for what in ("encode", "decode"):
            old = [g["old"][name][what] for g in rounds]
            new = [g["new"][name][what] for g in rounds]
            rel = [n / o for n, o in zip(new, old)]
            cells += [f"{statistics.median(old):.0f}", f"{statistics.median(new):.0f}",
                      " ".join(f"{v:.2f}" for v in rel), f"{statistics.median(rel):.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
