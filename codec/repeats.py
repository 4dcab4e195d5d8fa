"""The encoders' choice of a row-repeat section (format version 9, :func:`codec.format.pack_repeats`).

A tensor's rows (its last dimension) that repeat an earlier row bit for bit: the embedding layer's output
for padding tokens (the same token at the same position in every padded sequence of a batch), a KV cache's
padded slots, duplicated samples.  Measured on the ratio corpus (``bench/results/row_structure.md``): the
MiniLM embedding output of a padded batch repeats 58 % of its 384-value rows, each 128 rows (one sequence)
or more after its source, out of reach of any chunk-local model, and of every peer but LZ's long matches.

The choice, the same for every backend (NumPy on the host, torch on a device):

1. only tensors of two or more dimensions, of at least :data:`MIN_TENSOR_BYTES` bytes, whose rows hold at
   least :data:`MIN_ROW_BYTES` bytes;
2. a gate on a random sample of rows (one per :data:`GATE_BYTES` bytes, at most :data:`SAMPLE_MAX`, drawn
   from a fixed seed): at least 1 in :data:`MIN_SHARE` of them has the first 8 bytes of another sampled
   row, not +0, then (compared whole) the sampled rows that repeat another hold at least 1 in
   :data:`MIN_SHARE` of the sample's words other than +0 (rows that repeat rarely, each once in a large
   tensor, seldom meet in the sample: the gate looks for rows that repeat often, as padding's do);
3. then every row: a 64-bit key of a row's first, middle and last 8 bytes groups the rows; a row that
   equals the first row of its key (compared word for word) repeats it; rows whose key is 0 (all +0 there,
   as zero rows are) are left to the chunks (a zero-block bitmap codes a zero row in a few bits);
4. the section is kept where the repeated rows' words other than +0 take at least :data:`MIN_GAIN` times
   its bytes (a repeated row of a few non-zero values, a quantised one-hot attention row, saves little).

Chunk payloads then code the repeated rows as +0 (the encoder codes a copy of the words with those rows
cleared; the caller's tensor is never written).  Where the section is a quarter of the stream or more,
codec.api also codes the words without it and keeps the smaller stream (a constant tensor's rows are CONST
chunks either way).
"""
from __future__ import annotations

import functools

import numpy as np

from . import format as fmt

MIN_ROW_BYTES = 64        # shorter rows: a section entry (2-4 bytes) would take most of what a repeat saves
MIN_TENSOR_BYTES = 1 << 20   # smaller tensors are not searched (the search's fixed cost against their encode)
GATE_BYTES = 32768        # the gate samples one row per this many bytes of the tensor (at least 2)
MIN_SHARE = 32            # the gate: 1 in MIN_SHARE sampled rows' keys repeat, and of their non-+0 bytes
MIN_GAIN = 16             # the section: the repeated rows' non-+0 bytes at least MIN_GAIN times its size
VERIFY_BYTES = 1 << 16    # candidate rows compared this many bytes at a time (scratch that stays in cache)
SAMPLE_SEED = 0x5EED
SAMPLE_MAX = 4096         # the gate's most sampled rows
_RANDOM = np.random.Generator(np.random.PCG64(SAMPLE_SEED)).integers(0, 1 << 62, SAMPLE_MAX)
_MIX = np.array([1, 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F], dtype=np.uint64)   # odd multipliers


def _row_count(shape, numel: int, itemsize: int) -> tuple[int, int]:
    """``(values per row, whole rows)`` a section could use, or ``(0, 0)``."""
    if len(shape) < 2 or numel * itemsize < MIN_TENSOR_BYTES:
        return 0, 0
    row = int(shape[-1])
    if row * itemsize < MIN_ROW_BYTES or numel // row < 2:
        return 0, 0
    return row, numel // row


