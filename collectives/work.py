"""The per-process call queue: every collective call runs on one worker thread, in program order,
and an ``async_op=True`` call returns a :class:`Work` handle for it."""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import torch

import codec

_queue_lock = threading.Lock()
_queue: ThreadPoolExecutor | None = None


class Work:
    """Handle of an ``async_op=True`` call (like ``torch.distributed.Work``)."""

    def __init__(self, fut: Future, result=None):
        self._fut = fut
        self._result = result
        self._torch_fut: torch.futures.Future | None = None
        self._lock = threading.Lock()

    def wait(self, timeout: float | None = None) -> bool:
        self._fut.result(timeout)
        return True

    def is_completed(self) -> bool:
        return self._fut.done()

    def get_future(self) -> torch.futures.Future:
        """A ``torch.futures.Future`` completed by the communication thread when the call is done, with
        the call's output tensors (a list, as torch's own ``Work.get_future()``), or with its error:
        chain work with ``.then`` as DDP communication hooks do."""
        with self._lock:
            if self._torch_fut is None:
                tf = self._torch_fut = torch.futures.Future()

                def done(f: Future):
                    e = f.exception()
                    if e is not None:
                        tf.set_exception(e)
                    else:
                        tf.set_result(self._result)
                self._fut.add_done_callback(done)
        return self._torch_fut


def run(fn, async_op: bool, result=None):
    """Every call goes through one per-process queue, so calls reach the group in program order.
    ``result``: what the handle's future completes with (the call's output tensors)."""
    global _queue
    with _queue_lock:
        if _queue is None:
            _queue = ThreadPoolExecutor(1, thread_name_prefix="zipccl-collectives")
    fut = _queue.submit(_clear_errors(fn))
    if async_op:
        return Work(fut, result)
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
