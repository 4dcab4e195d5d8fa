"""Peer lossless compressors for the zipccl benchmark.

Every peer is ``fn(x: np.ndarray) -> (compressed_nbytes, encode_s, decode_s)``
for a NumPy array of dtype bfloat16, float16, float32, float8_e4m3fn or
float8_e5m2 (ml_dtypes for the non-native ones).  Each call compresses the
array's raw bytes (C order), decompresses them, and raises
``RoundTripError`` unless the decoded bit patterns equal the input's
(compared as unsigned-int views).  All peers run single-threaded.
Timings are ``time.perf_counter`` wall seconds of one encode / one decode
call, excluding the input copy and the verification.

Peers (keys of ``PEERS``):

* ``zipnn``: ZipNN 0.5.x, ``ZipNN(input_format="byte", bytearray_dtype=<dtype
  name>, threads=1)`` with its defaults otherwise (method "AUTO", 256 KiB
  chunks, compression_threshold 0.95).  In byte mode ZipNN derives its
  byte-grouping from ``bytearray_dtype`` (the same settings it uses for torch
  tensors): bfloat16 -> 2 byte groups + sign-bit move (byte_reorder=10,
  bit_reorder=1); float32 -> 4 groups + sign-bit move (220, 1); float16 -> 2
  groups, no bit move (10, 0); float8 -> 1 group (10, 1).  A fresh ZipNN
  object is made for every encode and every decode.  ZipNN modifies its
  input buffer in place (bfloat16 / float32: it swaps the sign bit into the
  low byte, and it does so even for an immutable ``bytes`` object), so it is
  always handed a private ``bytearray`` copy.
* ``zstd3``, ``zstd9``: zstandard level 3 / 9, ``threads=0`` (single-threaded),
  content size written in the frame.
* ``lz4``: ``lz4.frame.compress`` with defaults.
* ``blosc2_shuffle_zstd5``, ``blosc2_bitshuffle_zstd5``: ``blosc2.compress2``
  with ``typesize=itemsize``, codec ZSTD clevel 5, filter SHUFFLE /
  BITSHUFFLE, ``nthreads=1`` (one chunk; inputs must be < 2 GiB).
"""

from __future__ import annotations

import time

import numpy as np

try:  # package import (python -m bench.peers / from bench import peers)
    from .corpus import dtype_name, uint_view
except ImportError:  # pragma: no cover - run as a plain script
    from corpus import dtype_name, uint_view


class RoundTripError(AssertionError):
    """A peer's decoded output is not bit-identical to its input."""


def _raw(x: np.ndarray) -> tuple[np.ndarray, bytes]:
    dtype_name(x.dtype)  # raises on unsupported dtypes
    u = uint_view(x)
    return u, u.tobytes()


def _verify(peer: str, u: np.ndarray, decoded) -> None:
    mv = memoryview(decoded).cast("B")
    if mv.nbytes != u.nbytes:
        raise RoundTripError(f"{peer}: decoded {mv.nbytes} bytes, expected {u.nbytes}")
    d = np.frombuffer(mv, dtype=u.dtype)
    if not np.array_equal(d, u):
        bad = int(np.count_nonzero(d != u))
        raise RoundTripError(f"{peer}: {bad} of {u.size} words differ after round trip")


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


# ---------------------------------------------------------------- zipnn

def zipnn(x: np.ndarray):
    from zipnn import ZipNN

    name = dtype_name(x.dtype)
    u, raw = _raw(x)
    buf = bytearray(raw)  # private copy: ZipNN mutates its input in place
    enc = ZipNN(input_format="byte", bytearray_dtype=name, threads=1)
    comp, t_enc = _timed(enc.compress, buf)
    comp = bytes(comp)
    dec = ZipNN(input_format="byte", bytearray_dtype=name, threads=1)
    out, t_dec = _timed(dec.decompress, comp)
    _verify("zipnn", u, out)
    return len(comp), t_enc, t_dec


# ---------------------------------------------------------------- zstd

def _zstd(level: int):
    def peer(x: np.ndarray):
        import zstandard

        u, raw = _raw(x)
        c = zstandard.ZstdCompressor(level=level, threads=0, write_content_size=True)
        comp, t_enc = _timed(c.compress, raw)
        d = zstandard.ZstdDecompressor()
        out, t_dec = _timed(d.decompress, comp)
        _verify(f"zstd{level}", u, out)
        return len(comp), t_enc, t_dec

    peer.__name__ = f"zstd{level}"
    peer.__doc__ = f"zstandard level {level}, single-threaded."
    return peer


zstd3 = _zstd(3)
zstd9 = _zstd(9)


