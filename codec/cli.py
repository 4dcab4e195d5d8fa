"""Command line tool: ``zipccl`` / ``python -m codec``.

::

    python -m codec compress   IN [OUT]   # .safetensors, .npy, or raw words with --dtype NAME
    python -m codec decompress IN [OUT]   # byte-identical original file
    python -m codec inspect    IN         # an archive (ZCAR) or a bare codec stream (ZCCL)

``compress`` writes ``OUT`` (default ``IN.zcar``), an archive (:mod:`codec.archive`: the format, and
what becomes of each input kind) that ``decompress`` turns back into a byte-identical copy of ``IN``.
Input kinds (``--format``, else by extension, else by sniffing; any file with ``--dtype`` and an
unknown extension is raw): ``.safetensors``; ``.npy`` (``--dtype`` says how to read 1- or 2-byte
void data, which is how NumPy saves ``ml_dtypes`` arrays); raw words (``--dtype NAME``, one of
:data:`codec.SUPPORTED`).

This module is the command line only: options, paths, messages, progress bars and the printed
summaries; it calls :mod:`codec.archive` to plan, write, read and check archives.

Exit status: 0 success; 1 corrupted or invalid data (:class:`codec.FormatError`: a damaged
archive or stream, a malformed input file) or an I/O failure; 2 usage errors (bad option,
missing or unreadable file).
"""
from __future__ import annotations

import argparse
import json
import math
import mmap
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from . import archive, safefile
from . import format as fmt
from ._version import __version__
from .api import DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_SIZE_F8, DEFAULT_CHUNK_SIZE_F32, inspect as _inspect_stream
from .archive import (ARCHIVE_MAGIC, ARCHIVE_VERSION, INPUT_BY_NAME, INPUT_NAMES, INPUT_RAW, INPUT_SAFETENSORS,
                      NPY_VOID_LAYOUTS)
from .atomic import atomic_write
from .format import FormatError
from .layouts import SUPPORTED, FloatLayout, layout_named

__all__ = ["main", "compress_file", "decompress_file", "inspect_file", "ARCHIVE_MAGIC", "ARCHIVE_VERSION"]


class UsageError(Exception):
    """A user error (bad option or file): reported without a traceback, exit status 2."""


# --------------------------------------------------------------------------- helpers
def parse_dtype(name: str) -> FloatLayout:
    """A layout from a dtype name or alias (``bfloat16``, ``bf16``, ``BF16``, ``fp8_e4m3``...)."""
    lay = layout_named(name)
    if lay is None:
        raise UsageError(f"unsupported --dtype {name!r}: choose one of {', '.join(SUPPORTED)}")
    return lay


def _fmt_shape(shape) -> str:
    if shape is None:
        return "-"
    return "(" + ", ".join(str(int(s)) for s in shape) + ("," if len(shape) == 1 else "") + ")"


class _Bar:
    """A tqdm progress bar as :func:`codec.archive.write` and :func:`codec.archive.rebuild` report to it."""

    def __init__(self, bar):
        self._bar = bar

    def entry(self, name: str) -> None:
        self._bar.set_postfix_str(name[-40:], refresh=True)

    def update(self, nbytes: int) -> None:
        self._bar.update(nbytes)

    def close(self) -> None:
        self._bar.close()


def _progress(total: int, desc: str, enabled: bool) -> _Bar | None:
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return _Bar(tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, leave=False,
                     dynamic_ncols=True))


