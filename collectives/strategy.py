"""Adaptive choice between uncompressed and compressed collectives (an alpha-beta cost model).

Per call, predicted times for each candidate are computed from

* the link: latency ``alpha`` (s) and bandwidth ``beta`` (bytes/s), measured by
  :func:`calibrate` (a ping-pong between ranks 0 and 1) and cached as JSON
  (``$ZIPCCL_LINK_CACHE``, default ``~/.cache/zipccl/link.json``);
* the codec: encode/decode throughput of this process (measured once, on 4 MiB);
* the ratio: of the first chunk of the actual tensor (one chunk is encoded to estimate it).

and the cheapest candidate is taken.  Compression is off when it does not pay (fast links,
small messages).  Every :class:`Decision` records what was chosen and the predicted times;
``collectives`` logs it at DEBUG level on logger ``zipccl.collectives``.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

import codec

from .ring import slice_size

log = logging.getLogger("zipccl.collectives")


@dataclass(frozen=True)
class Link:
    alpha: float            # seconds per message
    beta: float             # bytes per second


@dataclass
class Decision:
    op: str
    choice: str                                     # "uncompressed", "compressed-ring", "compressed-gather"
    predicted_s: dict = field(default_factory=dict)
    ratio: float = 1.0


def _cache_path() -> Path:
    return Path(os.environ.get("ZIPCCL_LINK_CACHE", Path.home() / ".cache" / "zipccl" / "link.json"))


def calibrate(group=None, *, sizes=(1 << 10, 1 << 21, 1 << 23), reps: int = 3, save: bool = True) -> Link:
    """Measure alpha/beta between ranks 0 and 1 of ``group`` (all ranks must call it): the best of
    ``reps`` ping-pongs per size; beta from the two largest sizes, alpha from the smallest.  Two large
    sizes, since a link's first bytes go at more than its rate (a shaper's burst, socket buffers):
    with beta from 1 KiB and 4 MiB the 1 Gbit/s emulated link measured 134 MB/s against the
    119 MB/s that long transfers get, and the cost model took the wire for 12 % faster than it is."""
    rank = dist.get_rank(group)
    times = []
    for n in sizes:
        buf = torch.zeros(n, dtype=torch.uint8)
        best = float("inf")
        for _ in range(reps):
            dist.barrier(group)
            t = time.perf_counter()
            if rank == 0:
                dist.send(buf, 1, group=group)
                dist.recv(buf, 1, group=group)
            elif rank == 1:
                dist.recv(buf, 0, group=group)
                dist.send(buf, 0, group=group)
            best = min(best, (time.perf_counter() - t) / 2)
        times.append(best)
    t = torch.tensor(times, dtype=torch.float64)
    dist.broadcast(t, 0, group=group)
    t = t.tolist()
    beta = (sizes[-1] - sizes[-2]) / max(t[-1] - t[-2], 1e-9)
    link = Link(alpha=max(t[0] - sizes[0] / beta, 1e-6), beta=beta)
    if save and rank == 0:
        p = _cache_path()
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"alpha": link.alpha, "beta": link.beta}))
    return link


def cached_link() -> Link | None:
    try:
        d = json.loads(_cache_path().read_text())
        return Link(float(d["alpha"]), float(d["beta"]))
    except (OSError, ValueError, KeyError):
        return None


def measure_codec(x, reps: int = 5, out=None) -> tuple[float, float]:
    """(encode, decode) bytes of ``x`` per second on one thread, each the fastest of ``reps`` runs (after
    a warm-up on its first 64K values); ``out``: decode into it (a buffer the caller reuses, as the ring's
    pooled ones) rather than into a fresh array.  The fastest, since ranks sharing a host measure at the
    same moment."""
    threads = codec.get_num_threads()
    codec.set_num_threads(1)
    te = td = float("inf")
    try:
        codec.decode(codec.encode(x.reshape(-1)[:1 << 16]))
        for _ in range(reps):
            t = time.perf_counter()
            blob = codec.encode(x)
            te = min(te, time.perf_counter() - t)
            t = time.perf_counter()
            codec.decode(blob, out=out)
            td = min(td, time.perf_counter() - t)
    finally:
        codec.set_num_threads(threads)
    return x.nbytes / te, x.nbytes / td


def _bf16() -> np.dtype:
    """NumPy's bfloat16 (ml_dtypes, imported on first use: see codec.layouts)."""
    return codec.layouts.layout_named("bfloat16").numpy_dtype


@functools.cache
def codec_throughput(reps: int = 5) -> tuple[float, float]:
    """(encode, decode) bytes of input per second on one idle core, measured once (:func:`measure_codec`
    of 4 MiB of bfloat16 Gaussian values; the cost model scales them by :func:`cores_per_rank`).  The
    fastest of ``reps``: one timing each made the 1 Gbit/s 32 MiB all-reduce flip between compressed and
    uncompressed from one run to the next."""
    return measure_codec(np.random.default_rng(0).normal(0, 0.02, 1 << 21).astype(_bf16()), reps)


