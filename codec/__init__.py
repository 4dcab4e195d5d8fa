"""zipccl: lossless compression of float tensors with analytic exponent codebooks.

>>> import numpy as np, codec
>>> x = np.random.default_rng(0).normal(0, 0.02, 100_000).astype(np.float32)
>>> blob = codec.encode(x)
>>> y = codec.decode(blob)
>>> bool((y.view(np.uint32) == x.view(np.uint32)).all()) and len(blob) < x.nbytes
True
"""
from ._version import __version__
from ._threads import get_num_threads, set_num_threads
from .api import decode, decode_chunks, encode, inspect, max_encoded_size, partition, shard_streams, slice_stream
from .format import FormatError
from .layouts import SUPPORTED

__all__ = ["encode", "decode", "decode_chunks", "max_encoded_size", "slice_stream", "partition", "shard_streams",
           "inspect", "FormatError", "SUPPORTED", "get_num_threads", "set_num_threads"]
