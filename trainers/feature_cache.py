"""A losslessly compressed cache of teacher features, with background prefetch.

Teacher activations at segment boundaries are computed once and stored compressed with
:mod:`codec` (bit-exact, so training on cached features equals training on recomputed
ones), in memory or in a directory.  ``prefetch`` hands the decoding of the next items to
a thread pool so the training step does not wait on it; the numba decoder releases the
GIL, so decoding overlaps PyTorch compute.

    cache = FeatureCache()                       # or FeatureCache(directory="feats/")
    cache.put(("batch3", "layer2"), tensor)      # any float tensor, any shape
    for key, t in cache.prefetch(keys):          # decoded ahead, yielded in order
        ...
    cache.stats()                                # raw/compressed bytes, ratio, decode and wait seconds
"""
from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import codec


_END = object()


class FeatureCache:
    def __init__(self, *, directory: str | Path | None = None, workers: int = 2, depth: int = 4,
                 checksum: bool = False):
        """directory: store streams as files there (else in memory); workers/depth: prefetch threads and
        how many items are decoded ahead; checksum: CRC32C in every stream."""
        if workers < 1 or depth < 1:
            raise ValueError("workers and depth must be >= 1")
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self.workers, self.depth, self.checksum = workers, depth, checksum
        self._mem: dict = {}
        self._files: dict = {}
        self._lock = threading.Lock()
        self.raw_bytes = 0
        self.compressed_bytes = 0
        self.decode_seconds = 0.0
        self.wait_seconds = 0.0

    def __len__(self) -> int:
        return len(self._mem) + len(self._files)

    def __contains__(self, key) -> bool:
        return key in self._mem or key in self._files

    def put(self, key, tensor) -> None:
        blob = codec.encode(tensor, checksum=self.checksum)
        with self._lock:
            self.raw_bytes += tensor.numel() * tensor.element_size() if hasattr(tensor, "numel") else tensor.nbytes
            self.compressed_bytes += len(blob)
        if self.directory is None:
            self._mem[key] = blob
        else:
            path = self.directory / f"{len(self._files):08d}.zccl"
            path.write_bytes(blob)
            self._files[key] = path

    def _blob(self, key):
        if key in self._mem:
            return self._mem[key]
        return self._files[key].read_bytes()

    def get(self, key):
        """Decode one item now (bit-exact)."""
        t = time.perf_counter()
        out = codec.decode(self._blob(key))
        with self._lock:
            self.decode_seconds += time.perf_counter() - t
        return out

    def prefetch(self, keys):
        """Yield ``(key, tensor)`` for ``keys`` in order, decoding up to ``depth`` items ahead."""
        keys = list(keys)
        with ThreadPoolExecutor(self.workers, thread_name_prefix="zipccl-prefetch") as pool:
            pending = collections.deque()
            it = iter(keys)
            for key in it:
                pending.append((key, pool.submit(self.get, key)))
                if len(pending) >= self.depth:
                    break
            while pending:
                key, fut = pending.popleft()
                t = time.perf_counter()
                value = fut.result()
                self.wait_seconds += time.perf_counter() - t
                nxt = next(it, _END)
                if nxt is not _END:
                    pending.append((nxt, pool.submit(self.get, nxt)))
                yield key, value

    def stats(self) -> dict:
        return {"items": len(self), "raw_bytes": self.raw_bytes, "compressed_bytes": self.compressed_bytes,
                "ratio": self.raw_bytes / self.compressed_bytes if self.compressed_bytes else float("nan"),
                "decode_seconds": self.decode_seconds, "wait_seconds": self.wait_seconds}
