"""Probe: one-thread decode speed of two checkouts against each other, in fresh processes that alternate
(A, B, B, A, ...), each with a numba cache of its own: bf16 and fp16 (32 Mi Gaussian values) and fp32 (16 Mi),
best of 7 calls into a reused buffer and into a fresh output, the bytes checked.

    git worktree add --detach /tmp/base <commit>
    python -m bench.probes.decode_ab /tmp/base . [ROUNDS]

Lighter than bench.version_ab (decode only, three inputs): for a kernel change that moves decode speed
by a few per cent on a host whose single runs vary by more.
"""
import json, os, statistics, subprocess, sys, tempfile
CHILD = r'''
import json, time, numpy as np, codec
codec.set_num_threads(1)
import ml_dtypes
rng = np.random.default_rng(0)
res = {}
for name, dt, n in (("bf16", ml_dtypes.bfloat16, 32 << 20), ("fp16", np.float16, 32 << 20), ("fp32", np.float32, 16 << 20)):
    x = (rng.standard_normal(n) * 0.02).astype(dt)
    blob = codec.encode(x)
    out = np.empty_like(x)
    codec.decode(blob, out=out)
    best = 1e9; bestf = 1e9
    for _ in range(7):
        t = time.perf_counter(); codec.decode(blob, out=out); best = min(best, time.perf_counter() - t)
        t = time.perf_counter(); y = codec.decode(blob); bestf = min(bestf, time.perf_counter() - t); del y
    assert codec.decode(blob).view(np.uint8).tobytes() == x.view(np.uint8).tobytes()
    res[name] = (x.nbytes / best / 1e6, x.nbytes / bestf / 1e6)
res["file"] = codec.__file__
print(json.dumps(res))
'''
sides = {"A": os.path.abspath(sys.argv[1]), "B": os.path.abspath(sys.argv[2])}
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
got = {"A": [], "B": []}
for r in range(rounds):
    for s in (("A", "B") if r % 2 == 0 else ("B", "A")):
        env = dict(os.environ, PYTHONPATH=sides[s], NUMBA_CACHE_DIR=os.path.join(tempfile.gettempdir(), f"zipccl-decode-ab-{s}"))
        out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, cwd="/tmp")
        if out.returncode:
            print(out.stderr[-3000:]); sys.exit(1)
        got[s].append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(r, s, got[s][-1], flush=True)
for k in ("bf16", "fp16", "fp32"):
    for j, what in ((0, "reused"), (1, "fresh")):
        a = [g[k][j] for g in got["A"]]; b = [g[k][j] for g in got["B"]]
        ratios = [bb / aa for aa, bb in zip(a, b)]
        print(f"{k} {what}: A {statistics.median(a):.0f} B {statistics.median(b):.0f} MB/s  B/A per round {[round(x,3) for x in ratios]} median {statistics.median(ratios):.3f}")
