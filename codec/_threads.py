"""The CPU codec's worker threads: plain Python threads around ``nogil`` numba kernels.

Numba's own threading layers do not fit a library that is imported into other people's
processes: its GNU OpenMP layer (the one found on most Linux machines, and the runtime torch
ships) aborts a forked child that runs a parallel kernel after the parent has run one (a torch
``DataLoader`` whose workers decode dies), and its workqueue layer aborts when two Python
threads run parallel kernels at once.  The kernels are therefore compiled without
``parallel=True``; :func:`run` starts ``fn(t, *args)`` for ``t < threads``: ``t = 0`` on the
calling thread, the others on a process-wide pool.  The kernels share work through atomic claim
counters, so a call finishes correctly however many helpers actually start: helpers still
queued when the caller's share is done (the pool busy with another caller's work) are
cancelled, never waited for.  After ``fork`` the child starts a pool of its own on first use.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_threads: int | None = None


def _launch_numba_layer_aside() -> None:
    """Numba starts its threading layer when it loads a kernel of its parallel pipeline from its cache,
    in whichever thread that happens.  Its OpenMP layer then sets that thread's OpenMP thread count,
    in the OpenMP runtime torch shares (one ``libgomp.so.1``): torch's intra-op threads in the caller's
    thread silently changed (``torch.set_num_threads(1)``, one ``codec.decode``, and torch ran on 2).
    Started here once, in a thread of its own that then ends, it touches no caller's settings."""
    try:
        from numba.np.ufunc import parallel
    except ImportError:
        return
    if getattr(parallel, "_is_initialized", True):
        return

    def launch():
        try:
            parallel._launch_threads()
        except Exception:  # noqa: BLE001 - no layer: numba says so itself when a kernel is loaded
            pass

    t = threading.Thread(target=launch, name="zipccl-numba-layer")
    t.start()
    t.join()


def kernel_options() -> dict:
    """Extra ``njit`` options of the kernels that :func:`run` runs: numba's parallel compilation
    pipeline with every parallel transformation switched off.  No ``prange`` loop and no array
    expression becomes a parallel region (nothing runs on numba's threading layer, so nothing
    breaks after ``fork``), but the pipeline's IR simplification still applies: compiled
    without it, the decoder's round loop ran 1.75x slower (2.3 -> 1.3 GB/s, bf16, one thread)."""
    import warnings

    from numba.core.errors import NumbaPerformanceWarning

    _launch_numba_layer_aside()

    # numba says so when it compiles each kernel: no parallel region is what is wanted here
    warnings.filterwarnings("ignore", message=r"\s*The keyword argument 'parallel=True' was specified but no transformation",
                            category=NumbaPerformanceWarning)
    off = ("comprehension", "reduction", "inplace_binop", "setitem", "numpy", "stencil", "fusion", "prange")
    return {"parallel": {k: False for k in off}}


def _default_threads() -> int:
    for var in ("ZIPCCL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        v = os.environ.get(var)
        if v:
            try:
                n = int(v)
            except ValueError:
                raise ValueError(f"{var}={v!r} is not a number of threads") from None
            if n >= 1:
                return n
            raise ValueError(f"{var}={v!r}: need at least 1 thread")
    try:
        return max(1, len(os.sched_getaffinity(0)))       # the CPUs this process may run on
    except AttributeError:                                # not Linux
        return max(1, os.cpu_count() or 1)


def get_num_threads() -> int:
    """Threads the CPU codec uses for one encode or decode (``set_num_threads``; default: the
    ``ZIPCCL_NUM_THREADS`` or ``NUMBA_NUM_THREADS`` environment variable, else the CPUs this process
    may run on)."""
    global _threads
    if _threads is None:
        _threads = _default_threads()
    return _threads


def set_num_threads(n: int) -> None:
    """Use ``n`` threads (>= 1) per encode or decode, process-wide."""
    global _threads
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"need an integer number of threads >= 1, got {n!r}")
    _threads = int(n)


def _after_fork_in_child() -> None:
    global _pool, _pool_size, _lock
    _pool, _pool_size = None, 0          # the parent's pool threads do not exist here
    _lock = threading.Lock()             # it may have been held by another thread at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _helpers(n: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size < n:
            old = _pool
            _pool, _pool_size = ThreadPoolExecutor(n, thread_name_prefix="zipccl-codec"), n
            if old is not None:
                old.shutdown(wait=False)
        return _pool


class _Job:
    """What the pool's queue holds: a cancelled helper stays queued until a pool thread picks it up, so
    the arguments (views of the caller's buffers, which must not stay exported) are dropped as soon as
    the call is over."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __call__(self, t):
        args = self.args
        if args is not None:
            self.fn(t, *args)


def run(fn, threads: int, *args) -> None:
    """``fn(t, *args)`` for every ``t < threads`` (``t = 0`` here, the rest on pool threads); returns
    when every started call has returned, and raises the first exception any of them raised."""
    if threads <= 1:
        fn(0, *args)
        return
    pool = _helpers(threads - 1)
    job = _Job(fn, args)
    futures = [pool.submit(job, t) for t in range(1, threads)]
    try:
        fn(0, *args)
    finally:
        for f in futures:
            if not f.cancel():
                f.exception()            # wait: a started helper may still be writing
        job.args = None
    for f in futures:
        if not f.cancelled() and f.exception() is not None:
            raise f.exception()