# ---------------------------------------------------------------- lz4

def lz4(x: np.ndarray):
    import lz4.frame

    u, raw = _raw(x)
    comp, t_enc = _timed(lz4.frame.compress, raw)
    out, t_dec = _timed(lz4.frame.decompress, comp)
    _verify("lz4", u, out)
    return len(comp), t_enc, t_dec


# ---------------------------------------------------------------- blosc2

def _blosc2(filter_name: str, label: str):
    def peer(x: np.ndarray):
        import blosc2

        u, raw = _raw(x)
        cparams = blosc2.CParams(
            codec=blosc2.Codec.ZSTD,
            clevel=5,
            typesize=x.dtype.itemsize,
            nthreads=1,
            filters=[getattr(blosc2.Filter, filter_name)],
            filters_meta=[0],
        )
        dparams = blosc2.DParams(nthreads=1)
        comp, t_enc = _timed(lambda: blosc2.compress2(raw, cparams=cparams))
        out, t_dec = _timed(lambda: blosc2.decompress2(comp, dparams=dparams))
        _verify(label, u, out)
        return len(comp), t_enc, t_dec

    peer.__name__ = label
    peer.__doc__ = f"blosc2 {filter_name} + ZSTD clevel 5, typesize=itemsize, nthreads=1."
    return peer


blosc2_shuffle_zstd5 = _blosc2("SHUFFLE", "blosc2_shuffle_zstd5")
blosc2_bitshuffle_zstd5 = _blosc2("BITSHUFFLE", "blosc2_bitshuffle_zstd5")


# ---------------------------------------------------------------- registry

PEERS = {
    "zipnn": zipnn,
    "zstd3": zstd3,
    "zstd9": zstd9,
    "lz4": lz4,
    "blosc2_shuffle_zstd5": blosc2_shuffle_zstd5,
    "blosc2_bitshuffle_zstd5": blosc2_bitshuffle_zstd5,
}

_MODULE_OF = {
    "zipnn": "zipnn",
    "zstd3": "zstandard",
    "zstd9": "zstandard",
    "lz4": "lz4.frame",
    "blosc2_shuffle_zstd5": "blosc2",
    "blosc2_bitshuffle_zstd5": "blosc2",
}


def available_peers(verbose: bool = True) -> dict:
    """Subset of PEERS whose library imports; prints why others are skipped."""
    import importlib

    out = {}
    for name, fn in PEERS.items():
        try:
            importlib.import_module(_MODULE_OF[name])
        except Exception as e:  # ImportError, or a broken native extension
            if verbose:
                print(f"peers: skipping {name}: cannot import {_MODULE_OF[name]} ({type(e).__name__}: {e})")
            continue
        out[name] = fn
    return out


def run_peer(name: str, x: np.ndarray) -> dict:
    """Convenience: ``PEERS[name](x)`` as a dict with ratio and MB/s."""
    nbytes, t_enc, t_dec = PEERS[name](x)
    return {
        "peer": name,
        "ratio": x.nbytes / nbytes,
        "compressed_nbytes": nbytes,
        "encode_s": t_enc,
        "decode_s": t_dec,
        "encode_MBps": x.nbytes / t_enc / 1e6 if t_enc > 0 else float("inf"),
        "decode_MBps": x.nbytes / t_dec / 1e6 if t_dec > 0 else float("inf"),
    }


if __name__ == "__main__":
    import sys

    try:
        from .corpus import build_corpus, exponent_entropy_bound
    except ImportError:  # pragma: no cover
        from corpus import build_corpus, exponent_entropy_bound

    picks = sys.argv[1:] or [
        "weights/encoder.layer.0.attention.self.query.weight",
        "weights/embeddings.word_embeddings.weight",
        "activations/hidden_states.3",
        "activations/encoder.layer.0.attention.probs",
        "gradients/embeddings.word_embeddings.weight",
        "gradients/encoder.layer.0.intermediate.dense.weight",
        "synthetic/gauss_sigma0.02",
        "synthetic/zero_inflated_gauss_p0.9_s0.02",
    ]
    peers = available_peers()
    corpus = dict(build_corpus())
    cols = ["bound"] + list(peers)
    print(f"{'tensor':62s} " + " ".join(f"{c[:12]:>12s}" for c in cols))
    for base in picks:
        for d in ("bfloat16", "float16", "float32"):
            x = corpus[f"{base}@{d}"]
            row = [exponent_entropy_bound(x)]
            for p in peers:
                row.append(x.nbytes / peers[p](x)[0])
            print(f"{base + '@' + d:62s} " + " ".join(f"{v:12.3f}" for v in row))
