#!/usr/bin/env bash
# GPU check for a machine with a CUDA GPU: bash bench/gpu_check.sh RESULTS_DIR
# Installs the project (and any wheels placed in bench/wheels/), runs the GPU-marked tests and
# bench/gpu_check.py, and writes everything into RESULTS_DIR.  Meant to finish well under 8 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-results}"
mkdir -p "$out"
python3 -m venv .gpu-venv
. .gpu-venv/bin/activate
pip install -q --upgrade pip
if ls bench/wheels/*.whl >/dev/null 2>&1; then pip install -q bench/wheels/*.whl; fi
python -c "import torch" 2>/dev/null || pip install -q torch
pip install -q -e '.[test,gpu]'
python -m pytest -q tests/test_codegen.py 2>&1 | tee "$out/pytest.txt"
python -m bench.gpu_check "$out" 2>&1 | tee "$out/gpu_check.txt"