def _size_arg(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = 1
    if t and t[-1] in "KMGT":
        mult, t = 1024 ** ("KMGT".index(t[-1]) + 1), t[:-1]
    try:
        v = int(float(t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (a number of bytes, with K, M, G or T)") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"size must be >= 0, got {text!r}")
    return v


# --------------------------------------------------------------------------- compress
def _input_kind(path: str, fmt_opt: str | None, has_dtype: bool) -> int:
    if fmt_opt:
        return INPUT_BY_NAME[fmt_opt]
    kind = archive.detect_input(path, raw_if_unknown=has_dtype)
    if kind is None:
        raise UsageError(f"cannot tell what {path} holds: name it .safetensors or .npy, pass --format, "
                         f"or pass --dtype NAME for raw words")
    return kind


def _conflict_message(e: archive.LayoutConflict) -> str:
    forced, dtype = e.forced, e.dtype
    if dtype.kind == "V":
        return (f"--dtype {forced.name} ({forced.itemsize} bytes) does not match the "
                f"npy dtype {dtype.str} ({dtype.itemsize} bytes)")
    return f"--dtype {forced.name} contradicts the npy dtype {dtype.name}"


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _check_paths(src: str, dst: str) -> None:
    if not os.path.exists(src):
        raise FileNotFoundError(2, "No such file or directory", src)
    if not os.path.isfile(src):
        raise UsageError(f"{src}: not a regular file")
    if os.path.isdir(dst):
        raise UsageError(f"{dst}: is a directory (give the output file's name)")
    if not os.path.isdir(os.path.dirname(os.path.abspath(dst))):
        raise UsageError(f"{dst}: its directory does not exist")
    if _same_file(src, dst):
        raise UsageError(f"output {dst} is the input file")


def compress_file(src: str, dst: str, *, dtype: str | None = None, input_format: str | None = None,
                  chunk_size: int | None = None, checksum: bool = False, progress: bool = False) -> dict:
    """Compress ``src`` into the archive ``dst``; returns a summary dict (see :func:`main`)."""
    _check_paths(src, dst)
    forced = parse_dtype(dtype) if dtype is not None else None
    kind = _input_kind(src, input_format, forced is not None)
    if kind == INPUT_RAW and forced is None:
        raise UsageError("raw input needs --dtype NAME (one of " + ", ".join(SUPPORTED) + ")")
    if kind == INPUT_SAFETENSORS and forced is not None:
        raise UsageError("--dtype does not apply to safetensors files (their header names the dtypes)")
    size = os.path.getsize(src)
    stats = {"input": src, "output": dst, "kind": INPUT_NAMES[kind], "original_nbytes": size, "tensors": []}
    with open(src, "rb") as f:
        try:
            meta, pieces = archive.plan(f, size, kind, forced)
        except archive.LayoutConflict as e:
            raise UsageError(_conflict_message(e)) from None
        bar = _progress(size, os.path.basename(src), progress)
        try:
            with atomic_write(dst) as out:
                stats["tensors"] = archive.write(f, out, kind, size, meta, pieces, chunk_size=chunk_size,
                                                 checksum=checksum, progress=bar)
                stats["archive_nbytes"] = out.tell()
        finally:
            if bar is not None:
                bar.close()
    stats.update(archive.totals(stats["tensors"], size, stats["archive_nbytes"]))
    return stats


# --------------------------------------------------------------------------- decompress
class _Mapped:
    """Read-only mmap of a whole file (a zero-length file maps to ``b""``)."""

    def __init__(self, path: str):
        self._f = open(path, "rb")
        size = os.fstat(self._f.fileno()).st_size
        self._mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        self.mv = memoryview(self._mm) if self._mm is not None else memoryview(b"")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.mv.release()
            if self._mm is not None:
                self._mm.close()
        except BufferError:      # a view still exported (e.g. held by a traceback): the GC unmaps it
            pass
        self._f.close()


def _refuse_oversize(what: str, nbytes: int, max_size: int | None) -> None:
    if max_size is not None and nbytes > max_size:
        raise FormatError(f"{what} decompresses to {nbytes:,} bytes, more than --max-size {max_size:,}")


def decompress_file(src: str, dst: str, *, progress: bool = False, max_size: int | None = None) -> dict:
    """Rebuild the original file from the archive ``src`` (or the raw words of a bare stream).
    ``max_size``: refuse (FormatError) an output larger than this many bytes before writing any."""
    _check_paths(src, dst)
    with _Mapped(src) as m:
        mv = m.mv
        if bytes(mv[:4]) == fmt.MAGIC:
            h = archive.stream_header(mv, os.path.basename(src))
            _refuse_oversize(src, h.numel * h.layout.itemsize, max_size)
            return _decompress_stream(mv, src, dst)
        arc = archive.parse_archive(mv)
        _refuse_oversize(src, arc.size, max_size)
        archive_nbytes = len(mv)
        bar = _progress(arc.size, os.path.basename(dst), progress)
        try:
            with atomic_write(dst) as out:
                archive.rebuild(mv, arc, out, progress=bar)
        finally:
            if bar is not None:
                bar.close()
    return {"input": src, "output": dst, "kind": INPUT_NAMES[arc.input], "original_nbytes": arc.size,
            "archive_nbytes": archive_nbytes, "n_entries": len(arc.entries)}


def _decompress_stream(mv, src: str, dst: str) -> dict:
    h, words = archive.stream_words(mv, os.path.basename(src))
    with atomic_write(dst) as out:
        out.write(memoryview(words.view(np.uint8)))
    return {"input": src, "output": dst, "kind": "stream", "original_nbytes": words.nbytes,
            "archive_nbytes": len(mv), "n_entries": 1, "dtype": h.layout.name, "shape": h.shape}


# --------------------------------------------------------------------------- inspect
def inspect_file(path: str) -> dict:
    """Facts about an archive (every entry) or a bare codec stream, without decompressing."""
    if not os.path.exists(path):
        raise FileNotFoundError(2, "No such file", path)
    with _Mapped(path) as m:
        mv = m.mv
        if bytes(mv[:4]) == fmt.MAGIC:
            info = _inspect_stream(mv)
            info["type"] = "stream"
            info["chunk_kinds"] = dict(Counter(c["kind"] for c in info["chunks"]))
            return info
        if bytes(mv[:4]) != ARCHIVE_MAGIC:
            raise FormatError(f"{path} is neither a zipccl archive (magic {ARCHIVE_MAGIC!r}) nor a "
                              f"zipccl stream (magic {fmt.MAGIC!r})")
        return archive.describe(mv)


# --------------------------------------------------------------------------- printing
def _print_summary(s: dict, out) -> None:
    print(f"{s['input']} ({s['kind']}) -> {s['output']}: {s['original_nbytes']:,} -> {s['archive_nbytes']:,} bytes, "
          f"ratio {s['ratio']:.3f}x", file=out)
    if s["float_values"]:
        print(f"  float tensors: {s['float_values']:,} values, {s['float_raw_nbytes']:,} -> {s['float_nbytes']:,} "
              f"bytes (ratio {s['float_ratio']:.3f}x): {s['bits_per_value']:.3f} bits/value, "
              f"exponent-entropy bound {s['entropy_bound_bits']:.3f} bits/value", file=out)
    stored = [r for r in s["tensors"] if not r["filler"] and not r.get("compressed")]
    n = s["n_tensors"]
    print(f"  {n} tensor{'s' if n != 1 else ''}: {s['n_compressed']} compressed, {len(stored)} stored; "
          f"{s['stored_nbytes']:,} bytes kept as they are (stored tensors and padding)", file=out)


def _fmt_bits(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def _print_inspect(path: str, info: dict, out) -> None:
    if info["type"] == "stream":
        print(f"{path}: zipccl stream (format v{info['format_version']})", file=out)
        print(f"  dtype {info['dtype']}, shape {_fmt_shape(info['shape'])}, {info['numel']:,} values", file=out)
        print(f"  {info['n_chunks']:,} chunks of {info['chunk_size']:,} values, checksum "
              f"{'yes' if info['checksum'] else 'no'}, header {info['header_nbytes']:,} bytes", file=out)
        print(f"  {info['raw_nbytes']:,} -> {info['nbytes']:,} bytes: ratio {info['ratio']:.3f}x, "
              f"{info['bits_per_value']:.3f} bits/value", file=out)
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(info["chunk_kinds"].items())) or "none"
        print(f"  chunk kinds: {kinds}", file=out)
        rep = info.get("row_repeats")
        if rep:
            print(f"  row repeats: {rep['rows']:,} rows of {rep['row_values']:,} values repeat earlier rows "
                  f"({rep['nbytes']:,} bytes)", file=out)
        filt = info.get("row_filter")
        if filt:
            print(f"  row filter: {filt['filter']} over rows of {filt['row_values']:,} values in {filt['chunks']:,} "
                  f"chunks ({filt['nbytes']:,} bytes)", file=out)
        return
    print(f"{path}: zipccl archive v{info['version']} of a {info['kind']} file", file=out)
    print(f"  {info['original_nbytes']:,} -> {info['archive_nbytes']:,} bytes: ratio {info['ratio']:.3f}x; "
          f"metadata {info['metadata_nbytes']:,} bytes; CRC32C {info['crc32c']:#010x}", file=out)
    if info.get("metadata") is not None:
        print(f"  __metadata__: {json.dumps(info['metadata'])}", file=out)
    if info["float_values"]:
        print(f"  float tensors: {info['float_values']:,} values, {info['bits_per_value']:.3f} bits/value, "
              f"exponent-entropy bound {info['entropy_bound_bits']:.3f} bits/value", file=out)
    rows = info["entries"]
    table = [("name", "dtype", "shape", "bytes", "stored", "ratio", "bits/value", "bound", "chunks")]
    for r in rows:
        if r["compressed"]:
            chunks = " ".join(f"{k}:{v}" for k, v in r["chunk_kinds"].items())
        else:
            chunks = "padding" if r["filler"] else "stored"
        table.append((r["name"], str(r["dtype"] or "-"), _fmt_shape(r["shape"]), f"{r['raw_nbytes']:,}",
                      f"{r['nbytes']:,}", f"{r['ratio']:.3f}", _fmt_bits(r["bits_per_value"]),
                      _fmt_bits(r["bound_bits"]), chunks))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    right = {3, 4, 5, 6, 7}
    for row in table:
        print("  " + "  ".join(c.rjust(w) if i in right else c.ljust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip(), file=out)


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, tuple):
        return list(o)
    return str(o)


def _json_clean(o):
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _json_clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_json_clean(v) for v in o]
    return o


# --------------------------------------------------------------------------- argparse
def _chunk_size(s: str) -> int:
    try:
        v = int(s, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {s!r}") from None
    if not 1 <= v <= fmt.MAX_CHUNK_SIZE:
        raise argparse.ArgumentTypeError(f"must be in [1, {fmt.MAX_CHUNK_SIZE}], got {v}")
    return v


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zipccl", description="Lossless compression of float tensor files "
                                "(.safetensors, .npy, raw words).")
    p.add_argument("--version", action="version", version=f"zipccl {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    c = sub.add_parser("compress", help="compress a .safetensors, .npy or raw file into an archive")
    c.add_argument("input", metavar="IN")
    c.add_argument("output", metavar="OUT", nargs="?", help="archive to write (default: IN.zcar)")
    c.add_argument("--dtype", metavar="NAME", help=f"dtype of raw input words ({', '.join(SUPPORTED)}); "
                   "for .npy: how to read 1- or 2-byte void data (default "
                   f"{NPY_VOID_LAYOUTS[2].name} / {NPY_VOID_LAYOUTS[1].name})")
    c.add_argument("--format", dest="input_format", choices=tuple(INPUT_NAMES.values()),
                   help="input kind (default: from the extension; raw if --dtype is given)")
    c.add_argument("--chunk-size", type=_chunk_size, default=None, metavar="N",
                   help=f"values per independently decodable chunk (default {DEFAULT_CHUNK_SIZE}, "
                        f"{DEFAULT_CHUNK_SIZE_F32} for float32, {DEFAULT_CHUNK_SIZE_F8} for float8)")
    c.add_argument("--checksum", action="store_true", help="store CRC32C checksums in every tensor stream")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary")
    c.add_argument("--json", action="store_true", help="print the summary as JSON")

    d = sub.add_parser("decompress", help="rebuild the original file from an archive")
    d.add_argument("input", metavar="IN")
    d.add_argument("output", metavar="OUT", nargs="?", help="file to write (default: IN without .zcar)")
    d.add_argument("--max-size", type=_size_arg, default=None, metavar="BYTES",
                   help="refuse an output larger than this (suffixes K, M, G, T: powers of 1024), before "
                        "writing or allocating anything")
    d.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary")

    for name, what in (("compress-dir", "compress a model directory: every *.safetensors shard to a "
                        "*.zcc.safetensors file (loadable with codec.load_file), the shard index rewritten, other "
                        "files copied"),
                       ("decompress-dir", "give back the original model directory of compress-dir, byte for byte")):
        x = sub.add_parser(name, help=what)
        x.add_argument("input", metavar="IN_DIR")
        x.add_argument("output", metavar="OUT_DIR")
        if name == "compress-dir":
            x.add_argument("--no-checksum", dest="checksum", action="store_false",
                           help="leave out the CRC32C of every chunk and stored tensor")
        x.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary")
        x.add_argument("--json", action="store_true", help="print the summary as JSON")

    i = sub.add_parser("inspect", help="describe an archive (every tensor) or a bare zipccl stream")
    i.add_argument("input", metavar="IN")
    i.add_argument("--json", action="store_true", help="print the facts as JSON")
    i.add_argument("-q", "--quiet", action="store_true", help="(accepted for symmetry; inspect prints anyway)")
    return p


def _cmd_compress(a) -> int:
    dst = a.output or a.input + ".zcar"
    s = compress_file(a.input, dst, dtype=a.dtype, input_format=a.input_format, chunk_size=a.chunk_size,
                      checksum=a.checksum, progress=not a.quiet and sys.stderr.isatty())
    if a.json:
        print(json.dumps(_json_clean(s), default=_json_default, indent=1))
    elif not a.quiet:
        _print_summary(s, sys.stdout)
    return 0


def _cmd_decompress(a) -> int:
    dst = a.output
    if dst is None:
        if not a.input.endswith(".zcar") or len(a.input) == len(".zcar"):
            raise UsageError("give OUT: the default output is IN without its .zcar suffix")
        dst = a.input[: -len(".zcar")]
    s = decompress_file(a.input, dst, progress=not a.quiet and sys.stderr.isatty(), max_size=a.max_size)
    if not a.quiet:
        print(f"{s['input']} -> {s['output']}: {s['archive_nbytes']:,} -> {s['original_nbytes']:,} bytes "
              f"({s['kind']})")
    return 0


def _cmd_dir(a) -> int:
    if a.output and Path(a.output).resolve() == Path(a.input).resolve():
        raise UsageError("OUT_DIR must differ from IN_DIR")
    bar = None
    if not a.quiet and sys.stderr.isatty():
        try:
            from tqdm import tqdm

            total = sum(1 for p in Path(a.input).rglob("*") if p.is_file())
            bar = tqdm(total=total, unit="file", desc=a.command, leave=False)
        except ImportError:
            pass

    def progress(rel):
        if bar is not None:
            bar.set_postfix_str(str(rel)[-40:])
            bar.update(1)

    try:
        if a.command == "compress-dir":
            shards = safefile.compress_dir(a.input, a.output, checksum=a.checksum, progress=progress)
        else:
            shards = safefile.decompress_dir(a.input, a.output, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    if a.json:
        print(json.dumps(shards, indent=1))
    elif not a.quiet:
        for sh in shards:
            print(f"{sh['name']}: {sh['size']:,} -> {sh['compressed']:,} bytes, "
                  f"ratio {sh['size'] / max(1, sh['compressed']):.3f}")
        size, comp = sum(sh["size"] for sh in shards), sum(sh["compressed"] for sh in shards)
        print(f"{len(shards)} shard(s): {size:,} -> {comp:,} bytes, ratio {size / max(1, comp):.3f}")
    return 0


def _cmd_inspect(a) -> int:
    info = inspect_file(a.input)
    if a.json:
        if info["type"] == "stream":
            info = {k: v for k, v in info.items() if k != "chunks"} | {"chunks": info["chunks"]}
        print(json.dumps(_json_clean(info), default=_json_default, indent=1))
    else:
        _print_inspect(a.input, info, sys.stdout)
    return 0


def main(argv=None) -> int:
    """Entry point of ``zipccl`` and ``python -m codec``; returns the exit status."""
    parser = _build_parser()
    try:
        a = parser.parse_args(argv)
    except SystemExit as e:          # --help, --version (0) and usage errors (2)
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    cmd = {"compress": _cmd_compress, "decompress": _cmd_decompress, "inspect": _cmd_inspect,
           "compress-dir": _cmd_dir, "decompress-dir": _cmd_dir}[a.command]
    try:
        return cmd(a)
    except UsageError as e:
        print(f"zipccl {a.command}: error: {e}", file=sys.stderr)
        return 2
    except FormatError as e:
        print(f"zipccl {a.command}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 1
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as e:
        print(f"zipccl {a.command}: error: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"zipccl {a.command}: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"zipccl {a.command}: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print(f"zipccl {a.command}: error: out of memory (for a stream's declared size, see decompress "
              "--max-size)", file=sys.stderr)
        return 1
