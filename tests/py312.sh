#!/usr/bin/env bash
# The codec's core once more under Python 3.12 (the GPU machine's Python): numba compiles the kernels
# from 3.12's bytecode, and the reference, format, golden-stream, bad-input, SIMD and layer tests run
# against them, in a virtual environment of its own without torch (whose Linux wheels for 3.12 are
# multi-GB CUDA builds).  The whole suite under 3.12 with the GPU image's stack (torch 2.11, triton 3.6,
# cuda-core, CuPy 14) is run by hand: bench/results/python312.md.
#   bash tests/py312.sh
set -euo pipefail
cd "$(dirname "$0")/.."
py=""
for cand in "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12 python3.12; do
  if "$cand" -c "import sys; assert sys.version_info[:2] == (3, 12)" 2>/dev/null; then py=$cand; break; fi
done
if [ -z "$py" ]; then
  echo "== Python 3.12: NOT RUN, no python3.12 on this machine" >&2
  exit 0
fi
dir=$(mktemp -d -t zipccl-py312.XXXXXX)
"$py" -m venv "$dir/venv"
"$dir/venv/bin/python" -m pip install -q --upgrade pip
"$dir/venv/bin/python" -m pip install -q -e . pytest pytest-xdist hypothesis scipy
echo "== $("$dir/venv/bin/python" --version): codec core tests"
NUMBA_CACHE_DIR="$dir/numba" "$dir/venv/bin/python" -m pytest -q -n auto -p no:cacheprovider tests/test_golden.py \
  tests/test_bad_input.py tests/test_model.py tests/test_records.py tests/test_layers.py tests/test_simd.py
rm -rf "$dir"
