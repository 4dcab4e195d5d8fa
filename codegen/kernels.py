"""Kernel sets: one object per (dialect, dtype) that launches the generated encoder and decoder kernels.

:mod:`codegen.device` drives every set through the same seven calls with the same tensors (row layouts
are described in the templates), so the dialects differ only here:

* ``triton``: the generated Triton module, on a GPU or, with ``TRITON_INTERPRET=1``, on the CPU;
* ``cuda``: the generated CUDA C++ compiled at run time by NVRTC and launched with ``cuda.core`` on
  torch's current stream (needs a GPU);
* ``cuda-emulated``: the same CUDA source compiled for the CPU by the host C++ compiler, every thread of
  a block a host thread, warp votes and barriers emulated (:mod:`codegen.emulate`); slow, for tests on
  machines without a GPU: the CUDA kernels' bytes are checked there against the reference.
"""
from __future__ import annotations

import functools
import os

from codec.layouts import layout_for

from . import emulate
from .generate import ARCHS, GPU_BLOCK, ONE_WARP, cuda_entry_points, generate, load_triton

DIALECTS = ("triton", "cuda", "cuda-emulated")


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def default_device() -> str:
    """Where the device backends put host data: the GPU, or the CPU under the Triton interpreter."""
    import torch

    if interpreting():
        return "cpu"
    if not torch.cuda.is_available():
        raise RuntimeError("the GPU backends need a CUDA GPU and none is available (backend='numba' runs on "
                           "the CPU; TRITON_INTERPRET=1 runs the Triton kernels on the CPU, slowly, for tests)")
    return "cuda"


@functools.cache
def kernel_set(dialect: str, dtype):
    lay = layout_for(dtype)
    if dialect == "triton":
        return TritonKernels(lay)
    if dialect == "cuda":
        return CudaKernels(lay)
    if dialect == "cuda-emulated":
        return EmulatedCudaKernels(lay)
    raise ValueError(f"unknown dialect {dialect!r}; one of {DIALECTS}")


class TritonKernels:
    dialect = "triton"

    def __init__(self, lay):
        self.mod = load_triton(lay.name)
        self.block = 256 if interpreting() else GPU_BLOCK

    def _run(self, name, grid, *args, block=False):
        extra = {"BLOCK": self.block} if block else {}
        if name in ONE_WARP:                 # the rANS kernels' vectors are a chunk's 32 lanes: one warp
            extra["num_warps"] = 1
        getattr(self.mod, name)[(grid,)](*args, **extra)

    def stats(self, grid, words, numel, cs, stats, nz16, nz64, nb16, nb64):
        self._run("enc_stats", grid, words, numel, cs, stats, nz16, nz64, nb16, nb64, block=True)

    def rans(self, grid, words, rows, freq, cum, nzb, counts, scratch):
        self._run("enc_rans", grid, words, rows, freq, cum, nzb, counts, scratch)

    def place(self, grid, rows, scratch, out):
        self._run("enc_place", grid, rows, scratch, out, block=True)

    def planes(self, grid, words, rows, freq, nzb, out, scratch):
        self._run("enc_planes", grid, words, rows, freq, nzb, out, scratch, block=True)

    def copy(self, grid, words, rows, out):
        self._run("enc_copy", grid, words, rows, out, block=True)

    def dec_copy(self, grid, buf, rows, words):
        self._run("dec_copy", grid, buf, rows, words, block=True)

    def decode(self, grid, buf, metas, tables, his, nzb, words, err):
        self._run("decode_coded_chunks", grid, buf, metas, tables, his, nzb, words, err)

    def decode_split(self, grid, buf, metas, tables, his, nzb, sym, sym_at, words, err):
        """The decode in two passes: the rANS walks (symbols to ``sym``), then the values, vectorised."""
        self._run("dec_symbols", grid, buf, metas, tables, sym, sym_at, err)
        self._run("dec_values", grid, buf, metas, his, nzb, sym, sym_at, words, err, block=True)


