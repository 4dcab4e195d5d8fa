"""Row filters (format version 10, :func:`codec.format.pack_filter`): the transform, its inverse, and the
encoders' choice.

FILTER_UP codes, in place of each value's magnitude (every bit but the sign), the difference of its
magnitude and the magnitude of the value one row above (``width`` values earlier in the same chunk), modulo
``2^(E+M)``, zigzag-coded (0, -1, 1, -2, ... -> 0, 1, 2, 3, ...).  A chunk's first row is left as it is, so
every chunk still decodes alone.  Where a tensor's columns carry their own scale (attention probabilities:
one key's column of one head; activations after LayerNorm: one channel; a masked key's column of +0), the
value above is a far better guess of a value's exponent than the chunk's order-0 table: measured on the
ratio corpus (``bench/results/format_v10_*.md``), MiniLM's layer-5 attention probabilities code in 0.79 bits
of exponent given the value above, against 2.39 bits alone; their ratio goes from 3.37 to 4.00 in bf16
and 3.83 to 5.94 in e4m3.  Values equal to the one above become +0, which the chunks' zero symbol and
zero-block bitmaps take for little.

The choice, the same for every backend (NumPy on the host, torch on a device):

1. tensors of two or more dimensions, of at least :data:`MIN_TENSOR_BYTES` bytes, rows of the last
   dimension shorter than a chunk;
2. a gate on a sample of one value per :data:`SAMPLE_EVERY` (1,024 to :data:`SAMPLE`, in runs of
   :data:`SAMPLE_RUN` consecutive values at offsets drawn from a fixed seed), each with the value one row above
   it in its chunk: the order-0 cost of the filtered sample's symbols (+0, or
   exponent and leading mantissa bit; Miller-Madow corrected) and residual bits is at least 1 in
   :data:`MIN_SAVING` below the unfiltered sample's (the sample is counted by the host backend: NumPy or numba,
   the same integers; on a device by torch);
3. then the encoder codes the words both ways and keeps, chunk by chunk, the smaller payload (a tie: the
   unfiltered one): the section names the filtered chunks.  A stream with no filtered chunk has no section.

The transform is integer arithmetic on the words and reads nothing but them: NumPy here (the specification,
what the reference backend runs), numba in :mod:`codec._filters_numba` (the numba backend's ``filter_forward``
and ``filter_inverse``), torch for device streams.
"""
from __future__ import annotations

import functools

import numpy as np

from . import format as fmt
from .layouts import FloatLayout

MIN_TENSOR_BYTES = 1 << 20   # smaller tensors are not tried (the gate's and second encode's fixed costs)
SAMPLE = 4096                # the gate's most sampled values: one per SAMPLE_EVERY values, at least SAMPLE // 4
SAMPLE_EVERY = 1024
SAMPLE_RUN = 16              # ... in runs of this many consecutive values (a cache line or two, read at once)
SAMPLE_SEED = 0xF117E5
MIN_SAVING = 64              # the gate opens where the filtered sample costs >= 1/MIN_SAVING less
BLOCK_WORDS = 1 << 20        # the NumPy transforms work through about this many words at a time
_RANDOM = np.random.Generator(np.random.PCG64(SAMPLE_SEED)).integers(0, 1 << 62, SAMPLE)


def row_width(shape, numel: int, itemsize: int, chunk_size: int) -> int:
    """The row width a filter would use (the last dimension), or 0 where the encoders do not try one."""
    if len(shape) < 2 or numel * itemsize < MIN_TENSOR_BYTES:
        return 0
    w = int(shape[-1])
    return w if 1 <= w and 2 * w <= chunk_size else 0


def _masks(lay: FloatLayout):
    """``(k, magnitude mask, sign mask)`` as the word type's scalars: ``k = E + M`` magnitude bits."""
    k = lay.exp_bits + lay.man_bits
    return k, lay.uint.type((1 << k) - 1), lay.uint.type(1 << k)


def zigzag(d: np.ndarray, k: int, mask):
    """The zigzag codes of the ``k``-bit two's complement differences ``d`` (unsigned words, already masked)."""
    return ((d << 1) & mask) ^ ((d >> (k - 1)) * mask)


def unzigzag(z: np.ndarray):
    """The signed differences (int64) of the zigzag codes ``z``."""
    z = z.astype(np.int64)
    return (z >> 1) ^ -(z & 1)


