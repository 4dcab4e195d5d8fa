"""Render the kernel templates for one target and keep them in a versioned cache.

A target is ``(dialect, dtype, arch)``.  Templates (``codegen/templates``) hold the kernel
logic; rendering only injects constants (exponent/mantissa widths, table sizes, symbol ids).
Each rendered file is named ``{dialect}_codec_{dtype}[_{arch}]_{hash}`` where the hash covers
(package version, format version, codebook family version, dtype, arch, template text), is
written only if it changed, under an exclusive file lock, in
``$ZIPCCL_CODEGEN_CACHE`` (default ``~/.cache/zipccl/codegen``).  With
``ZIPCCL_CODEGEN_OFFLINE=1`` nothing is generated at run time: pre-generated files must be in
the cache (air-gapped deployments ship them).
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import os
import re
from pathlib import Path

from codec import codebook as cbk
from codec import format as fmt
from codec._version import __version__
from codec.layouts import LAYOUTS, layout_for

from . import rows

TEMPLATES = Path(__file__).resolve().parent / "templates"
#: the hand-written code the generated files of each dialect build on (in the cache key; the CUDA header
#: is copied beside the generated files, Triton's module is imported from the package)
HELPERS = {"triton": [Path(__file__).resolve().parent / "triton_lib.py"],
           "cuda": [Path(__file__).resolve().parent / "cuda" / "zipccl_codec.cuh"]}
DIALECTS = ("triton", "cuda")
ARCHS = ("sm_80", "sm_90", "sm_100")
_EXT = {"triton": ".py", "cuda": ".cu"}
_KIND = {"triton": "codec", "cuda": "codec"}      # each source holds the decoder and the rANS encoder core


def cache_dir() -> Path:
    return Path(os.environ.get("ZIPCCL_CODEGEN_CACHE", Path.home() / ".cache" / "zipccl" / "codegen"))


def constants(dtype: str) -> dict:
    """The values injected into the templates for ``dtype``."""
    lay = layout_for(dtype)
    return {
        "dtype": lay.name, "E": lay.exp_bits, "M": lay.man_bits, "TOP": (1 << lay.exp_bits) - 1,
        "BITS": 8 * lay.itemsize, "OUT_T": lay.uint_name, "CUDA_OUT_T": lay.c_uint,
        "MAX_FULL": max(1, lay.man_bits // 8),
        "PROB_BITS": cbk.PROB_BITS, "TOTAL": cbk.TOTAL, "MASK": cbk.TOTAL - 1, "RANS_L": fmt.RANS_L,
        "N_SYMBOLS": cbk.N_SYMBOLS, "RENORM_SHIFT": 32 - cbk.PROB_BITS, "SYM_ZERO": cbk.SYM_ZERO, "SYM_ESC": cbk.SYM_ESC, "MAX_LANES": fmt.MAX_LANES,
        "family": cbk.FAMILY_VERSION, "format": fmt.FORMAT_VERSION, "KIND_CONST": fmt.KIND_CONST,
        "SIGN_STORED": fmt.SIGN_STORED, "SIGN_NEGATIVE": fmt.SIGN_NEGATIVE,
        "INTERFACE": _interface_constants(),
        "WINDOW": cbk.WINDOW, "WINDOW_LOW": cbk.WINDOW_LOW, "SYM_WINDOW0": cbk.SYM_WINDOW0, "ITEMSIZE": lay.itemsize,
        "MANMASK": (1 << lay.man_bits) - 1, "LOWMASK": (1 << (lay.man_bits - 1)) - 1,
        "MAGMASK": (1 << (8 * lay.itemsize - 1)) - 1,
    }


def _interface_constants() -> str:
    """The kernel rows' column indices (:mod:`codegen.rows`) and the chunk head's field offsets
    (:data:`codec.format.CHUNK_HEAD`) as members of the CUDA layout struct."""
    values = {**rows.constants(), **fmt.CHUNK_HEAD.constants()}
    return "\n".join(f"    static constexpr int {name} = {value};" for name, value in values.items())


def render(dialect: str, dtype: str, arch: str | None = None) -> tuple[str, str]:
    """``(file name, source)`` of one target."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; one of {DIALECTS}")
    if dialect == "cuda" and arch not in ARCHS:
        raise ValueError(f"CUDA needs an arch, one of {ARCHS}")
    template = (TEMPLATES / f"{dialect}_{_KIND[dialect]}{_EXT[dialect]}.tmpl").read_text()
    consts = constants(dtype)
    ident = "|".join([__version__, str(consts), arch or "", template] + [h.read_text() for h in HELPERS[dialect]])
    digest = hashlib.sha256(ident.encode()).hexdigest()[:12]
    name = f"{dialect}_{_KIND[dialect]}_{consts['dtype']}{'_' + arch if arch else ''}_{digest}"
    source = template.format(key=name, arch=arch or "any arch", **consts)
    return name + _EXT[dialect], source


