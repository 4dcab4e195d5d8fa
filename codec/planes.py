"""Split-send planes: a float tensor as (head, low bits), so the low bits can go on the wire first.

``split_low(x)`` returns ``head`` (the same words with their low ``M-1`` mantissa bits cleared:
sign, exponent and leading mantissa bit remain, which is all the codec models) and ``low`` (those
``M-1`` bits of every value, packed like a codec plane: nearly incompressible, ready to send at once).
``codec.encode(head)`` costs what coding ``x`` costs minus its residual bits, so
``len(low) + len(encode(head))`` is about ``len(encode(x))``; ``join_low(decode(head_stream), low)``
restores ``x`` bit for bit (NaN payloads included: a payload in the low bits travels in ``low``).
"""
from __future__ import annotations

import numpy as np

from . import _numba
from .api import encode
from .format import FormatError
from .layouts import is_torch, layout_for, packed_nbytes


def low_width(dtype) -> int:
    return layout_for(dtype).man_bits - 1


def worth_splitting(x: np.ndarray, sample: int = 1 << 16) -> bool:
    """Whether split-send costs (almost) no ratio on ``x``, judged on its first ``sample`` values by coding
    them both ways.  The low plane spends ``M-1`` bits on every value, which whole-value coding does not
    for zeros, constants or RAW chunks; never for the float8 formats (1-2 low bits: nothing to gain)."""
    lay = layout_for(x.dtype)
    if lay.man_bits - 1 < 6:
        return False
    part = np.ascontiguousarray(x).reshape(-1)[:sample]
    head, low = split_low(part)
    return len(encode(head)) + low.size <= len(encode(part)) * 1.005 + 64


def split_low(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(head, low)``: ``head`` has ``x``'s dtype and shape; ``low`` is uint8.  ``x`` is not modified.
    A torch tensor (on any device: a GPU's stays there) gives torch tensors, made with tensor ops."""
    if is_torch(x):
        return _split_low_torch(x)
    lay = layout_for(x.dtype)
    words = np.ascontiguousarray(x).reshape(-1).view(lay.uint)
    width = lay.man_bits - 1
    low = np.empty(packed_nbytes(words.size, width), np.uint8)
    _numba.pack_low_bits(words, width, low)
    head = words & lay.uint.type(~((1 << width) - 1) & ((1 << (8 * lay.uint.itemsize)) - 1))
    return head.view(x.dtype).reshape(x.shape), low


def join_low(head: np.ndarray, low) -> np.ndarray:
    """Inverse of :func:`split_low` (returns a new array; a tensor for torch tensors, on their device)."""
    if is_torch(head):
        return _join_low_torch(head, low)
    lay = layout_for(head.dtype)
    width = lay.man_bits - 1
    words = np.ascontiguousarray(head).reshape(-1).view(lay.uint).copy()
    low = np.frombuffer(memoryview(low).cast("B"), np.uint8)
    if low.size != packed_nbytes(words.size, width):
        raise FormatError(f"low-bit plane has {low.size} bytes, {packed_nbytes(words.size, width)} expected "
                          f"for {words.size} values of {width} bits")
    _numba.or_low_bits(low, width, words)
    return words.view(head.dtype).reshape(head.shape)


def _torch_words(x, lay):
    """``x``'s words as int64 (unsigned values) and the integer dtype they came from."""
    import torch

    signed = x.detach().contiguous().view(-1).view(lay.torch_view_ints)
    return signed.to(torch.int64) & ((1 << (8 * lay.itemsize)) - 1), signed.dtype


def _from_words(w, dtype, like):
    """Inverse of :func:`_torch_words`: int64 words back into ``like``'s dtype and shape."""
    import torch

    bits = 8 * like.element_size()
    if dtype != torch.uint8:                 # the signed views wrap the upper half
        w = torch.where(w >= 1 << (bits - 1), w - (1 << bits), w)
    return w.to(dtype).view(like.dtype).reshape(like.shape)


def _split_low_torch(x):
    import torch

    lay = layout_for(x.dtype)
    width = lay.man_bits - 1
    w, dtype = _torch_words(x, lay)
    full, rem = divmod(width, 8)
    parts = [((w >> (8 * b)) & 0xFF).to(torch.uint8) for b in range(full)]
    if rem:                                  # bit j of value i is bit i * rem + j of the packed tail
        bits = ((w[:, None] >> (8 * full + torch.arange(rem, device=w.device))) & 1).to(torch.uint8).reshape(-1)
        bits = torch.cat([bits, bits.new_zeros(-len(bits) % 8)]).view(-1, 8).to(torch.int32)
        parts.append((bits << torch.arange(8, device=w.device, dtype=torch.int32)).sum(dim=1).to(torch.uint8))
    low = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.uint8, device=w.device)
    return _from_words(w & ~((1 << width) - 1), dtype, x), low


def _join_low_torch(head, low):
    import torch

    lay = layout_for(head.dtype)
    width = lay.man_bits - 1
    w, dtype = _torch_words(head, lay)
    n = w.numel()
    if low.numel() != packed_nbytes(n, width):
        raise FormatError(f"low-bit plane has {low.numel()} bytes, {packed_nbytes(n, width)} expected "
                          f"for {n} values of {width} bits")
    full, rem = divmod(width, 8)
    low = low.to(w.device).view(-1).to(torch.int64)
    for b in range(full):
        w = w | (low[b * n:(b + 1) * n] << (8 * b))
    if rem:
        bits = ((low[full * n:, None] >> torch.arange(8, device=w.device)) & 1).reshape(-1)[:n * rem].view(n, rem)
        w = w | ((bits << torch.arange(rem, device=w.device)).sum(dim=1) << (8 * full))
    return _from_words(w, dtype, head)
