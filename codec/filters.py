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
2. a gate on a sample of :data:`SAMPLE` values drawn from a fixed seed (each with the value one row above it
   in its chunk): the order-0 cost of the filtered sample's symbols (+0, or exponent and leading mantissa
   bit) and residual bits is at least 1 in :data:`MIN_SAVING` below the unfiltered sample's;
3. then the encoder codes the words both ways and keeps, chunk by chunk, the smaller payload (a tie: the
   unfiltered one): the section names the filtered chunks.  A stream with no filtered chunk has no section.

The transform is integer arithmetic on the words and reads nothing but them: NumPy here (the specification,
what the reference backend runs), numba in :mod:`codec._filters_numba` (the numba backend's ``filter_forward``
and ``filter_inverse``), torch for device streams.
"""
from __future__ import annotations

import numpy as np

from . import format as fmt
from .layouts import FloatLayout

MIN_TENSOR_BYTES = 1 << 20   # smaller tensors are not tried (the gate's and second encode's fixed costs)
SAMPLE = 4096                # the gate's sampled values
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


def _predicted(n: int, chunk_size: int, width: int, first: int = 0) -> np.ndarray:
    """Which of ``n`` words from chunk-aligned offset ``first`` have a value a row above in their chunk."""
    return (np.arange(first, first + n, dtype=np.int64) % chunk_size) >= width


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


def _sample_positions(numel: int, chunk_size: int, width: int) -> np.ndarray:
    """The gate's sampled offsets: each has a value a row above in its chunk."""
    at = _RANDOM % numel
    return at[(at % chunk_size) >= width]


def _cost(counts: np.ndarray, n_nonzero: int, both_signs: bool, M: int) -> float:
    """Estimated bits of a sample: its symbols' order-0 entropy (``counts``: +0 first) and residual bits."""
    c = counts[counts > 0].astype(np.float64)
    total = c.sum()
    return float((c * np.log2(total / c)).sum()) + n_nonzero * (M - 1 + (1 if both_signs else 0))


def _gate(counts_raw, counts_up, nz_raw, nz_up, signs_raw, signs_up, M) -> bool:
    raw = _cost(counts_raw, nz_raw, signs_raw, M)
    return _cost(counts_up, nz_up, signs_up, M) * MIN_SAVING <= raw * (MIN_SAVING - 1)


def choose(words: np.ndarray, shape, lay: FloatLayout, chunk_size: int) -> int:
    """The row width the encoders try FILTER_UP with, or 0 (the gate: steps 1 and 2 above)."""
    width = row_width(shape, len(words), lay.itemsize, chunk_size)
    if not width:
        return 0
    at = _sample_positions(len(words), chunk_size, width)
    if len(at) < SAMPLE // 4:
        return 0
    k, mask, sign = _masks(lay)
    M = lay.man_bits
    v = words[at]
    mag = v & mask
    up = zigzag((mag - (words[at - width] & mask)) & mask, k, mask)
    nbins = (1 << (lay.exp_bits + 1)) + 1
    got = []
    for m in (mag, up):
        keys = np.where(m == 0, 0, (m >> (M - 1)).astype(np.int64) + 1)
        nonzero = m != 0
        neg = (v & sign) != 0
        got.append((np.bincount(keys, minlength=nbins), int(nonzero.sum()),
                    bool((neg & nonzero).any() and (~neg & nonzero).any())))
    (c0, n0, s0), (c1, n1, s1) = got
    return width if _gate(c0, c1, n0, n1, s0, s1, M) else 0


