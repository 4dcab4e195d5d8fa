"""python -m codegen: render kernels for one target, all targets, or list them."""
import argparse
import sys
from pathlib import Path

from codec.layouts import layout_for

from .generate import ARCHS, DIALECTS, all_targets, cache_dir, compile_cuda, compile_triton, generate, render


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m codegen", description=__doc__)
    ap.add_argument("--dtype", help="bf16, f16, f32, e4m3, e5m2 (or the full names)")
    ap.add_argument("--arch", choices=ARCHS, help="CUDA target architecture")
    ap.add_argument("--dialect", choices=DIALECTS, default="triton")
    ap.add_argument("--out", type=Path, help=f"output folder (default: the cache, {cache_dir()})")
    ap.add_argument("--all", action="store_true", help="every dialect x dtype x arch")
    ap.add_argument("--list", action="store_true", help="list the targets and whether they are generated")
    ap.add_argument("--compile", action="store_true",
                    help="also compile the kernels (CUDA with NVRTC, Triton with its GPU compiler): checks them, no GPU needed")
    a = ap.parse_args(argv)
    if a.list:
        folder = a.out or cache_dir()
        for dialect, dtype, arch in all_targets():
            name, _ = render(dialect, dtype, arch)
            print(f"{'generated' if (folder / name).exists() else 'missing  '}  {name}")
        return 0
    if a.all:
        targets = list(all_targets())
    else:
        if not a.dtype:
            ap.error("--dtype is required (or --all / --list)")
        targets = [(a.dialect, layout_for(a.dtype).name, a.arch)]
    for dialect, dtype, arch in targets:
        try:
            path = generate(dialect, dtype, arch, a.out)
        except (TypeError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        extra = ""
        if a.compile and dialect == "cuda":
            extra = f" (NVRTC: {len(compile_cuda(dtype, arch, output='cubin'))} byte cubin)"
        elif a.compile:                      # Triton's GPU compiler, for the given arch (default sm_90)
            sizes = compile_triton(dtype, a.arch or "sm_90")
            extra = f" (Triton, {a.arch or 'sm_90'}: {len(sizes)} kernels, {sum(sizes.values())} cubin bytes)"
        print(f"{path}{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
