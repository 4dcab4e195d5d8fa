"""The agreement check: before any data moves, all ranks exchange a small description of their tensor
(dimensions, dtype code, shape) and a call whose ranks disagree raises an error naming them.  The same
exchange carries rank 0's choice for ``compress="auto"`` (:mod:`collectives.auto`), so an automatic
call costs one small collective before its data, not two."""
from __future__ import annotations

import torch
import torch.distributed as dist

from codec.layouts import LAYOUTS

MAX_DIMS = 8
# the dtype code in a description is the index in this list (the order of codec.layouts.LAYOUTS)
DTYPES = [lay.torch_dtype for lay in LAYOUTS]


def describe(t: torch.Tensor, announce: int = -1) -> torch.Tensor:
    """``[ndim, dtype code (-2: unsupported), *shape, -1 padding, announce]``: ``MAX_DIMS + 3`` int64
    values; the last is not compared (rank 0's ``compress="auto"`` choice travels there)."""
    if t.dim() > MAX_DIMS:
        raise ValueError(f"at most {MAX_DIMS} dimensions are supported")
    d = torch.full((MAX_DIMS + 3,), -1, dtype=torch.int64)
    d[0] = t.dim()
    d[1] = DTYPES.index(t.dtype) if t.dtype in DTYPES else -2
    d[2:2 + t.dim()] = torch.tensor(t.shape, dtype=torch.int64)
    d[-1] = announce
    return d


def supported(t: torch.Tensor) -> bool:
    return t.dtype in DTYPES


def check_agree(t: torch.Tensor, group, what: str, announce: int = -1) -> int:
    """All ranks must pass tensors of the same shape and dtype.  Returns rank 0's ``announce``."""
    ws = dist.get_world_size(group)
    if not supported(t):
        raise TypeError(f"{what}: unsupported dtype {t.dtype}; supported: {', '.join(map(str, DTYPES))}")
    mine = describe(t, announce)
    all_ = [torch.empty_like(mine) for _ in range(ws)]
    dist.all_gather(all_, mine, group=group)
    bad = [r for r in range(ws) if not torch.equal(all_[r][:-1], all_[0][:-1])]
    if bad:
        def fmt(d):
            return f"{DTYPES[int(d[1])] if d[1] >= 0 else '?'}{tuple(int(x) for x in d[2:2 + int(d[0])])}"
        raise ValueError(f"{what}: ranks disagree on shape/dtype: rank 0 has {fmt(all_[0])}, "
                         + ", ".join(f"rank {r} has {fmt(all_[r])}" for r in bad))
    return int(all_[0][-1])