@functools.cache
def codec_call_seconds(reps: int = 20) -> float:
    """Seconds one encode plus one decode call cost beyond their bytes (argument checks, the header,
    starting the kernel): those of 64 values, the fastest of ``reps``.  Throughput alone priced a
    64-value frame at nanoseconds, so a stream a few bytes shorter than the raw values (a compact head)
    made compression look free where each call costs tens of microseconds."""
    x = np.random.default_rng(0).normal(0, 0.02, 64).astype(_bf16())
    codec.decode(codec.encode(x))
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        codec.decode(codec.encode(x))
        best = min(best, time.perf_counter() - t)
    return best


@functools.cache
def add_throughput(reps: int = 5) -> float:
    """Bytes per second of a bfloat16 ``a.add_(b)`` on one thread (the reduction's additions), the
    fastest of ``reps``."""
    a = torch.zeros(1 << 21, dtype=torch.bfloat16)
    b = torch.ones_like(a)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    dt = float("inf")
    try:
        a.add_(b)
        for _ in range(reps):
            t = time.perf_counter()
            a.add_(b)
            dt = min(dt, time.perf_counter() - t)
    finally:
        torch.set_num_threads(threads)
    return a.numel() * a.element_size() / max(dt, 1e-9)


SAMPLE_PIECES, SAMPLE_PIECE = 16, 4096


def sample_ratio(tensor) -> float:
    """The compression ratio of 16 pieces of 4096 values spread over the tensor, coded together (the
    tensor's head alone misleads: a flattened model's gradient starts with the word embedding's
    mostly-zero rows)."""
    flat = tensor.detach().reshape(-1)
    n = flat.numel()
    if n == 0:
        return 1.0
    if n > SAMPLE_PIECES * SAMPLE_PIECE:
        step = n // SAMPLE_PIECES
        flat = torch.cat([flat[i * step:i * step + SAMPLE_PIECE] for i in range(SAMPLE_PIECES)])
    return flat.numel() * flat.element_size() / len(codec.encode(flat.contiguous()))


