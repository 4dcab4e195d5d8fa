#!/usr/bin/env bash
# The codec's tests with the numba kernels compiled for other x86-64 CPUs than this one:
#   bash tests/isa.sh            # haswell (AVX2, no AVX-512) and x86-64 (SSE2 only); with AVX-512 VBMI2
#                                # here, this host again with the other stream-move variant
#   bash tests/isa.sh haswell:avx2
# Each target gets its own numba cache (NUMBA_CPU_NAME with empty NUMBA_CPU_FEATURES: the named CPU's
# features, not this host's); tests/test_simd.py checks from the compiled code that the target took.
set -euo pipefail
cd "$(dirname "$0")/.."
TESTS="tests/test_roundtrip.py tests/test_golden.py tests/test_simd.py tests/test_planes.py tests/test_bad_input.py"
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(haswell:avx2 x86-64:sse2)
for t in "${targets[@]}"; do
  cpu=${t%%:*}
  isa=${t##*:}
  cache=$(mktemp -d -t "zipccl-numba-$cpu.XXXXXX")
  echo "== numba kernels compiled for $cpu ($isa)"
  NUMBA_CPU_NAME=$cpu NUMBA_CPU_FEATURES="" NUMBA_CACHE_DIR=$cache ZIPCCL_EXPECT_ISA=$isa \
    python -m pytest -q -p no:cacheprovider -m "not gpu and not slow" $TESTS
  rm -rf "$cache"
done
# on a host with AVX-512 VBMI2 the kernels move stream words with the register forms of
# vpexpandw/vpcompressw (codec._simd.STREAM_MOVES); the memory forms, the other variant, once more here
if [ $# -eq 0 ] && python -c "import sys; from codec._simd import _target_features as f; sys.exit('+avx512vbmi2' not in f().split(','))"; then
  cache=$(mktemp -d -t "zipccl-numba-memory.XXXXXX")
  echo "== numba kernels for this host, stream moves in their memory forms"
  NUMBA_CACHE_DIR=$cache ZIPCCL_STREAM_MOVES=memory python -m pytest -q -p no:cacheprovider -m "not gpu and not slow" $TESTS
  rm -rf "$cache"
fi