def generate(dialect: str, dtype: str, arch: str | None = None, out_dir: Path | None = None) -> Path:
    """Write one target's source into ``out_dir`` (default: the cache) if it is not there already."""
    name, source = render(dialect, dtype, arch)
    out_dir = Path(out_dir) if out_dir is not None else cache_dir()
    path = out_dir / name
    if os.environ.get("ZIPCCL_CODEGEN_OFFLINE") == "1" and out_dir == cache_dir():
        if not path.exists():
            raise FileNotFoundError(f"{path} is not pre-generated and ZIPCCL_CODEGEN_OFFLINE=1 forbids generating it")
        return path
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        headers = [(out_dir / h.name, h.read_text()) for h in HELPERS[dialect] if h.suffix == ".cuh"]
        for target, text in [(path, source)] + headers:
            if not target.exists() or target.read_text() != text:
                tmp = target.with_suffix(target.suffix + ".tmp")
                tmp.write_text(text)
                tmp.replace(target)
    return path


def all_targets():
    for lay in LAYOUTS:
        yield "triton", lay.name, None
        for arch in ARCHS:
            yield "cuda", lay.name, arch


def _interpreter_scalars() -> None:
    """Triton's interpreter (``TRITON_INTERPRET=1``) before 3.7 turns a scalar tensor into a Python int
    with ``int(data)`` on a 1-element array, which NumPy 2.4 refuses ("only 0-dimensional arrays can
    be converted to Python scalars"): every ``range`` with a loaded bound failed under Triton 3.6.
    Later Triton squeezes first; so does this patch of the interpreter (the interpreter only: compiled
    kernels never see it).  A Triton without the patched function is left alone."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    orig = getattr(interpreter, "_patch_lang_tensor", None)
    if orig is None or getattr(orig, "zipccl_squeeze", False):
        return

    def patch_lang_tensor(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patch_lang_tensor.zipccl_squeeze = True
    interpreter._patch_lang_tensor = patch_lang_tensor


@functools.cache
def load_triton(dtype: str):
    """The generated Triton module for ``dtype`` (imported once per process)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        _interpreter_scalars()
    path = generate("triton", dtype)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compile_cuda(dtype: str, arch: str, *, output: str = "ptx") -> bytes:
    """Compile the generated CUDA kernels with NVRTC (no GPU needed); returns PTX or a cubin."""
    from cuda.bindings import nvrtc

    path = generate("cuda", dtype, arch)
    src = path.read_bytes()

    def check(result, what):
        err = result[0]
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"{what}: {err}")
        return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)

    headers = [path.parent / h.name for h in HELPERS["cuda"]]
    prog = check(nvrtc.nvrtcCreateProgram(src, path.name.encode(), len(headers), [h.read_bytes() for h in headers],
                                          [h.name.encode() for h in headers]), "nvrtcCreateProgram")
    opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17", b"-default-device"]
    if output == "ptx":
        opts[0] = f"--gpu-architecture=compute_{arch[3:]}".encode()
    result = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        size = check(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"NVRTC failed for {path.name}:\n{log.decode(errors='replace')}")
    if output == "ptx":
        size = check(nvrtc.nvrtcGetPTXSize(prog), "ptx size")
        data = b" " * size
        check(nvrtc.nvrtcGetPTX(prog, data), "ptx")
    else:
        size = check(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
        data = b" " * size
        check(nvrtc.nvrtcGetCUBIN(prog, data), "cubin")
    nvrtc.nvrtcDestroyProgram(prog)
    return data


ONE_WARP = ("enc_rans", "decode_coded_chunks", "dec_symbols")     # 32-lane vectors: one warp per program
GPU_BLOCK = 1024                                                  # values per vector of the other kernels


def triton_signatures(dtype: str) -> dict:
    """Argument types of every generated Triton kernel for ``dtype`` (and the constexpr values a
    GPU launch uses), for compiling them ahead of time (:func:`compile_triton`)."""
    w = "*u" + str(8 * layout_for(dtype).itemsize)
    p8, p64, q = "*u8", "*i64", "i64"
    return {
        "decode_coded_chunks": ({"buf": p8, "meta": p64, "tables": p64, "hi": p64, "nzb": p64, "out": w,
                                 "err": "*i32"}, {}),
        "enc_stats": ({"words": w, "n_total": q, "cs": q, "stats": p64, "nz16": p8, "nz64": p8, "nb16": q,
                       "nb64": q, "BLOCK": "constexpr"}, {"BLOCK": GPU_BLOCK}),
        "enc_rans": ({"words": w, "rows": p64, "freq": p64, "cum": p64, "nzb": p64, "counts": p64,
                      "scratch": p8}, {}),
        "enc_place": ({"rows": p64, "scratch": p8, "out": p8, "BLOCK": "constexpr"}, {"BLOCK": GPU_BLOCK}),
        "enc_planes": ({"words": w, "rows": p64, "freq": p64, "nzb": p64, "out": p8, "scratch": p8,
                        "BLOCK": "constexpr"}, {"BLOCK": GPU_BLOCK}),
        "enc_copy": ({"words": w, "rows": p64, "out": p8, "BLOCK": "constexpr"}, {"BLOCK": GPU_BLOCK}),
        "dec_copy": ({"buf": p8, "rows": p64, "out": w, "BLOCK": "constexpr"}, {"BLOCK": GPU_BLOCK}),
        "dec_symbols": ({"buf": p8, "meta": p64, "tables": p64, "sym": p8, "sym_at": p64, "err": "*i32"}, {}),
        "dec_values": ({"buf": p8, "meta": p64, "hi": p64, "nzb": p64, "sym": p8, "sym_at": p64, "out": w,
                        "err": "*i32", "BLOCK": "constexpr"}, {"BLOCK": GPU_BLOCK}),
    }


def compile_triton(dtype: str, arch: str, kernels=None) -> dict:
    """Compile the generated Triton kernels of ``dtype`` for ``arch`` with Triton's own compiler, no GPU
    needed (the interpreter runs them, this proves the GPU compiler takes them); ``{kernel: cubin bytes}``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}")
    mod = load_triton(layout_for(dtype).name)
    out = {}
    for name, (signature, constexprs) in triton_signatures(dtype).items():
        if kernels is not None and name not in kernels:
            continue
        src = ASTSource(fn=getattr(mod, name), signature=signature, constexprs=constexprs)
        compiled = triton.compile(src, target=GPUTarget("cuda", int(arch[3:]), 32),
                                  options={"num_warps": 1} if name in ONE_WARP else {})
        out[name] = len(compiled.asm["cubin"])
    return out


_CUDA_ENTRY = re.compile(r'extern "C" __global__ void __launch_bounds__\((\d+)\)\s*(\w+)\(([^)]*)\)')


def cuda_entry_points(source: str) -> dict:
    """``{name: (threads per block, [parameter declarations], kinds)}`` of a generated CUDA file's
    kernels, read from the source itself; kinds: one letter a parameter, p pointer, q int64, i int32."""
    plain = re.sub(r"//[^\n]*", "", source)
    out = {}
    for bounds, name, params in _CUDA_ENTRY.findall(plain):
        decls = [" ".join(p.split()) for p in params.split(",")]
        kinds = "".join("p" if "*" in d else "q" if d.startswith("i64 ") else "i" for d in decls)
        out[name] = (int(bounds), decls, kinds)
    return out
