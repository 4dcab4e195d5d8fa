"""Traffic accounting: the process-wide count of tensor bytes framed for the wire and of the bytes sent
for them (:data:`traffic`, read by the trainers to report the compression actually achieved)."""
from __future__ import annotations

import threading


class Traffic:
    """Bytes this process framed for the wire: ``raw`` (tensor bytes) and ``framed`` (what was sent for
    them: codec streams, or the raw bytes when uncompressed).  ``ratio`` is the compression achieved."""

    def __init__(self):
        self._lock = threading.Lock()
        self.raw = self.framed = 0

    def add(self, raw: int, framed: int) -> None:
        with self._lock:
            self.raw += raw
            self.framed += framed

    @property
    def ratio(self) -> float:
        return self.raw / self.framed if self.framed else 1.0

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return self.raw, self.framed


traffic = Traffic()      # process-wide; counts every payload framed by collectives.framing
