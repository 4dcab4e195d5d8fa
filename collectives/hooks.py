"""DDP communication hooks: gradients all-reduced (compressed) and averaged, for
``model.register_comm_hook(group, collectives.allreduce_hook)``.

:func:`allreduce_hook` returns at once: the bucket's all-reduce is queued on zipccl's communication
thread (:mod:`collectives.work`) and the returned ``torch.futures.Future`` is completed from there,
as torch's own ``allreduce_hook`` chains ``.then`` on the work's future.  So while bucket k is being
encoded, sent and decoded, backward goes on computing the gradients of bucket k+1; DDP waits on the
futures only at the end of backward.  :func:`blocking_allreduce_hook` communicates inside the hook
(backward stops meanwhile): kept to measure what the overlap brings (bench/ddp_train.py).

With ``compress="auto"`` the overlapped hook chooses by measuring whole training steps (:class:`StepTuner`):
a cost model of the link and the codec cannot see what the codec's threads take from a backward pass on the
same cores (measured: the model chose compression at 1 Gbit/s where it made steps 1.27x slower than torch's
own all-reduce), but the step time can.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from .calls import all_reduce
from .transport import global_rank


class StepTuner:
    """``compress="auto"`` for the overlapped DDP hook, chosen by measured step times: after ``warmup``
    steps, ``trial`` steps with the cost model deciding per bucket (``"model"``), then ``trial`` with torch's
    own all-reduce (``"native"``); the faster (rank 0's medians; every rank follows it) runs the next
    ``period`` steps; then the two are compared again (the data, the link or the load may have changed).
    A step is timed from its first bucket's hook call to the next step's, so it includes whatever
    communication backward could not hide.  The schedule depends on the step count only, so every rank
    switches at the same step."""
    ARMS = ("model", "native")

    def __init__(self, group=None, trial: int = 2, period: int = 200, warmup: int = 1):
        if trial < 1 or period < 0 or warmup < 0:
            raise ValueError(f"StepTuner: trial >= 1, period >= 0 and warmup >= 0, not {trial}, {period}, {warmup}")
        self.group, self.trial, self.period, self.warmup = group, trial, period, warmup
        self.step = -1
        self.arm = "model"
        self.best = "model"
        self.history: list[str] = []          # the arm of every step
        self._measuring: str | None = None
        self._t: float | None = None
        self._times: dict[str, list[float]] = {a: [] for a in self.ARMS}

    def on_bucket(self, bucket) -> str:
        """The arm for ``bucket`` (a DDP GradBucket); a step begins at bucket 0."""
        if bucket.index() == 0:
            now = time.perf_counter()
            if self._t is not None and self._measuring is not None:
                self._times[self._measuring].append(now - self._t)
            self._t = now
            self.step += 1
            self._advance()
            self.history.append(self.arm)
        return self.arm

    def _advance(self) -> None:
        self._measuring = None
        if self.step < self.warmup:
            self.arm = "model"
            return
        p = (self.step - self.warmup) % (2 * self.trial + self.period)
        if p < 2 * self.trial:
            self.arm = self._measuring = self.ARMS[p // self.trial]
            return
        if p == 2 * self.trial:
            self.best = self._agree(min(self.ARMS, key=lambda a: statistics.median(self._times[a])))
            self._times = {a: [] for a in self.ARMS}
        self.arm = self.best

    def _agree(self, mine: str) -> str:
        """Rank 0's choice, on every rank (called at the same step by all, between steps: no collective of
        the previous step is still running)."""
        code = torch.tensor([self.ARMS.index(mine)], dtype=torch.int64)
        dist.broadcast(code, global_rank(0, self.group), group=self.group)
        return self.ARMS[int(code)]


@dataclass
class HookState:
    """Options of the hooks: ``model.register_comm_hook(HookState(group, compress="auto"), allreduce_hook)``.
    ``compress``: True, False or "auto": the overlapped hook alternates, by measured step times
    (:class:`StepTuner`, made from ``tuner_trial`` and ``tuner_period``), between :mod:`collectives.strategy`
    deciding per bucket and torch's own all-reduce; the blocking hook leaves it to the strategy."""
    group: object = None
    compress: bool | str = True
    checksum: bool = False
    tuner_trial: int = 2
    tuner_period: int = 200
    tuner: StepTuner | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.compress == "auto" and self.tuner is None:
            self.tuner = StepTuner(self.group, self.tuner_trial, self.tuner_period)


def _options(state) -> HookState:
    return state if isinstance(state, HookState) else HookState(group=state)


def allreduce_hook(state, bucket):
    """DDP communication hook: compressed all-reduce of the bucket, averaged, overlapped with backward.
    ``state``: a :class:`HookState`, or the process group (None: the default one).  (No return
    annotation: DDP accepts only the exact ``torch.futures.Future[torch.Tensor]``.)"""
    o = _options(state)
    ws = dist.get_world_size(o.group)
    if o.tuner is not None and o.tuner.on_bucket(bucket) == "native":
        fut = dist.all_reduce(bucket.buffer(), group=o.group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0].div_(ws))
    work = all_reduce(bucket.buffer(), group=o.group, async_op=True, compress=o.compress, checksum=o.checksum,
                      while_computing=True)
    return work.get_future().then(lambda fut: fut.value()[0].div_(ws))


def blocking_allreduce_hook(state, bucket):
    """The same all-reduce, run inside the hook: backward waits for each bucket's communication."""
    o = _options(state)
    buf = bucket.buffer()
    fut: torch.futures.Future = torch.futures.Future()
    try:
        all_reduce(buf, group=o.group, compress=o.compress, checksum=o.checksum)
        buf.div_(dist.get_world_size(o.group))
        fut.set_result(buf)
    except Exception as e:     # noqa: BLE001 - handed to DDP
        fut.set_exception(e)
    return fut
