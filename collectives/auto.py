"""``compress="auto"``: rank 0 asks the cost model (:mod:`collectives.strategy`) and its choice travels
to every rank in the call's agreement exchange (:func:`collectives.agreement.check_agree`), so that all
ranks run the same algorithm; the latest decision is kept in :data:`last_decision`."""
from __future__ import annotations

import torch.distributed as dist

from . import strategy
from .agreement import check_agree, supported

last_decision = None     # the strategy.Decision of the latest compress="auto" call (rank 0's, shared by all)
CHOICES = ("uncompressed", "compressed-ring", "compressed-gather")   # the announced code is the index


def agree_and_choose(op: str, tensor, group, while_computing: bool = False) -> tuple[bool, str]:
    """The agreement check of ``op`` on ``tensor`` (all ranks call it), then ``(compress, algorithm)``,
    the same on every rank; algorithm ``"native"`` means torch's own uncompressed collective.
    ``while_computing``: the call overlaps compute on the same cores
    (:func:`collectives.strategy.predict_all_reduce`)."""
    global last_decision
    d = None
    if dist.get_rank(group) == 0 and supported(tensor):
        d = strategy.decide(op, tensor, dist.get_world_size(group), while_computing=while_computing)
    code = check_agree(tensor, group, op, CHOICES.index(d.choice) if d is not None else -1)
    if not 0 <= code < len(CHOICES):
        raise ValueError(f"{op}: rank 0 announced choice {code}, not one of 0..{len(CHOICES) - 1}")
    choice = CHOICES[code]
    last_decision = d if d is not None else strategy.Decision(op, choice)
    if choice == "uncompressed":
        return False, "native"            # compression does not pay: uncompressed (the caller picks the algorithm)
    return True, ("gather" if choice == "compressed-gather" else "ring")
