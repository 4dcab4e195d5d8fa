"""Do two checkouts compile the numba kernels to the same machine code?

    python -m bench.kernel_asm OLD_CHECKOUT NEW_CHECKOUT      # e.g. a `git worktree add` of each commit

Each checkout's kernels (the decoder of bfloat16, float16 and float32, and the encoder's window kernel)
are compiled in a fresh process with an empty numba cache (cached code cannot be inspected) and their
assembly compared after removing what names, not code, differ in: mangled symbol names, local labels,
the names of constant strings and comments.  Same instructions = same speed, whatever a noisy shared
machine's timings say.  Prints one line per kernel; exit status 1 if any differs.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

_DUMP = r'''
import re, sys
import numpy as np
import codec
from codec import _numba
from codec.layouts import LAYOUTS
for lay in LAYOUTS[:3]:
    x = np.random.default_rng(0).normal(0, 1, 70000).astype(lay.numpy_dtype)
    codec.decode(codec.encode(x, chunk_size=16384, backend="numba"), backend="numba")
    k = _numba._decoder(lay)
    open(f"{sys.argv[1]}/decode-{lay.name}.s", "w").write(k.inspect_asm(k.signatures[0]))
for i, sig in enumerate(_numba._encode_window.signatures):
    open(f"{sys.argv[1]}/encode-window-{i}.s", "w").write(_numba._encode_window.inspect_asm(sig))
'''


def _normalise(asm: str) -> str:
    asm = re.sub(r"#.*|\.file.*|\.ident.*", "", asm)
    asm = re.sub(r"_ZN[0-9A-Za-z_$]+", "SYM", asm)
    asm = re.sub(r"\.L[A-Za-z_0-9$]+", "LABEL", asm)
    return re.sub(r'"?\.bytes\.-?[0-9]+"?', "BYTES", asm)


def _dump(checkout: Path, out: Path) -> None:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(out / "numba-cache"), PYTHONPATH=str(checkout))
    subprocess.run([sys.executable, "-W", "ignore", "-c", _DUMP, str(out)], cwd=checkout, env=env, check=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        outs = []
        for i, checkout in enumerate(argv):
            out = Path(tmp) / str(i)
            out.mkdir()
            _dump(Path(checkout).resolve(), out)
            outs.append(out)
        same = True
        for f in sorted(outs[0].glob("*.s")):
            a, b = _normalise(f.read_text()), _normalise((outs[1] / f.name).read_text())
            lines = sum(1 for x, y in zip(a.splitlines(), b.splitlines()) if x != y) + abs(
                len(a.splitlines()) - len(b.splitlines()))
            same &= lines == 0
            print(f"{f.stem}: {len(a.splitlines())} lines, {'identical' if lines == 0 else f'{lines} lines differ'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
