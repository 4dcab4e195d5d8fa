import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_warming = None
_claims = None


def _warm_code(part: str, claims: str, last_first: bool = False) -> str:
    return f"from tests.helpers import warm; warm({part!r}, {claims!r}, last_first={last_first})"


@pytest.hookimpl(trylast=True)           # (after the terminal reporter is registered: it says what it waits for)
def pytest_configure(config):
    # numba compiles the kernels on first use (three to four minutes on a fresh clone and 2 cores: one
    # decoder per dtype, one encoder per word size) and caches them on disk: a second process compiles the
    # decoders from the first dtype on while this one compiles the encoders, then the decoders the other
    # has not claimed from the last dtype on (see tests.helpers.warm), so a cold run pays about half.
    # Under pytest-xdist (the README's command: -n auto) the controller does the same with two processes
    # before any worker starts, and the workers load the kernels from the cache (~5 s each).
    global _warming, _claims
    if hasattr(config, "workerinput"):                  # an xdist worker: the controller warmed the cache
        return
    _claims = tempfile.mkdtemp(prefix="zipccl-warm-")
    _warming = subprocess.Popen([sys.executable, "-c", _warm_code("decoders", _claims)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if getattr(config.option, "dist", "no") != "no" and getattr(config.option, "numprocesses", 0):
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line("numba kernels: loading them from the cache, or compiling them where it is cold "
                          "(~2.5 minutes on 2 cores) before the workers start")
        code = _warm_code("encoders", _claims) + "; " + _warm_code("decoders", _claims, last_first=True)
        try:
            subprocess.run([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finally:
            _wait_for_warming()


def _wait_for_warming():
    global _warming
    if _warming is not None:
        try:
            _warming.wait(timeout=600)
        except subprocess.TimeoutExpired:         # the tests then compile what they need themselves
            _warming.kill()
        _warming = None
    if _claims is not None:
        shutil.rmtree(_claims, ignore_errors=True)


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per CPU this process may run on (xdist's own count, with psutil, is of
    physical cores: one on a 2-vCPU machine), at most 8 (each worker loads every kernel)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


@pytest.fixture(scope="session", autouse=True)
def _compiled_kernels():
    from tests.helpers import warm

    try:
        warm("encoders")
        warm("decoders", _claims, last_first=True)
    finally:
        _wait_for_warming()
    yield
