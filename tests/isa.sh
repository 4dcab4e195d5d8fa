#!/usr/bin/env bash
# The codec's tests with the numba kernels compiled for other x86-64 CPUs than this one:
#   bash tests/isa.sh            # haswell (AVX2, no AVX-512) and x86-64 (SSE2 only); with AVX-512 VBMI/VBMI2
#                                # here, this host again with the other stream-move and table-lookup variants
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
# vpexpandw/vpcompressw (codec._simd.STREAM_MOVES), and with VBMI they read the small per-chunk tables
# by permutes (codec._simd.TABLE_LOOKUPS); the other forms (memory moves, gathers) once more here
if [ $# -eq 0 ]; then
  other=$(python -c "
from codec._simd import _target_features as f
feats = f().split(',')
print(('ZIPCCL_STREAM_MOVES=memory ' if '+avx512vbmi2' in feats else '') + ('ZIPCCL_TABLE_LOOKUPS=gather' if '+avx512vbmi' in feats else ''))")
  if [ -n "$other" ]; then
    cache=$(mktemp -d -t "zipccl-numba-other.XXXXXX")
    echo "== numba kernels for this host, the other variants: $other"
    env $other NUMBA_CACHE_DIR=$cache python -m pytest -q -p no:cacheprovider -m "not gpu and not slow" $TESTS
    rm -rf "$cache"
  fi
fi
