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


def pytest_configure(config):
    # numba compiles the kernels on first use (three to four minutes on a fresh clone and 2 cores: one
    # decoder per dtype, one encoder per word size) and caches them on disk: a second process compiles the
    # decoders from the first dtype on while this one compiles the encoders, then the decoders the other
    # has not claimed from the last dtype on (see tests.helpers.warm), so a cold run pays about half
    global _warming, _claims
    _claims = tempfile.mkdtemp(prefix="zipccl-warm-")
    code = f"from tests.helpers import warm; warm('decoders', {_claims!r})"
    _warming = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="session", autouse=True)
def _compiled_kernels():
    from tests.helpers import warm

    try:
        warm("encoders")
        warm("decoders", _claims, last_first=True)
    finally:
        if _warming is not None:
            try:
                _warming.wait(timeout=600)
            except subprocess.TimeoutExpired:         # the tests then compile what they need themselves
                _warming.kill()
        shutil.rmtree(_claims, ignore_errors=True)
    yield
