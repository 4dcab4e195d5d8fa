"""Per-call time of small tensors and of chunks of fewer than 16 rANS lanes, zipccl beside ZipNN and zstd.

    python -m bench.small_calls [--out bench/results/small_calls_<cpu>.md] [--ab OLD_CHECKOUT]

Sizes: a LayerNorm vector (384), a bias (1536), 4096 values, chunks of 1-8 rANS lanes (a chunk of
fewer than 16384 values: every tensor under 32 KiB of bf16, and the partial last chunk of any tensor
whose size is not a multiple of the chunk), the smallest 16-lane chunk (16384) and a 64K-value chunk
plus a 12,288-value tail.  One codec thread; each figure is the best of 7 repeats of a timed loop
(microseconds per call); ``decode(out=)`` into a reused array, as a service that decodes many small
messages would; and a torch tensor encoded and decoded into reused buffers (``out=``), as the collectives
do with their frames.  Peers in the same process: ZipNN (threads=1) and zstd level 3 (single-threaded) on
the same bytes.  ``--ab OLD``: the zipccl columns are also measured in an older checkout (``git worktree
add --detach /tmp/old <commit>``), in alternating fresh processes, so a change's effect is read off
the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

SIZES = (384, 1536, 4096, 12288, 16383, 16384, 65536 + 12288)
DTYPES = ("bfloat16", "float32")

_CHILD = r"""
import json, sys, timeit
import numpy as np, ml_dtypes, codec
codec.set_num_threads(1)
sizes, dtypes, peers = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3] == "1"
rng = np.random.default_rng(0)
res = {}

