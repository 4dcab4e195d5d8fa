#!/usr/bin/env bash
# GPU check for a machine with a CUDA GPU: bash bench/gpu_check.sh RESULTS_DIR
# Uses the machine's python3 (with torch, triton, cuda-core, ml_dtypes, pytest, numba: a CUDA image has
# them; numba only for the CPU side of the comparisons); what it lacks comes from the wheels in bench/wheels (bench/fetch_wheels.sh downloads them on
# a machine with pip access: crc32c, nvCOMP, DFloat11), installed offline into a scratch folder.
# Runs the GPU tests, then bench/gpu_check.py; everything lands in RESULTS_DIR.  About 5-8 minutes.
# Through this workplace's device tool: run `bash bench/fetch_wheels.sh` here first, then
#   run(command="bash bench/gpu_check.sh $OUT/gpu", carry=["bench/wheels"], timeout_s=540)
# --dry-run (any machine, no GPU; run in CI): everything but the device: argument handling, the wheels'
# installation, the imports, collecting the GPU tests, generating every kernel, the result files.
set -euo pipefail
cd "$(dirname "$0")/.."
dry=0
if [ "${1:-}" = "--dry-run" ]; then
  dry=1
  shift
fi
out="${1:-gpu-results}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-python3}
site=$(mktemp -d -t zipccl-site.XXXXXX)
if ls bench/wheels/*.whl >/dev/null 2>&1; then
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    bench/wheels/*.whl 2>&1 | tee "$out/wheels.txt"
  export PYTHONPATH="$PYTHONPATH:$site"
fi
if [ "$dry" -eq 1 ]; then
  set +e
  $py -m pytest -q --collect-only -m gpu tests/test_gpu.py -p no:cacheprovider >"$out/pytest.txt" 2>&1
  collect=$?
  $py -m bench.gpu_check --dry-run "$out" 2>&1 | tee "$out/gpu_check.txt"
  check=${PIPESTATUS[0]}
  echo "dry run: collecting the gpu tests: exit $collect; gpu check: exit $check" | tee -a "$out/gpu_check.txt"
  [ "$collect" -eq 0 ] && [ "$check" -eq 0 ]
  exit
fi
if ! $py -c "import crc32c, ml_dtypes, torch, triton, cuda.core" 2>"$out/imports.txt"; then
  echo "missing packages (see $out/imports.txt); trying pip" >&2
  $py -m pip install -q crc32c ml_dtypes cuda-python || { cat "$out/imports.txt"; exit 2; }
fi
$py -c "import numba; print('numba', numba.__version__)" >>"$out/imports.txt" 2>&1 || true
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
set +e
# one command under 8 minutes in all: the tests get at most 300 s (on a fresh H200 machine they ran
# 150 s into 40 of 63 before timing out: numba and Triton compile everything first; warm, 18 s), the
# check what is left of ZIPCCL_GPU_TOTAL_S (460 s; its optional parts stop at ZIPCCL_GPU_BUDGET_S; the
# timeout is the hard stop behind it)
total=${ZIPCCL_GPU_TOTAL_S:-460}
timeout 300 $py -m pytest -q -x -m gpu tests/test_gpu.py -p no:cacheprovider 2>&1 | tee "$out/pytest.txt"
tests=${PIPESTATUS[0]}
left=$((total - SECONDS))
ZIPCCL_GPU_BUDGET_S=$((left - 40)) timeout "$left" $py -m bench.gpu_check "$out" 2>&1 | tee "$out/gpu_check.txt"
check=${PIPESTATUS[0]}
# where the end-to-end time goes beyond the kernels (bench/gpu_profile.py), if the budget leaves a minute
if [ $((total - SECONDS)) -ge 60 ]; then
  timeout $((total - SECONDS)) $py -m bench.gpu_profile "$out/profile" 2>&1 | tail -20 | tee -a "$out/gpu_check.txt"
fi
echo "gpu check script: ${SECONDS} s in all" | tee -a "$out/gpu_check.txt"
echo "gpu tests: exit $tests; gpu check: exit $check" | tee -a "$out/gpu_check.txt"
[ "$tests" -eq 0 ] && [ "$check" -eq 0 ]