def forward(words: np.ndarray, lay: FloatLayout, chunk_size: int, width: int) -> np.ndarray:
    """The FILTER_UP words of every chunk of ``words`` (1-D, unsigned; a new array, ``words`` untouched)."""
    k, mask, sign = _masks(lay)
    out = words.copy()
    n = len(words)
    step = max(1, BLOCK_WORDS // chunk_size) * chunk_size
    for a in range(0, n, step):
        b = min(n, a + step)
        full = (b - a) // chunk_size
        parts = [(words[a:a + full * chunk_size].reshape(full, chunk_size),
                  out[a:a + full * chunk_size].reshape(full, chunk_size))] if full else []
        if b - a > full * chunk_size:                    # the last, shorter chunk
            parts.append((words[a + full * chunk_size:b][None], out[a + full * chunk_size:b][None]))
        for src, dst in parts:
            if src.shape[1] <= width:
                continue
            mag = src & mask
            d = (mag[:, width:] - mag[:, :-width]) & mask
            dst[:, width:] = (src[:, width:] & sign) | zigzag(d, k, mask)
    return out


def inverse(words: np.ndarray, lay: FloatLayout, chunk_size: int, width: int, chunks, first: int = 0) -> None:
    """Undo FILTER_UP in place on the chunks of ``words`` (1-D, unsigned, from chunk ``first``; the last may be
    shorter) that ``chunks`` (indexed by chunk number) names: each chunk as rows of ``width`` values, a
    column's magnitudes the running sum of its differences below its first row, modulo ``2^k``."""
    k, mask, sign = _masks(lay)
    n = len(words)
    for j in np.flatnonzero(np.asarray(chunks[first:first + -(-n // chunk_size)], dtype=bool)).tolist():
        seg = words[j * chunk_size:min(n, (j + 1) * chunk_size)]
        if len(seg) <= width:
            continue
        rows = -(-len(seg) // width)
        d = np.zeros(rows * width, dtype=np.int64)
        d[:len(seg)] = unzigzag(seg & mask)
        d[:width] = seg[:width] & mask                    # the first row: magnitudes as they are
        mag = np.cumsum(d.reshape(rows, width), axis=0).reshape(-1)[:len(seg)] & ((1 << k) - 1)
        seg[width:] = (seg[width:] & sign) | mag[width:].astype(seg.dtype)


COST_BITS = 16                 # the gate's costs are integers, in 2^-16 bits (the same in every backend)
LOG2_TABLE = np.round(np.log2(np.maximum(np.arange(SAMPLE + 1), 1)) * (1 << COST_BITS)).astype(np.int64)
MM_BIAS = round((1 << COST_BITS) / (2 * np.log(2.0)))    # Miller-Madow: 1/2 nat a symbol seen, in 2^-16 bits


def sample_costs(c: np.ndarray, nz: np.ndarray, pos: np.ndarray, neg: np.ndarray, M: int) -> tuple[int, int]:
    """The estimated costs of the sample as it is and filtered (rows 0 and 1 of :func:`sample_counts`), integers
    in 2^-COST_BITS bits: the symbols' order-0 entropy ``sum c log2(N / c)`` (LOG2_TABLE), the Miller-Madow
    correction of a small sample's bias ((K - 1) / 2 nats for K symbols seen: the filtered sample's wider
    alphabet looks cheaper than it codes), and the residual bits (M - 1 mantissa bits, and the sign where the
    sample has both)."""
    out = []
    for t in (0, 1):
        ct = c[t][c[t] > 0]
        n = int(ct.sum())
        ent = int((ct * (LOG2_TABLE[n] - LOG2_TABLE[ct])).sum())
        both = 1 if pos[t] and neg[t] else 0
        out.append(ent + (len(ct) - 1) * MM_BIAS + int(nz[t]) * ((M - 1 + both) << COST_BITS))
    return out[0], out[1]


def numpy_costs(words, at, width: int, k: int, M: int, nbins: int) -> tuple[int, int]:
    """:func:`sample_costs` of :func:`sample_counts` (what the NumPy reference runs)."""
    return sample_costs(*sample_counts(words, at, width, k, M, nbins), M)


def torch_costs(words, at, width: int, k: int, M: int, nbins: int) -> tuple[int, int]:
    """:func:`sample_costs` of :func:`sample_counts_torch` (a device tensor's words)."""
    return sample_costs(*sample_counts_torch(words, at, width, k, M, nbins), M)


@functools.lru_cache(maxsize=64)
def sample_offsets(numel: int, chunk_size: int, width: int) -> np.ndarray:
    """The gate's sampled offsets, ascending (read in address order): runs of SAMPLE_RUN consecutive values from
    the fixed random draws ``_RANDOM % numel``, those runs that lie in one chunk with a value a row above each
    (cached: the same for every tensor of this size, chunk size and row width)."""
    runs = min(SAMPLE, max(SAMPLE // 4, numel // SAMPLE_EVERY)) // SAMPLE_RUN
    at = np.sort(_RANDOM[:runs] % numel)
    off = at % chunk_size
    at = at[(off >= width) & (off + SAMPLE_RUN <= chunk_size) & (at + SAMPLE_RUN <= numel)]
    at = (at[:, None] + np.arange(SAMPLE_RUN)).reshape(-1)
    at.flags.writeable = False
    return at


def sample_counts(words: np.ndarray, at: np.ndarray, width: int, k: int, M: int, nbins: int):
    """The gate's statistics of ``words`` at the offsets ``at`` (:func:`sample_offsets`): ``(counts (2, nbins),
    non-zero (2,), positive (2,), negative (2,))``, row 0 of each for the words as they are, row 1 for their
    FILTER_UP words; a symbol is 0 for +0, else ``magnitude >> (M - 1)`` plus 1 (exponent and leading mantissa
    bit).  (codec._filters_numba has the numba twin.)"""
    return _sample_stats(words[at], words[at - width], k, M, nbins)


def _sample_stats(v: np.ndarray, above: np.ndarray, k: int, M: int, nbins: int):
    """:func:`sample_counts` of the sampled words ``v`` and the words a row above them (unsigned)."""
    mask = (1 << k) - 1
    v = v.astype(np.int64)
    mag = v & mask
    up = zigzag((mag - (above.astype(np.int64) & mask)) & mask, k, mask)
    neg = (v >> k) != 0
    c = np.zeros((2, nbins), np.int64)
    nz, pos, negs = (np.zeros(2, np.int64) for _ in range(3))
    for t, m in enumerate((mag, up)):
        c[t] = np.bincount(np.where(m == 0, 0, (m >> (M - 1)) + 1), minlength=nbins)
        nonzero = m != 0
        nz[t], pos[t], negs[t] = nonzero.sum(), (nonzero & ~neg).sum(), (nonzero & neg).sum()
    return c, nz, pos, negs


def sample_counts_torch(words, at: np.ndarray, width: int, k: int, M: int, nbins: int):
    """:func:`sample_counts` of a torch tensor of words on its device: the sample (at most SAMPLE words and those
    above them) is gathered there and counted on the host, by the same code."""
    import torch

    idx = torch.from_numpy(np.array(at)).to(words.device)
    got = fmt.signed_view(words)[torch.cat([idx, idx - width])].cpu().numpy()
    got = got.view(np.dtype(f"u{got.itemsize}"))
    return _sample_stats(got[:len(at)], got[len(at):], k, M, nbins)


def choose(words, shape, lay: FloatLayout, chunk_size: int, costs=numpy_costs) -> int:
    """The row width the encoders try FILTER_UP with, or 0 (the gate: steps 1 and 2 above).  ``words``: a
    NumPy array, or a torch tensor with ``costs=torch_costs``; ``costs``: :func:`numpy_costs` or a twin of it
    (the same integers: codec._filters_numba's ``filter_costs``)."""
    n = words.numel() if callable(getattr(words, "numel", None)) else len(words)
    width = row_width(shape, n, lay.itemsize, chunk_size)
    if not width:
        return 0
    at = sample_offsets(n, chunk_size, width)
    if len(at) < SAMPLE // 16:
        return 0
    M = lay.man_bits
    raw, up = costs(words, at, width, lay.exp_bits + M, M, (1 << (lay.exp_bits + 1)) + 1)
    return width if up * MIN_SAVING < raw * (MIN_SAVING - 1) else 0


def _chunk_blocks(n: int, chunk_size: int, ids):
    """The chunks ``ids`` (ascending) in blocks of about BLOCK_WORDS words: ``(first chunk, chunks)``
    lists of chunk ids whose chunks are whole (``chunk_size`` values), and the last, shorter chunk apart."""
    per = max(1, BLOCK_WORDS // chunk_size)
    full = [j for j in ids if (j + 1) * chunk_size <= n]
    blocks = [full[i:i + per] for i in range(0, len(full), per)]
    if ids and (ids[-1] + 1) * chunk_size > n:
        blocks.append([ids[-1]])
    return blocks


def _torch_rows(sv, ids, n: int, chunk_size: int):
    """The words of chunks ``ids`` (all whole, or one last chunk) of the signed view ``sv``, as unsigned int64
    rows ``(len(ids), length)``, and the flat offsets they came from."""
    import torch

    length = min(chunk_size, n - ids[0] * chunk_size)
    at = (torch.as_tensor(ids, device=sv.device, dtype=torch.int64)[:, None] * chunk_size
          + torch.arange(length, device=sv.device, dtype=torch.int64)).reshape(-1)
    bits = 8 * sv.element_size()
    return (sv[at].to(torch.int64) & ((1 << bits) - 1)).view(len(ids), length), at


def forward_torch(words, lay: FloatLayout, chunk_size: int, width: int):
    """:func:`forward` of a torch tensor of words, on its device (a new tensor), about BLOCK_WORDS words at a
    time (bounded scratch)."""
    k = lay.exp_bits + lay.man_bits
    mask = (1 << k) - 1
    n = words.numel()
    out = words.clone()
    sv, so = fmt.signed_view(words), fmt.signed_view(out)
    for ids in _chunk_blocks(n, chunk_size, list(range(-(-n // chunk_size)))):
        m, at = _torch_rows(sv, ids, n, chunk_size)
        if m.shape[1] <= width:
            continue
        mag = m & mask
        d = (mag[:, width:] - mag[:, :-width]) & mask
        m[:, width:] = (m[:, width:] & (1 << k)) | (((d << 1) & mask) ^ ((d >> (k - 1)) * mask))
        so[at] = _to_signed(m.reshape(-1), lay)
    return out


def _to_signed(v, lay: FloatLayout):
    """int64 tensor of unsigned word values (< 2^bits) as the signed integers of the word's width (torch does
    no arithmetic on uint16/uint32)."""
    import torch

    bits = 8 * lay.itemsize
    v = v - ((v >> (bits - 1)) & 1) * (1 << bits)
    return v.to({8: torch.int8, 16: torch.int16, 32: torch.int32}[bits])


def inverse_torch(filt: fmt.Filter, words, lay: FloatLayout, chunk_size: int) -> None:
    """:func:`inverse` of a whole stream's words in a torch tensor, in place on its device: the filtered chunks
    about BLOCK_WORDS words at a time, each block's columns summed at once (a cumulative sum over rows)."""
    import torch

    k = lay.exp_bits + lay.man_bits
    mask = (1 << k) - 1
    n = words.numel()
    width = filt.width
    sv = fmt.signed_view(words)
    for ids in _chunk_blocks(n, chunk_size, np.flatnonzero(filt.chunks).tolist()):
        seg, at = _torch_rows(sv, ids, n, chunk_size)
        length = seg.shape[1]
        if length <= width:
            continue
        rows = -(-length // width)
        d = torch.zeros((len(ids), rows * width), dtype=torch.int64, device=words.device)
        z = seg & mask
        d[:, :length] = (z >> 1) ^ -(z & 1)
        d[:, :width] = z[:, :width]                      # the first row: magnitudes as they are
        mag = torch.cumsum(d.view(len(ids), rows, width), dim=1).view(len(ids), -1)[:, :length] & mask
        seg[:, width:] = (seg[:, width:] & (1 << k)) | mag[:, width:]
        sv[at] = _to_signed(seg.reshape(-1), lay)


def merge(plain, filtered, width: int, *, repeats: bytes = b"") -> bytes:
    """One stream from two of the same words, coded unfiltered (``plain``) and with FILTER_UP (``filtered``):
    each chunk's smaller payload (a tie: the unfiltered one) and a section naming the filtered chunks; the
    unfiltered stream as it is where that stream would not be shorter (no chunk's filtered payload is smaller,
    or what they save does not pay for the section).  ``repeats``: both streams' row-repeat section, carried
    over."""
    hp, hf = fmt.parse_header(plain), fmt.parse_header(filtered)
    sp, sf = (np.diff(h.ends, prepend=0) for h in (hp, hf))
    pick = sf < sp
    if not pick.any():
        return plain
    mp, mf = memoryview(plain).cast("B"), memoryview(filtered).cast("B")
    kinds = np.where(pick, hf.kinds, hp.kinds)
    sizes = np.where(pick, sf, sp)
    crcs = np.where(pick, hf.crcs, hp.crcs) if hp.checksum else None
    head = fmt.pack_header(hp.layout, hp.shape, hp.chunk_size, hp.flags, kinds, sizes, crcs, repeats=repeats,
                           filter=fmt.pack_filter(width, pick))
    if len(head) + int(sizes.sum()) >= len(plain):
        return plain
    out = bytearray(len(head) + int(sizes.sum()))
    out[:len(head)] = head
    at = len(head)
    for j in range(hp.n_chunks):
        a, b = (hf if pick[j] else hp).chunk_span(j)
        out[at:at + b - a] = (mf if pick[j] else mp)[a:b]
        at += b - a
    return out
