"""``compress="auto"``: rank 0 asks the cost model (:mod:`collectives.strategy`) and broadcasts its
choice, so that all ranks run the same algorithm; the latest decision is kept in :data:`last_decision`."""
from __future__ import annotations

import torch
import torch.distributed as dist

from . import strategy
from .transport import global_rank

last_decision = None     # the strategy.Decision of the latest compress="auto" call (rank 0's, shared by all)
CHOICES = ("uncompressed", "compressed-ring", "compressed-gather")   # the broadcast code is the index


def choose(op: str, tensor, group, while_computing: bool = False) -> tuple[bool, str]:
    """``(compress, algorithm)`` for ``op`` on ``tensor``, the same on every rank (all ranks call it);
    algorithm ``"native"`` means torch's own uncompressed collective.  ``while_computing``: the call
    overlaps compute on the same cores (:func:`collectives.strategy.predict_all_reduce`)."""
    global last_decision
    code = torch.zeros(1, dtype=torch.int64)
    d = None
    if dist.get_rank(group) == 0:
        d = strategy.decide(op, tensor, dist.get_world_size(group), while_computing=while_computing)
        code[0] = CHOICES.index(d.choice)
    dist.broadcast(code, global_rank(0, group), group=group)
    choice = CHOICES[int(code)]
    last_decision = d if d is not None else strategy.Decision(op, choice)
    if choice == "uncompressed":
        return False, "native"            # compression does not pay: torch's own collective is fastest
    return True, ("gather" if choice == "compressed-gather" else "ring")