def choose_torch(words, shape, lay: FloatLayout, chunk_size: int) -> int:
    """:func:`choose` on a torch tensor of words (on its device): the same sample and the same counts."""
    import torch

    width = row_width(shape, words.numel(), lay.itemsize, chunk_size)
    if not width:
        return 0
    at = _sample_positions(words.numel(), chunk_size, width)
    if len(at) < SAMPLE // 4:
        return 0
    k = lay.exp_bits + lay.man_bits
    M = lay.man_bits
    idx = torch.from_numpy(at).to(words.device)
    v = fmt.signed_view(words)[idx].to(torch.int64) & ((1 << (k + 1)) - 1)
    above = fmt.signed_view(words)[idx - width].to(torch.int64) & ((1 << k) - 1)
    mag = v & ((1 << k) - 1)
    d = (mag - above) & ((1 << k) - 1)
    up = ((d << 1) & ((1 << k) - 1)) ^ ((d >> (k - 1)) * ((1 << k) - 1))
    nbins = (1 << (lay.exp_bits + 1)) + 1
    neg = (v >> k) != 0
    got = []
    for m in (mag, up):
        keys = torch.where(m == 0, 0, (m >> (M - 1)) + 1)
        nonzero = m != 0
        got.append((torch.bincount(keys, minlength=nbins).cpu().numpy(), int(nonzero.sum()),
                    bool((neg & nonzero).any()) and bool((~neg & nonzero).any())))
    (c0, n0, s0), (c1, n1, s1) = got
    return width if _gate(c0, c1, n0, n1, s0, s1, M) else 0


def forward_torch(words, lay: FloatLayout, chunk_size: int, width: int):
    """:func:`forward` of a torch tensor of words, on its device (a new tensor)."""
    import torch

    k = lay.exp_bits + lay.man_bits
    mask = (1 << k) - 1
    src = fmt.signed_view(words).to(torch.int64)
    n = src.numel()
    rows = -(-n // chunk_size)
    pad = torch.zeros(rows * chunk_size, dtype=torch.int64, device=words.device)
    pad[:n] = src
    m = pad.view(rows, chunk_size)
    mag = m & mask
    d = (mag[:, width:] - mag[:, :-width]) & mask
    res = m.clone()
    res[:, width:] = (m[:, width:] & (1 << k)) | (((d << 1) & mask) ^ ((d >> (k - 1)) * mask))
    out = torch.empty_like(words)
    fmt.signed_view(out).copy_(_to_signed(res.view(-1)[:n], lay))
    return out


def _to_signed(v, lay: FloatLayout):
    """int64 tensor of unsigned word values as the signed integers of the word's width (torch does no
    arithmetic on uint16/uint32)."""
    import torch

    bits = 8 * lay.itemsize
    v = v - ((v >> (bits - 1)) & 1) * (1 << bits)
    return v.to({8: torch.int8, 16: torch.int16, 32: torch.int32}[bits])


def inverse_torch(filt: fmt.Filter, words, lay: FloatLayout, chunk_size: int) -> None:
    """:func:`inverse` of a whole stream's words in a torch tensor, in place on its device."""
    import torch

    k = lay.exp_bits + lay.man_bits
    mask = (1 << k) - 1
    n = words.numel()
    width = filt.width
    ids = np.flatnonzero(filt.chunks).tolist()
    per = -(-chunk_size // width) * width
    sv = fmt.signed_view(words)
    for j in ids:
        a, b = j * chunk_size, min(n, (j + 1) * chunk_size)
        if b - a <= width:
            continue
        seg = sv[a:b].to(torch.int64) & ((1 << (k + 1)) - 1)
        d = torch.zeros(per, dtype=torch.int64, device=words.device)
        z = seg & mask
        d[:b - a] = (z >> 1) ^ -(z & 1)
        d[:width] = z[:width]
        mag = torch.cumsum(d.view(-1, width), dim=0).view(-1)[:b - a] & mask
        sv[a + width:b] = _to_signed((seg[width:] & (1 << k)) | mag[width:], lay)


def merge(plain, filtered, width: int, *, repeats: bytes = b"") -> bytes:
    """One stream from two of the same words, coded unfiltered (``plain``) and with FILTER_UP (``filtered``):
    each chunk's smaller payload (a tie: the unfiltered one) and a section naming the filtered chunks; the
    unfiltered stream as it is where no chunk's filtered payload is smaller.  ``repeats``: both streams'
    row-repeat section, carried over."""
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
    out = bytearray(len(head) + int(sizes.sum()))
    out[:len(head)] = head
    at = len(head)
    for j in range(hp.n_chunks):
        a, b = (hf if pick[j] else hp).chunk_span(j)
        out[at:at + b - a] = (mf if pick[j] else mp)[a:b]
        at += b - a
    return out