def cores_per_rank() -> float:
    """CPU cores this rank can count on: the cores it may run on, shared by the ranks on this host
    (``LOCAL_WORLD_SIZE``, as torchrun and bench.cluster set it)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:                                   # not on Linux
        cores = os.cpu_count() or 1
    return max(cores / max(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1), 0.25)


def _overlapped(enc_s: float, dec_s: float, cores: float) -> float:
    """Codec seconds when the encode and decode threads run side by side on ``cores`` cores."""
    return max(max(enc_s, dec_s) / min(cores, 1.0), (enc_s + dec_s) / cores)


def ring_costs(op: str, nbytes: int, world: int, link: Link, ratio: float, enc: float, dec: float,
               add: float | None = None, call: float | None = None) -> tuple[float, float, float]:
    """``(wire, encode, decode)`` seconds of one rank's compressed ring for ``op`` on ``nbytes`` per rank:
    the wire time of the coded bytes it sends, and its encode and decode(+add) CPU seconds on one core.
    all_reduce: 2(N-1) hops of nbytes/N; the reduce-scatter encodes N shards' worth (its own, then each
    partial sum), decodes and adds N-1; the all-gather decodes N-1 (the bytes are forwarded as they
    came).  all_gather: N-1 hops of nbytes, one encode, N-1 decodes.  Every codec call (one a slice)
    also costs half of ``call`` (:func:`codec_call_seconds`) beyond its bytes."""
    n = world
    call = codec_call_seconds() if call is None else call
    if op == "all_reduce":
        add = add_throughput() if add is None else add
        shard = nbytes / n
        calls = max(1, -(-int(shard) // slice_size(int(shard)))) * call / 2      # per shard, encode or decode
        wire = 2 * (n - 1) * (link.alpha + shard / (link.beta * ratio))
        return wire, n * (shard / enc + calls), 2 * (n - 1) * (shard / dec + calls) + (n - 1) * shard / add
    if op == "all_gather":
        calls = max(1, -(-int(nbytes) // slice_size(int(nbytes)))) * call / 2
        return (n - 1) * (link.alpha + nbytes / (link.beta * ratio)), nbytes / enc + calls, (n - 1) * (nbytes / dec + calls)
    raise ValueError(f"no ring cost model for {op!r}")


def ring_bound(op: str, nbytes: int, world: int, link: Link, ratio: float, enc: float, dec: float,
               cores: float | None = None, add: float | None = None) -> float:
    """The compressed ring's lower bound: the slowest of its wire time and its codec CPU seconds on this
    rank's cores (the benchmark's yardstick: pipelining can at best hide the faster behind the slower)."""
    cores = cores_per_rank() if cores is None else cores
    wire, enc_s, dec_s = ring_costs(op, nbytes, world, link, ratio, enc, dec, add)
    return max(wire, (enc_s + dec_s) / cores)


def predict_all_reduce(nbytes: int, world: int, link: Link, ratio: float, enc: float, dec: float,
                       cores: float | None = None, add: float | None = None, while_computing: bool = False) -> dict:
    """Seconds for the slice-pipelined ring all-reduce of ``nbytes`` per rank (:func:`ring_costs`).
    The wire, the encode thread and the decode thread (which also adds) overlap, so the slowest of
    them sets the pace, plus the time to fill the pipeline (one slice through every stage).  The
    gather algorithm (every rank's whole stream to every rank, then N-1 local additions) runs its
    codec and additions after its wire, on the one thread that runs the call.

    ``while_computing``: the call runs while the same cores compute (a DDP hook during backward): its
    wire time is hidden behind the compute but every CPU second of the codec is taken from it, so a
    compressed candidate costs its wire time plus its codec seconds on this rank's cores (measured on
    the emulated cluster, 4 ranks on 2 cores: the compressed hook at 0.55-0.67x of torch DDP at
    1 Gbit/s, 1.06x at 100 Mbit/s, while the communication-only model chose compression at both)."""
    cores = cores_per_rank() if cores is None else cores
    add = add_throughput() if add is None else add
    n, hops = world, 2 * (world - 1)
    shard = nbytes / n
    plain = hops * (link.alpha + shard / link.beta)
    wire, enc_s, dec_s = ring_costs("all_reduce", nbytes, world, link, ratio, enc, dec, add)
    call = codec_call_seconds()
    piece = min(slice_size(int(shard)), shard)
    fill = hops * (piece / enc + piece / dec + call)
    ring = max(wire, _overlapped(enc_s, dec_s, cores)) + fill
    gather_cpu = nbytes / enc + (n - 1) * nbytes / dec + (n - 1) * nbytes / add + n * call / 2
    gather_wire = (n - 1) * (link.alpha + nbytes / (link.beta * ratio))
    gather = gather_wire + gather_cpu / min(cores, 1.0)
    if while_computing:
        ring, gather = wire + (enc_s + dec_s) / cores, gather_wire + gather_cpu / cores
    return {"uncompressed": plain, "compressed-ring": ring, "compressed-gather": gather}


def predict_all_gather(nbytes: int, world: int, link: Link, ratio: float, enc: float, dec: float,
                       cores: float | None = None) -> dict:
    """Seconds for the pipelined ring all-gather (:func:`ring_costs`), its stages overlapped."""
    cores = cores_per_rank() if cores is None else cores
    n = world
    plain = (n - 1) * (link.alpha + nbytes / link.beta)
    wire, enc_s, dec_s = ring_costs("all_gather", nbytes, world, link, ratio, enc, dec)
    piece = min(slice_size(nbytes), nbytes)
    fill = (n - 1) * (piece / enc + piece / dec + codec_call_seconds())
    return {"uncompressed": plain, "compressed-gather": max(wire, _overlapped(enc_s, dec_s, cores)) + fill}


# Beside compute, compress only for a predicted gain of 10 % or more: the codec's throughput is measured on
# idle cores, and next to a backward pass it is slower (measured on the emulated cluster, 4 ranks on 2
# cores, 1 Gbit/s: buckets predicted at parity ran at 0.58x of torch DDP compressed).
BESIDE_COMPUTE_MARGIN = 0.9


def decide(op: str, tensor, world: int, link: Link | None = None, while_computing: bool = False) -> Decision:
    """The cheapest way to run ``op`` on ``tensor``; without a calibrated link, compress.
    ``while_computing``: see :func:`predict_all_reduce` (all-reduce only)."""
    link = link or cached_link()
    nbytes = tensor.numel() * tensor.element_size()
    if link is None or world < 2:
        d = Decision(op, "compressed-ring" if op == "all_reduce" else "compressed-gather")
        log.debug("%s", d)
        return d
    ratio = sample_ratio(tensor)
    enc, dec = codec_throughput()
    if op == "all_reduce":
        pred = predict_all_reduce(nbytes, world, link, ratio, enc, dec, while_computing=while_computing)
    else:
        pred = predict_all_gather(nbytes, world, link, ratio, enc, dec)
    best = min(pred, key=pred.get)
    if while_computing and pred[best] > BESIDE_COMPUTE_MARGIN * pred["uncompressed"]:
        best = "uncompressed"
    d = Decision(op, best, pred, ratio)
    log.debug("%s", d)
    return d
