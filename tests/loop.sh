#!/usr/bin/env bash
# Proof that CI is green every time: run .ci/run in N fresh clones of this repository's HEAD, one after
# another (fresh virtual environment, cold numba cache), and print one line per run.
#   bash tests/loop.sh 5 [LOGDIR]
# Exits non-zero if any run failed.  Each run takes about 15 minutes on 2 cores.
set -uo pipefail
n=${1:-5}
src=$(cd "$(dirname "$0")/.." && pwd)
logs=${2:-$(mktemp -d -t zipccl-loop.XXXXXX)}
mkdir -p "$logs"
rev=$(git -C "$src" rev-parse --short HEAD)
echo "loop: $n clean-clone runs of .ci/run at $rev; logs in $logs; CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
fails=0
for i in $(seq 1 "$n"); do
  dir=$(mktemp -d -t zipccl-ci.XXXXXX)
  git clone -q "$src" "$dir/repo" && git -C "$dir/repo" checkout -q "$rev"
  t0=$(date +%s)
  (cd "$dir/repo" && CI=true bash .ci/run) > "$logs/run$i.log" 2>&1 < /dev/null
  rc=$?
  t1=$(date +%s)
  summary=$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed)' "$logs/run$i.log" | tr '\n' ';')
  echo "run $i: rc=$rc $((t1 - t0)) s: $summary"
  [ "$rc" -ne 0 ] && fails=$((fails + 1))
  rm -rf "$dir"
done
echo "loop: $fails of $n runs failed"
[ "$fails" -eq 0 ]
