"""The per-process call queue: every collective call runs on one worker thread, in program order,
and an ``async_op=True`` call returns a :class:`Work` handle for it."""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import codec

_queue_lock = threading.Lock()
_queue: ThreadPoolExecutor | None = None


class Work:
    """Handle of an ``async_op=True`` call (like ``torch.distributed.Work``)."""

    def __init__(self, fut: Future):
        self._fut = fut

    def wait(self, timeout: float | None = None) -> bool:
        self._fut.result(timeout)
        return True

    def is_completed(self) -> bool:
        return self._fut.done()

    def get_future(self) -> Future:
        return self._fut


def run(fn, async_op: bool):
    """Every call goes through one per-process queue, so calls reach the group in program order."""
    global _queue
    with _queue_lock:
        if _queue is None:
            _queue = ThreadPoolExecutor(1, thread_name_prefix="zipccl-collectives")
    fut = _queue.submit(_clear_errors(fn))
    if async_op:
        return Work(fut)
    fut.result()
    return None


def _clear_errors(fn):
    """Transport failures (a dead peer, the group's timeout) become one clear RuntimeError."""
    def run():
        try:
            return fn()
        except (ValueError, TypeError, NotImplementedError, codec.FormatError):
            raise
        except RuntimeError as e:
            raise RuntimeError(f"zipccl collective failed: a rank died or the group timed out ({e})") from e
    return run
