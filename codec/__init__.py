"""zipccl: lossless compression of float tensors with analytic exponent codebooks.

>>> import numpy as np, codec
>>> x = np.random.default_rng(0).normal(0, 0.02, 100_000).astype(np.float32)
>>> blob = codec.encode(x)
>>> y = codec.decode(blob)
>>> bool((y.view(np.uint32) == x.view(np.uint32)).all()) and len(blob) < x.nbytes
True

The package is layered (README, "Layers"): importing it, or ``codec.format``, loads only the bottom
layer (dtype layouts, model, codebooks, format); the public API (:mod:`codec.api`) and through it the
backends are imported on first use of one of its names.
"""
import importlib

from ._threads import get_num_threads, set_num_threads
from ._version import __version__
from .format import FormatError
from .layouts import SUPPORTED

_API = ("encode", "decode", "decode_chunks", "max_encoded_size", "slice_stream", "partition", "shard_streams",
        "inspect")
_SAFEFILE = ("save_file", "load_file", "safe_open")
_DELTA = ("encode_delta", "decode_delta", "inspect_delta")
_LAZY = {**dict.fromkeys(_API, ".api"), **dict.fromkeys(_SAFEFILE, ".safefile"), **dict.fromkeys(_DELTA, ".delta")}
__all__ = list(_LAZY) + ["FormatError", "SUPPORTED", "get_num_threads", "set_num_threads",
                                           "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    try:                                   # a submodule not imported yet (codec.api, codec.planes...)
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
