"""Encode and decode through the generated Triton kernels (GPU, or the CPU interpreter with
TRITON_INTERPRET=1).

Encoding: the reference encoder's per-chunk analysis on the host, the rANS coding of all chunks
in one launch of the generated ``rans_encode_chunks`` (still to move to the device: statistics,
symbols and planes).  Decoding has the same contract as :func:`reference.decode_chunks`.  The host validates every chunk header
(:func:`codec.format.parse_chunk_head`), builds the clipped decode tables, and launches one
program per CODED chunk; RAW and CONST chunks are copied on the host.  The kernel checks the
rANS invariants (words used, final states, counts) and reports per chunk; a failure raises
:class:`codec.FormatError` like every other backend.
"""
from __future__ import annotations

import numpy as np

from codec import codebook as cbk
from codec import format as fmt
from codec.format import FormatError

from .generate import load_triton

_META = 14


def _device():
    import os

    import torch

    return "cpu" if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available() else "cuda"


def _tables(cb, ref, lay):
    f, cum, _ = cbk.chunk_tables(cb, ref, lay.exp_bits, lay.has_inf)
    f = f.astype(np.int64)
    cum = cum.astype(np.int64)
    sym = np.repeat(np.arange(cbk.N_SYMBOLS), f)
    slot = np.arange(cbk.TOTAL)
    entries = sym | ((slot - cum[sym]) << 8) | (f[sym] << 20)
    hi = np.full(cbk.N_SYMBOLS, -1, np.int64)
    for s in range(cbk.SYM_WINDOW0, cbk.N_SYMBOLS):
        e = (s - cbk.SYM_WINDOW0) // 2 + ref - cbk.WINDOW_LOW
        if 0 <= e < (1 << lay.exp_bits):
            hi[s] = (e << lay.man_bits) | (((s - cbk.SYM_WINDOW0) & 1) << (lay.man_bits - 1))
    return entries, hi


def rans_encode(sym: np.ndarray, freq: np.ndarray, cum: np.ndarray, k: int, *, dtype: str = "bfloat16"):
    """:func:`reference.codec.rans_encode` on the generated Triton kernel (one program per chunk)."""
    import torch

    c, n = sym.shape
    dev = _device()
    cap = n + k                                        # at most one word per symbol, plus slack
    states = torch.zeros((c, fmt.MAX_LANES), dtype=torch.int64, device=dev)
    emitted = torch.zeros((c, cap), dtype=torch.int64, device=dev)
    count = torch.zeros(c, dtype=torch.int64, device=dev)
    t = lambda a: torch.as_tensor(np.ascontiguousarray(a, dtype=np.int64), device=dev)  # noqa: E731
    load_triton(dtype).rans_encode_chunks[(c,)](t(sym), t(freq), t(cum), states, emitted, count, n, k, cap)
    states = states.cpu().numpy()[:, :k].astype(np.uint32)
    em = emitted.cpu().numpy()
    cnt = count.cpu().numpy()
    return states, [em[i, :cnt[i]][::-1].astype(np.uint16) for i in range(c)]


def encode_chunks(words, lay, chunk_size):
    """The reference encoder's analysis (statistics, codebook, symbols, planes) on the host, the rANS
    coding of every chunk in the generated Triton kernel: the same bytes as every backend."""
    from reference import codec as ref

    return ref.encode_chunks(words, lay, chunk_size,
                             rans=lambda sym, freq, cum, k: rans_encode(sym, freq, cum, k, dtype=lay.name))


def decode_chunks(h: fmt.Header, buf, chunks: range, out: np.ndarray) -> None:
    import torch

    lay = h.layout
    mv = np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8)
    base = chunks.start * h.chunk_size
    metas, table_ids, tables, his, nzb, ids = [], {}, [], [], [], []
    out[:] = 0
    for i in chunks:
        a, b = h.chunk_span(i)
        n = h.chunk_len(i)
        lo = i * h.chunk_size - base
        kind = int(h.kinds[i])
        if kind == fmt.KIND_RAW:
            out[lo:lo + n] = mv[a:b].view(lay.uint.newbyteorder("<"))
            continue
        if kind == fmt.KIND_CONST:
            out[lo:lo + n] = mv[a:b].view(lay.uint.newbyteorder("<"))[0]
            continue
        hd = fmt.parse_chunk_head(h, mv, i)
        key = (hd.codebook, hd.ref)
        if key not in table_ids:
            table_ids[key] = len(tables)
            t, hh = _tables(hd.codebook, hd.ref, lay)
            tables.append(t)
            his.append(hh)
        k = fmt.lanes(hd.n_coded)
        plane_at = hd.words + 2 * hd.n_words
        esc_at = plane_at + fmt.packed_nbytes(hd.n_sm, lay.man_bits - hd.shift)
        nzb_at = len(nzb)
        if hd.mode:
            nzb.extend(np.flatnonzero(~hd.zero_blocks).tolist())
        metas.append([hd.states, hd.words, hd.n_words, plane_at, esc_at, hd.n_sm, hd.n_esc, hd.n_coded, hd.shift,
                      table_ids[key], lo, hd.mode, nzb_at, k])
        ids.append(i)
    if not metas:
        return
    dev = _device()
    t = lambda a, dt=torch.int64: torch.as_tensor(np.array(a), dtype=dt, device=dev)  # noqa: E731  (copies)
    tdtype = {1: torch.uint8, 2: torch.uint16, 4: torch.uint32}[lay.itemsize]
    dst = torch.from_numpy(out.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[lay.itemsize]).copy()).to(dev)
    err = torch.zeros(len(metas), dtype=torch.int32, device=dev)
    kernel = load_triton(lay.name).decode_coded_chunks
    kernel[(len(metas),)](t(mv, torch.uint8), t(metas), t(np.stack(tables)), t(np.stack(his)),
                          t(nzb if nzb else [0]), dst.view(tdtype) if dst.dtype != tdtype else dst, err)
    bad = np.flatnonzero(err.cpu().numpy())
    if len(bad):
        raise FormatError(f"chunk {ids[int(bad[0])]}: coded payload inconsistent (rANS stream or counts)")
    out[:] = dst.cpu().numpy().view(out.dtype)
