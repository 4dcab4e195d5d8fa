"""The CPU codec's threads: safe after fork (DataLoader workers), under concurrent Python threads, and
the same bytes whatever the thread count."""
import multiprocessing as mp
import os
import threading

import ml_dtypes
import numpy as np
import pytest

import codec
from tests.helpers import make_values, warm


def _data(seed, n=300_000, dtype=ml_dtypes.bfloat16):
    x = np.random.default_rng(seed).normal(0, 0.02, n).astype(dtype)
    x[n // 3:n // 3 + 5000] = 0
    return x


@pytest.fixture
def two_threads():
    before = codec.get_num_threads()
    codec.set_num_threads(2)
    yield
    codec.set_num_threads(before)


def _child_roundtrip(q):
    x = _data(7)
    blob = codec.encode(x)
    q.put((bytes(blob), codec.decode(blob).view(np.uint16).tobytes()))


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")  # the point
def test_codec_works_in_a_forked_child(two_threads):
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork on this platform")
    x = _data(7)
    blob = bytes(codec.encode(x))               # the parent has run the threaded kernels...
    assert codec.decode(blob).view(np.uint16).tobytes() == x.view(np.uint16).tobytes()
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_roundtrip, args=(q,))
    p.start()                                   # ...and the forked child runs them again
    got = q.get(timeout=120)
    p.join(60)
    assert p.exitcode == 0
    assert got == (blob, x.view(np.uint16).tobytes())


class _Streams:
    """A map-style dataset of compressed tensors, decoded in the workers."""

    def __init__(self, blobs):
        self.blobs = blobs

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, i):
        return codec.decode(self.blobs[i])


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")  # the point
def test_dataloader_workers_decode_after_the_parent_did(two_threads):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    xs = [torch.from_numpy(_data(s, 100_000, np.float32)) for s in range(6)]
    blobs = [bytes(codec.encode(x)) for x in xs]
    assert torch.equal(codec.decode(blobs[0]), xs[0])            # the parent decodes first
    loader = DataLoader(_Streams(blobs), batch_size=None, num_workers=2,
                        multiprocessing_context="fork" if "fork" in mp.get_all_start_methods() else None)
    got = list(loader)
    assert len(got) == len(xs)
    for a, b in zip(got, xs):
        assert torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_concurrent_python_threads_get_the_reference_bytes(two_threads):
    """Six Python threads encode and decode at once, each through the codec's 2-thread kernels."""
    inputs = [make_values(dist, dtype, 90_000 + 777 * i, i, -1.0) for i, (dist, dtype) in enumerate(
        [("gaussian", "bfloat16"), ("laplace", "float32"), ("mostly_zeros", "float16"),
         ("gaussian", "float8_e4m3fn"), ("random_bits", "bfloat16"), ("lognormal", "float32")])]
    expect = [bytes(codec.encode(x, chunk_size=4096, backend="reference")) for x in inputs]
    errors = []
    start = threading.Barrier(len(inputs))

    def work(i):
        try:
            start.wait()
            for _ in range(8):
                blob = codec.encode(inputs[i], chunk_size=4096)
                assert bytes(blob) == expect[i], f"thread {i}: encode differs from the reference"
                y = codec.decode(blob)
                assert y.view(np.uint8).tobytes() == inputs[i].view(np.uint8).tobytes(), f"thread {i}: decode"
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[0]


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
def test_same_bytes_for_any_thread_count(threads):
    x = make_values("laplace", "bfloat16", 333_333, 3, -1.0)
    x[1000:70000] = 0
    before = codec.get_num_threads()
    codec.set_num_threads(threads)
    try:
        blob = codec.encode(x, chunk_size=4096)
        y = codec.decode(blob)
    finally:
        codec.set_num_threads(before)
    assert bytes(blob) == bytes(codec.encode(x, chunk_size=4096, backend="reference"))
    assert y.view(np.uint16).tobytes() == x.view(np.uint16).tobytes()


def test_thread_count_setting():
    before = codec.get_num_threads()
    assert before >= 1
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises((ValueError, TypeError)):
            codec.set_num_threads(bad)
    assert codec.get_num_threads() == before


def test_thread_count_from_the_environment():
    import subprocess
    import sys

    code = "import codec; print(codec.get_num_threads())"
    env = dict(os.environ, ZIPCCL_NUM_THREADS="3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "3", out.stderr[-2000:]
    env["ZIPCCL_NUM_THREADS"] = "zero"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "ZIPCCL_NUM_THREADS" in out.stderr


def test_the_codec_leaves_torchs_thread_count_alone():
    """Loading the kernels (numba's cache) must not reset the caller's OpenMP thread count, which torch
    shares: torch.set_num_threads(1), then the codec, and torch must still run on 1 thread."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    code = ("import torch; torch.set_num_threads(1)\n"
            "torch.ones(4096).sum(); assert torch.get_num_threads() == 1\n"     # torch has run on 1 thread
            "import numpy as np, codec\n"
            "x = np.random.default_rng(0).normal(0, 1, 1 << 18).astype(np.float32)\n"
            "codec.decode(codec.encode(x)); print(torch.get_num_threads())")
    import codec._numba

    warm("decoders")         # so the child loads every kernel it uses from numba's cache
    warm("encoders")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "1", out.stdout