def best(fn, n):
    for _ in range(max(3, n // 10)):
        fn()
    return min(timeit.repeat(fn, number=n, repeat=7)) / n * 1e6

for dt in dtypes:
    npdt = ml_dtypes.bfloat16 if dt == "bfloat16" else np.dtype(dt)
    for n in sizes:
        x = (rng.standard_normal(n) * 0.02).astype(npdt)
        reps = max(20, 200000 // n)
        blob = bytes(codec.encode(x))
        out = np.empty_like(x)
        row = {"zipccl_enc_us": best(lambda: codec.encode(x), reps),
               "zipccl_dec_us": best(lambda: codec.decode(blob, out=out), reps),
               "zipccl_ratio": x.nbytes / len(blob)}
        try:                      # a torch tensor into reused buffers (a collective's frames, a DDP bucket)
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            tx = torch.from_numpy(x.view(np.uint8 if x.itemsize == 1 else f"<i{x.itemsize}").copy()).view(
                getattr(torch, dt))
            tbuf = torch.empty(codec.max_encoded_size(tx), dtype=torch.uint8)
            ts = codec.encode(tx, out=tbuf)
            tout = torch.empty_like(tx)
            row["torch_enc_us"] = best(lambda: codec.encode(tx, out=tbuf), reps)
            row["torch_dec_us"] = best(lambda: codec.decode(ts, out=tout), reps)
        if peers:
            import zstandard
            from zipnn import ZipNN
            raw = x.tobytes()
            zc, zd = zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor()
            zb = zc.compress(raw)
            row["zstd3_enc_us"] = best(lambda: zc.compress(raw), reps)
            row["zstd3_dec_us"] = best(lambda: zd.decompress(zb), reps)
            row["zstd3_ratio"] = len(raw) / len(zb)
            zn = ZipNN(input_format="byte", bytearray_dtype=dt, threads=1)
            nb = bytes(zn.compress(bytearray(raw)))       # (ZipNN rewrites its input: a copy a call)
            assert bytes(zn.decompress(nb)) == raw
            row["zipnn_enc_us"] = best(lambda: zn.compress(bytearray(raw)), reps)
            row["zipnn_dec_us"] = best(lambda: zn.decompress(nb), reps)
            row["zipnn_ratio"] = len(raw) / len(nb)
        res[f"{dt}:{n}"] = row
print("RESULT " + json.dumps(res))
"""


def _child(checkout: Path, peers: bool) -> dict:
    """The figures of one fresh process importing ``checkout``'s codec (its own kernel cache)."""
    env = dict(os.environ, PYTHONPATH=str(checkout), NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("NUMBA_CACHE_DIR", None)
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(SIZES), json.dumps(DTYPES), "1" if peers else "0"],
                       capture_output=True, text=True, env=env, cwd=checkout)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    if r.returncode or not line:
        raise RuntimeError(f"benchmark child failed in {checkout}:\n{r.stderr[-3000:]}")
    return json.loads(line[0][7:])


def _lanes(n: int) -> str:
    """The rANS lanes of a tensor of ``n`` values in 64K chunks: its first chunk's (+ its tail's)."""
    from codec.format import lanes

    tail = n % 65536 if n > 65536 else 0
    return f"{lanes(min(n, 65536))}" + (f" + {lanes(tail)}" if tail else "")


def _us(row: dict, col: str) -> str:
    return f"{row[col]:.1f}" if col in row else "-"


def main(argv=None) -> int:
    from bench.speed import _cpu_model, write_result

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--ab", type=Path, default=None, help="an older checkout, measured alternately")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds with --ab (best kept)")
    a = ap.parse_args(argv)
    here = Path(__file__).resolve().parent.parent
    new = _child(here, True)
    old = None
    if a.ab is not None:
        old = _child(a.ab.resolve(), False)
        for r in range(a.rounds):
            order = [here, a.ab.resolve()]
            for tree in (order if r % 2 else order[::-1]):
                got = _child(tree, tree == here)
                base = new if tree == here else old
                for key, row in got.items():
                    for col, v in row.items():
                        if col.endswith("_us"):
                            base[key][col] = min(base[key][col], v)
    lines = [f"# Small calls: per-call time of small tensors and of chunks of fewer than 16 rANS lanes",
             "", f"CPU: {_cpu_model()}; one codec thread; microseconds per call, best of 7 timed loops "
             f"(encode; decode(out=) into a reused array; torch: a tensor into reused buffers, as the collectives' "
             f"frames).  Regenerate: `python -m bench.small_calls"
             f"{' --ab OLD' if old else ''}`.", ""]
    head = "| dtype | values | rANS lanes | zipccl encode | zipccl decode | ZipNN encode | ZipNN decode | zstd3 encode " \
           "| zstd3 decode | decode vs ZipNN | ratio zipccl / ZipNN / zstd3 | torch encode(out=) | torch decode(out=) |"
    if old:
        head += " old encode | old decode | decode old/new | old torch encode | old torch decode |"
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for key, row in new.items():
        dt, n = key.split(":")
        cells = [dt, n, _lanes(int(n)), f"{row['zipccl_enc_us']:.1f}", f"{row['zipccl_dec_us']:.1f}",
                 f"{row['zipnn_enc_us']:.1f}", f"{row['zipnn_dec_us']:.1f}", f"{row['zstd3_enc_us']:.1f}",
                 f"{row['zstd3_dec_us']:.1f}", f"{row['zipnn_dec_us'] / row['zipccl_dec_us']:.2f}x",
                 f"{row['zipccl_ratio']:.3f} / {row['zipnn_ratio']:.3f} / {row['zstd3_ratio']:.3f}",
                 _us(row, "torch_enc_us"), _us(row, "torch_dec_us")]
        if old:
            o = old[key]
            cells += [f"{o['zipccl_enc_us']:.1f}", f"{o['zipccl_dec_us']:.1f}",
                      f"{o['zipccl_dec_us'] / row['zipccl_dec_us']:.2f}x", _us(o, "torch_enc_us"), _us(o, "torch_dec_us")]
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    print(f"wrote {write_result(a.out, 'small_calls', text)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
