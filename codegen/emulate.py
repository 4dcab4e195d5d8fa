"""Run the generated CUDA kernels on the CPU: a test harness for machines without a GPU.

The generated ``.cu`` source is compiled by the host C++ compiler after a prelude that maps CUDA's
few built-ins the templates use onto the host: every thread of a block is a host thread (blocks run
one after another), ``__syncthreads``/``__syncwarp`` are barriers, ``__ballot_sync`` a vote through
per-warp memory and two barriers, ``__shared__`` memory a function-static array (one block at a time
uses it).  So the kernels run as they are written, lock-step assumptions included: a kernel that
lets lanes of a warp disagree on reaching a vote deadlocks here as it would misbehave on a GPU.

Only correctness is meaningful: a block of 256 host threads is slow.  Libraries are cached beside the
generated sources, keyed by a hash of the source.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import re
import shutil
import subprocess

from .generate import cache_dir, cuda_entry_points, generate

ARCH = "sm_90"          # the source it compiles (the generated files differ by arch in their name only)

PRELUDE = r"""
#include <barrier>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>
struct emu_dim3 { unsigned x = 1, y = 1, z = 1; };
static thread_local emu_dim3 threadIdx, blockIdx;
static emu_dim3 blockDim, gridDim;
struct emu_warp { std::barrier<>* bar; unsigned votes[32]; };
static std::barrier<>* emu_block_barrier;
static emu_warp* emu_warps;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__ __restrict
#define __shared__ static
static inline void __syncthreads() { emu_block_barrier->arrive_and_wait(); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu_warps[threadIdx.x / 32].bar->arrive_and_wait(); }
static inline unsigned __ballot_sync(unsigned mask, int pred) {
    emu_warp& w = emu_warps[threadIdx.x / 32];
    w.votes[threadIdx.x % 32] = pred != 0;
    w.bar->arrive_and_wait();
    unsigned m = 0;
    for (unsigned l = 0; l < 32; ++l) m |= w.votes[l] << l;
    w.bar->arrive_and_wait();
    return m & mask;
}
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline int __clzll(long long v) { return v ? __builtin_clzll((unsigned long long)v) : 64; }
template <typename F, typename... A>
static void emu_launch(F kernel, unsigned grid, unsigned block, A... args) {
    gridDim.x = grid;
    blockDim.x = block;
    std::vector<emu_warp> warps((block + 31) / 32);
    std::vector<std::unique_ptr<std::barrier<>>> bars;
    for (auto& w : warps) { bars.emplace_back(new std::barrier<>(32)); w.bar = bars.back().get(); }
    emu_warps = warps.data();
    for (unsigned b = 0; b < grid; ++b) {
        std::barrier<> whole(block);
        emu_block_barrier = &whole;
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < block; ++t)
            threads.emplace_back([=] { blockIdx.x = b; threadIdx.x = t; kernel(args...); });
        for (auto& th : threads) th.join();
    }
}
"""

def wrappers(source: str) -> str:
    """``extern "C" void emu_NAME(unsigned grid, unsigned block, <the kernel's parameters>)`` for every kernel."""
    out = []
    for name, (_, decls, _) in cuda_entry_points(source).items():
        names = [re.findall(r"\w+", d)[-1] for d in decls]
        out.append(f'extern "C" void emu_{name}(unsigned grid, unsigned block, {", ".join(decls)}) '
                   f'{{ emu_launch({name}, grid, block, {", ".join(names)}); }}')
    return "\n".join(out) + "\n"


def sanitizing() -> bool:
    """``ZIPCCL_EMULATE_ASAN=1``: compile with AddressSanitizer (the process must preload libasan), so
    any out-of-bounds access of a kernel aborts with a report."""
    import os

    return os.environ.get("ZIPCCL_EMULATE_ASAN") == "1"


@functools.cache
def load(dtype: str):
    """The emulation library of ``dtype``'s generated CUDA source (compiled once, then cached), with
    ``emu_NAME(grid, block, ...)`` for every kernel, argument types set."""
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        raise RuntimeError("no host C++ compiler (g++, c++ or clang++) to emulate the CUDA kernels")
    path = generate("cuda", dtype, ARCH)
    src = PRELUDE + path.read_text()
    src += wrappers(src)
    src = src.replace('#include "zipccl_codec.cuh"', (path.parent / "zipccl_codec.cuh").read_text())
    flags = ["-fsanitize=address", "-fno-omit-frame-pointer", "-g"] if sanitizing() else []
    digest = hashlib.sha256((cxx + " ".join(flags) + src).encode()).hexdigest()[:16]
    lib = cache_dir() / f"emulated_{dtype}_{digest}.so"
    if not lib.exists():
        cpp = lib.with_suffix(".cpp")
        cpp.write_text(src)
        tmp = lib.with_suffix(".so.tmp")
        run = subprocess.run([cxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", *flags, str(cpp), "-o",
                              str(tmp)],
                             capture_output=True, text=True)
        if run.returncode:
            raise RuntimeError(f"emulating the CUDA kernels of {dtype}: {cxx} failed:\n{run.stderr[-4000:]}")
        tmp.replace(lib)
    handle = ctypes.CDLL(str(lib))
    types = {"p": ctypes.c_void_p, "q": ctypes.c_int64, "i": ctypes.c_int}
    for name, (_, _, k) in cuda_entry_points(path.read_text()).items():
        fn = getattr(handle, "emu_" + name)
        fn.argtypes = [ctypes.c_uint, ctypes.c_uint] + [types[c] for c in k]
        fn.restype = None
    return handle
