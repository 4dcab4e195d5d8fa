#!/usr/bin/env bash
# The codec's tests with the numba kernels compiled for other x86-64 CPUs than this one:
#   bash tests/isa.sh            # haswell (AVX2, no AVX-512) with scalar-load and with gather lookups, x86-64
#                                # (SSE2 only); then this host again with its other stream-move / lookup variants
#   bash tests/isa.sh haswell:avx2 haswell:avx2:gather     # CPU:ISA[:TABLE_LOOKUPS variant]
# Each target gets its own numba cache (NUMBA_CPU_NAME with empty NUMBA_CPU_FEATURES: the named CPU's
# features, not this host's); tests/test_simd.py checks from the compiled code that the target took.
set -euo pipefail
cd "$(dirname "$0")/.."
# (slow ones too: the fp8 byte-flip run is slow only for the README command)
TESTS="tests/test_roundtrip.py tests/test_golden.py tests/test_simd.py tests/test_planes.py tests/test_bad_input.py"
targets=("$@")
# (a named AVX2 target takes scalar loads for its table lookups, as an AVX2 host does unless it is an Intel
# part with fast gathers, codec._simd.gathers_preferred: both forms run on every host)
[ ${#targets[@]} -eq 0 ] && targets=(haswell:avx2 haswell:avx2:gather x86-64:sse2)
for t in "${targets[@]}"; do
  IFS=: read -r cpu isa lookups <<< "$t"
  cache=$(mktemp -d -t "zipccl-numba-$cpu.XXXXXX")
  echo "== numba kernels compiled for $cpu ($isa${lookups:+, table lookups: $lookups})"
  env ${lookups:+ZIPCCL_TABLE_LOOKUPS=$lookups} \
    NUMBA_CPU_NAME=$cpu NUMBA_CPU_FEATURES="" NUMBA_CACHE_DIR=$cache ZIPCCL_EXPECT_ISA=$isa \
    python -m pytest -q -n auto -p no:cacheprovider -m "not gpu" $TESTS
  rm -rf "$cache"
done
# on this host the kernels take one variant of each knob its CPU can run (codec._simd.STREAM_MOVES:
# register forms with AVX-512 VBMI2, pshufb and vpermd shuffles with AVX2; TABLE_LOOKUPS: permutes with VBMI,
# gathers on Intel parts with fast gathers); where the CPU can run others, the last of them once more here
if [ $# -eq 0 ]; then
  other=$(python -c "
from codec import _simd as s
for var, forms, chosen in (('ZIPCCL_STREAM_MOVES', s.STREAM_MOVE_FORMS, s.STREAM_MOVES),
                           ('ZIPCCL_TABLE_LOOKUPS', s.TABLE_LOOKUP_FORMS, s.TABLE_LOOKUPS)):
    alt = s.other_variant(s.usable_variants(forms), chosen)
    if alt:
        print(f'{var}={alt}', end=' ')")
  if [ -n "$other" ]; then
    cache=$(mktemp -d -t "zipccl-numba-other.XXXXXX")
    echo "== numba kernels for this host, the other variants: $other"
    env $other NUMBA_CACHE_DIR=$cache python -m pytest -q -n auto -p no:cacheprovider -m "not gpu" $TESTS
    rm -rf "$cache"
  fi
  # the encoder takes permutes wherever the target has them (codec._simd.ENCODE_LOOKUPS), the decoder
  # its own lookups: the pairing of decoder and encoder variants neither run above took (on AMD: gathers
  # to decode, permutes to encode, as on Intel by default; on Intel: gathers both, as without VBMI)
  pairing=$(python -c "
from codec import _simd as s
usable = s.usable_variants(s.TABLE_LOOKUP_FORMS)
alt = s.other_variant(usable, s.TABLE_LOOKUPS)
seen = {(s.TABLE_LOOKUPS, s.ENCODE_LOOKUPS), (alt, alt)}
for d in usable:
    for e in sorted({d, 'permute'} & set(usable)):
        if (d, e) not in seen:
            print(f'ZIPCCL_TABLE_LOOKUPS={d} ZIPCCL_ENCODE_LOOKUPS={e}')
            raise SystemExit")
  if [ -n "$pairing" ]; then
    cache=$(mktemp -d -t "zipccl-numba-pairing.XXXXXX")
    echo "== numba kernels for this host, decoder and encoder lookups: $pairing"
    env $pairing NUMBA_CACHE_DIR=$cache python -m pytest -q -n auto -p no:cacheprovider -m "not gpu" \
      tests/test_roundtrip.py tests/test_golden.py tests/test_simd.py
    rm -rf "$cache"
  fi
fi