class _CudaSet:
    """The seven calls on top of a ``_launch(name, grid, threads, kinds, args)`` of one of the CUDA
    kernels; block sizes and argument kinds come from the generated source (``__launch_bounds__``, the
    parameter list: :func:`codegen.generate.cuda_entry_points`)."""

    def __init__(self, lay, source: str):
        self.lay = lay
        self.entries = cuda_entry_points(source)

    def _call(self, name, grid, *args):
        name = f"zipccl_{name}_{self.lay.name}"
        threads, _, kinds = self.entries[name]
        if len(args) != len(kinds):
            raise TypeError(f"{name}: {len(args)} arguments, {len(kinds)} expected")
        if grid:
            self._launch(name, grid, threads, kinds, args)

    def stats(self, grid, words, numel, cs, stats, nz16, nz64, nb16, nb64):
        self._call("enc_stats", grid, words, numel, cs, stats, nz16, nz64, nb16, nb64)

    def rans(self, grid, words, rows, freq, cum, nzb, counts, scratch):
        self._call("enc_rans", grid, words, rows, freq, cum, nzb, counts, scratch)

    def place(self, grid, rows, scratch, out):
        self._call("enc_place", grid, rows, scratch, out)

    def planes(self, grid, words, rows, freq, nzb, out, scratch):
        self._call("enc_planes", grid, words, rows, freq, nzb, out, scratch)

    def copy(self, grid, words, rows, out):
        self._call("enc_copy", grid, words, rows, out)

    def dec_copy(self, grid, buf, rows, words):
        self._call("dec_copy", grid, buf, rows, words)

    def decode(self, grid, buf, metas, tables, his, nzb, words, err):
        self._call("decode", grid, buf, metas, tables, his, nzb, words, err)


class CudaKernels(_CudaSet):
    """The generated CUDA source, NVRTC-compiled for the current device and launched with cuda.core."""

    dialect = "cuda"

    def __init__(self, lay):
        import torch
        from cuda.core import Device

        if not torch.cuda.is_available():
            raise RuntimeError("backend 'cuda' needs a CUDA GPU and none is available (backend='numba' runs on the "
                               "CPU; codegen.kernels.kernel_set('cuda-emulated', dtype) runs these kernels on it, slowly)")
        major, minor = torch.cuda.get_device_capability()
        arch = f"sm_{major}{minor}"
        if arch not in ARCHS:
            raise RuntimeError(f"no CUDA kernels are generated for {arch} (targets: {', '.join(ARCHS)})")
        self.device = Device(torch.cuda.current_device())
        self.device.set_current()
        source, module = compile_with_cuda_core(lay.name, arch)
        super().__init__(lay, source)
        self.kernels = {n: module.get_kernel(n) for n in self.entries}

    def _launch(self, name, grid, threads, kinds, args):
        import torch
        from cuda.core import LaunchConfig, launch

        stream = self.device.create_stream(TorchStream(torch.cuda.current_stream().cuda_stream))
        launch(stream, LaunchConfig(grid=int(grid), block=threads), self.kernels[name], *launch_args(kinds, args))


class TorchStream:
    """A CUDA stream handle (torch's current stream) through cuda.core's ``__cuda_stream__`` protocol:
    a method returning ``(protocol version, handle)``."""

    def __init__(self, handle: int):
        self.handle = int(handle)

    def __cuda_stream__(self):
        return (0, self.handle)


def launch_args(kinds: str, args) -> list:
    """Kernel arguments as cuda.core takes them: a tensor's device pointer (``p``) as uint64, ``q``
    int64, ``i`` int32 (the kinds of :func:`codegen.generate.cuda_entry_points`)."""
    import numpy as np

    conv = {"p": lambda a: np.uint64(a.data_ptr()), "q": np.int64, "i": np.int32}
    return [conv[k](a) for k, a in zip(kinds, args)]


def compile_with_cuda_core(dtype: str, arch: str):
    """The generated CUDA source of ``dtype`` and its cubin for ``arch``, compiled by NVRTC through
    cuda.core's ``Program`` as the ``cuda`` backend loads it (no device needed until ``get_kernel``)."""
    from cuda.core import Program, ProgramOptions

    path = generate("cuda", dtype, arch)
    source = path.read_text()
    options = ProgramOptions(arch=arch, std="c++17", include_path=str(path.parent))
    return source, Program(source, code_type="c++", options=options).compile("cubin")


class EmulatedCudaKernels(_CudaSet):
    """The generated CUDA source run on the CPU (see :mod:`codegen.emulate`): torch CPU tensors in."""

    dialect = "cuda-emulated"

    def __init__(self, lay):
        super().__init__(lay, generate("cuda", lay.name, emulate.ARCH).read_text())
        self.lib = emulate.load(lay.name)

    def _launch(self, name, grid, threads, kinds, args):
        import ctypes

        conv = {"p": lambda a: ctypes.c_void_p(a.data_ptr()), "q": ctypes.c_int64, "i": ctypes.c_int}
        getattr(self.lib, "emu_" + name)(ctypes.c_uint(int(grid)), ctypes.c_uint(threads),
                                         *[conv[k](a) for k, a in zip(kinds, args)])
