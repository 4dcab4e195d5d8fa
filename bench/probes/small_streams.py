"""Per-call cost of small streams (bf16 Gaussian of 384, 4K, 64K and 256K values; one codec thread):
``encode``, ``encode(out=...)`` and ``decode(out=...)`` in microseconds, and the stream's bytes, as one
JSON line.  Run it in alternating fresh processes of two checkouts to compare formats::

    for r in 1 2 3 4; do for c in /tmp/v3 .; do (cd $c && PYTHONPATH=$PWD python bench/probes/small_streams.py); done; done

(the format v4 results, bench/results/format_v4_*.md, are the medians of 4 such rounds)."""
import json
import time

import ml_dtypes
import numpy as np

import codec

codec.set_num_threads(1)
res = {}
for n in (384, 4096, 65536, 262144):
    x = np.random.default_rng(n).normal(0, 0.02, n).astype(ml_dtypes.bfloat16)
    out = np.empty(codec.max_encoded_size(x), np.uint8)
    blob = codec.encode(x)
    y = np.empty_like(x)
    for name, fn in (("enc", lambda: codec.encode(x)), ("enc_out", lambda: codec.encode(x, out=out)),
                     ("dec_out", lambda: codec.decode(blob, out=y))):
        fn()
        reps = max(20, 2_000_000 // n) if n < 65536 else 60
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            best = min(best, (time.perf_counter() - t) / reps)
        res[f"{name}_{n}"] = best * 1e6
    res[f"len_{n}"] = len(blob)
print(json.dumps(res))
