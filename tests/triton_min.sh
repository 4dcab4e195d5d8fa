#!/usr/bin/env bash
# The Triton kernels (interpreter: bit-exact against the reference; compiler: cubins for the GPU) once more
# under the oldest Triton the project declares (pyproject.toml: triton>=X), installed into a folder of its
# own that shadows the current one; then bench/gpu_check.sh --dry-run under it (the GPU machine's Triton).
#   bash tests/triton_min.sh
set -euo pipefail
cd "$(dirname "$0")/.."
min=$(python - <<'PY'
import re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]
found = {m.group(1) for reqs in deps.values() for r in reqs for m in [re.fullmatch(r"triton>=([\d.]+)", r)] if m}
assert len(found) == 1, f"pyproject.toml declares triton minimums {found or 'nowhere'}"
print(found.pop())
PY
)
dir=$(mktemp -d -t "zipccl-triton-$min.XXXXXX")
python -m pip install -q --no-deps --target "$dir" "triton==$min"
export PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}"
python -c "import triton, sys; v, m = triton.__version__, '$min'; sys.exit(0 if v == m or v.startswith(m + '.') else f'shadowing failed: triton {v}')"
echo "== Triton $min (oldest declared): tests/test_codegen.py -k 'triton or device'"
ZIPCCL_CODEGEN_CACHE="$dir/codegen" python -m pytest -q -p no:cacheprovider tests/test_codegen.py -k "triton or device"
echo "== GPU check, dry run (no device), under Triton $min"
ZIPCCL_CODEGEN_CACHE="$dir/codegen" PYTHON=python bash bench/gpu_check.sh --dry-run "$dir/gpu-dry"
rm -rf "$dir"
