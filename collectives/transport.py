"""Transport: moving variable-size byte buffers (frames) between the ranks of a group over
torch.distributed, sizes first: a padded all-gather (the point-to-point paths send sizes inline)."""
from __future__ import annotations

import torch
import torch.distributed as dist


def global_rank(rank: int, group) -> int:
    """The global rank of ``group``'s rank ``rank`` (point-to-point calls and ``src`` take global ranks)."""
    return rank if group is None else dist.get_global_rank(group, rank)


def gather_buffers(payload: torch.Tensor, group) -> list[torch.Tensor]:
    """Every rank's ``payload`` (in rank order), whatever their sizes: one all-gather of the sizes, one of
    the payloads padded to the longest."""
    ws = dist.get_world_size(group)
    n = torch.tensor([payload.numel()], dtype=torch.int64)
    sizes = [torch.empty_like(n) for _ in range(ws)]
    dist.all_gather(sizes, n, group=group)
    longest = int(max(int(s) for s in sizes))
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[:payload.numel()] = payload
    bufs = [torch.empty(longest, dtype=torch.uint8) for _ in range(ws)]
    dist.all_gather(bufs, padded, group=group)
    return [b[:int(s)] for b, s in zip(bufs, sizes)]
