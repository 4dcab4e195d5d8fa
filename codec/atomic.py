"""Write a file whole or not at all: a temporary beside it, renamed over it on success.

The temporary is created by :func:`tempfile.mkstemp` in the destination's directory: an
unpredictable name, opened with ``O_CREAT | O_EXCL | O_NOFOLLOW``, so a symlink or file that
someone planted there is never followed or overwritten.  On success the data is flushed and
fsynced, the file gets the permissions ``open(dst, "wb")`` would give it, it is renamed over
``dst`` and the directory is fsynced.  On any failure, ``KeyboardInterrupt`` included, the
temporary is removed; so it is on SIGTERM while the block runs in the main thread with
SIGTERM at its default action (the signal then raises :class:`Terminated`, which exits with
status 143 if nothing catches it).
"""
from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading


class Terminated(SystemExit):
    """SIGTERM arrived while an atomic write was in progress (exit status 128 + 15)."""

    def __init__(self):
        super().__init__(128 + signal.SIGTERM)


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


@contextlib.contextmanager
def _sigterm_raises():
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum, frame):
        raise Terminated()

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def atomic_write(dst):
    """A binary file object for a new temporary beside ``dst``; ``dst`` is replaced by it only if
    the block succeeds."""
    dst = os.fspath(dst)
    d, base = os.path.split(os.path.abspath(dst))
    with _sigterm_raises():
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=d)
        try:
            with os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, dst)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    with contextlib.suppress(OSError):          # make the rename durable
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