def _byte_rows(words: np.ndarray, rowbytes: int) -> np.ndarray:
    """The whole rows of ``words`` as a 2-D array of bytes (a view)."""
    b = words.view(np.uint8)
    return b[:(len(b) // rowbytes) * rowbytes].reshape(-1, rowbytes)


def _keys(words: np.ndarray, rowbytes: int, rows: np.ndarray | None = None) -> np.ndarray:
    """A 64-bit key of each of the rows ``rows`` (default: every row): its first, middle and last 8 bytes,
    mixed (0 for a row whose 24 bytes are +0)."""
    mid = rowbytes // 2 // 8 * 8
    b = _byte_rows(words, rowbytes)
    at = slice(None) if rows is None else rows
    k = np.concatenate([b[at, 0:8], b[at, mid:mid + 8], b[at, rowbytes - 8:rowbytes]], axis=1).view("<u8")
    return np.bitwise_xor.reduce(k * _MIX, axis=1)


def _matches(words: np.ndarray, row: int, rows: np.ndarray, keys: np.ndarray):
    """``(dst, src)``: each of the rows ``rows`` (ascending, of ``row`` values of the NumPy ``words``) that
    equals the first row of its key with a key other than 0, and that first row; dst ascending."""
    order = np.argsort(keys, kind="stable")          # by key, then by row
    k = keys[order]
    start = np.ones(len(k), bool)
    start[1:] = k[1:] != k[:-1]
    head = order[np.maximum.accumulate(np.where(start, np.arange(len(k)), 0))]
    cand = np.flatnonzero(~start & (k != 0))
    dst, src = rows[order[cand]], rows[head[cand]]
    whole = _byte_rows(words, row * words.itemsize)
    if whole.shape[1] % 8 == 0:
        whole = whole.view("<u8")                      # fewer, wider words to compare
    same = np.zeros(len(dst), bool)
    step = max(1, VERIFY_BYTES // (row * words.itemsize))
    for a in range(0, len(dst), step):
        b = min(a + step, len(dst))
        same[a:b] = (whole[dst[a:b]] == whole[src[a:b]]).all(1)
    dst, src = dst[same], src[same]
    o = np.argsort(dst)
    return dst[o], src[o]


def find(words, shape, itemsize: int):
    """``(row, dst, src, section bytes)`` of the row-repeat section to write for the flat words ``words`` (a NumPy uint
    array, or a torch integer tensor on a device: its gate reads a few bytes there; where it opens, the
    words are searched on the host) of a tensor of ``shape``, or None: no section."""
    row, n_rows = _row_count(shape, len(words), itemsize)
    if not row:
        return None
    rowbytes = row * itemsize
    m = min(max(2, n_rows * rowbytes // GATE_BYTES), len(_RANDOM))
    # a random sample (a fixed seed: every backend and machine picks the same rows), not an evenly spaced
    # or low-discrepancy one: those sample one or every position of a sequence's, and meet no repeat.
    # First the rows' first 8 bytes alone (few NumPy calls: this runs on every tensor searched)...
    pick, at = _sample(n_rows, rowbytes, m)
    if isinstance(words, np.ndarray):
        head = words.view(np.uint8)[at]
    else:
        import torch

        head = words.view(torch.uint8)[_device_index(at, words)].cpu().numpy()
    k = head.view("<u8").ravel().tolist()
    zeros = k.count(0)
    if (len(k) - len(set(k)) - max(zeros - 1, 0)) * MIN_SHARE < len(k):
        return None
    # ...then the sampled rows compared whole
    host = words if isinstance(words, np.ndarray) else words.cpu().numpy()
    dst, _ = _matches(host, row, pick, _keys(host, rowbytes, pick))
    if _nonzero_bytes(host, row, dst) * MIN_SHARE < _nonzero_bytes(host, row, pick):
        return None
    every = np.arange(n_rows, dtype=np.int64)
    dst, src = _matches(host, row, every, _keys(host, rowbytes))
    if not len(dst):
        return None
    section = fmt.pack_repeats(row, dst, src)
    if _nonzero_bytes(host, row, dst) < MIN_GAIN * len(section):     # the +0 words cost little in the chunks
        return None
    return row, dst, src, section


@functools.lru_cache(maxsize=64)
def _sample(n_rows: int, rowbytes: int, m: int):
    """The gate's sampled rows (distinct, ascending) and the offsets of their first 8 bytes (cached: a
    training loop encodes tensors of the same shapes again and again)."""
    pick = np.unique(_RANDOM[:m] % n_rows)
    at = (pick[:, None] * rowbytes + np.arange(8)).ravel()
    for a in (pick, at):
        a.flags.writeable = False
    return pick, at


def _nonzero_bytes(words: np.ndarray, row: int, rows: np.ndarray) -> int:
    """Bytes of the words other than +0 in the rows ``rows``."""
    whole = words[:(len(words) // row) * row].reshape(-1, row)
    step = max(1, VERIFY_BYTES // (row * words.itemsize))
    return words.itemsize * sum(int(np.count_nonzero(whole[rows[a:a + step]])) for a in range(0, len(rows), step))


def _device_index(a: np.ndarray, like):
    import torch

    return torch.from_numpy(np.ascontiguousarray(a)).to(like.device)


def cleared(words, row: int, dst: np.ndarray):
    """A copy of ``words`` with the rows ``dst`` (of ``row`` values) set to +0: what the chunks code."""
    if isinstance(words, np.ndarray):
        out = words.copy()
        out[:(len(out) // row) * row].reshape(-1, row)[dst] = 0
        return out
    out = words.clone()
    fmt.signed_view(out)[:(len(out) // row) * row].reshape(-1, row)[_device_index(dst, out)] = 0
    return out
