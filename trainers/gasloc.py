"""GASLoC: decentralized local-step training with gossip and an outer momentum (no global all-reduce).

Per round every worker i runs ``H`` local AdamW steps from its own ``theta_i``, forms
``g_i = theta_i,H - theta_i,0`` and ``y_i = theta_i,0 + eta * g_i``, then gossips through the
weighted graph Laplacian ``L`` of this round's random matching, with an outer momentum term:

    theta_next = y - alpha * L y + gamma * (y - y_prev)

For a matched pair (i, j) with unit weight, ``(L y)_i = y_i - y_j``; ``alpha = 0.5`` averages the
pair.  Peers are drawn each round as a random matching over the allowed edges of the peer graph
(the same draw on every worker, from a shared seed) and exchanged with compressed
``collectives.send``/``recv``.  ``gamma = 0`` is plain gossip; ``topology="complete-average"``
replaces the matching by a full average (``L = I - 11^T/N``, ``alpha = 1``) and then, with
``gamma = 0``, GASLoC reduces to DiLoCo with outer SGD (lr ``eta``, no momentum).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

import collectives

from .determinism import pinned
from .diloco import WireStats, local_steps


@dataclass
class GASLoCConfig:
    inner_steps: int = 10          # H
    eta: float = 0.7               # outer step on the local pseudo-gradient
    alpha: float = 0.5             # gossip step on the Laplacian
    gamma: float = 0.0             # outer momentum
    inner_lr: float = 4e-4
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    topology: str = "random-matching"         # or "complete-average"
    edges: list | None = None                 # allowed peer pairs; None: complete graph
    compress: bool = True
    seed: int = 0
    threads: int = 1                          # torch intra-op threads in outer_step (see DiLoCoConfig)
    _adj: dict = field(default_factory=dict, repr=False)

    def validate(self, world: int):
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0 (0: keep torch's setting), got {self.threads}")
        if self.inner_steps < 1:
            raise ValueError(f"inner_steps (H) must be >= 1, got {self.inner_steps}")
        if self.topology not in ("random-matching", "complete-average"):
            raise ValueError(f"unknown topology {self.topology!r}")
        # stable gossip needs |1 - alpha * lambda| <= 1 for every Laplacian eigenvalue lambda:
        # a matched pair has lambda = 2 (so alpha <= 1), the normalised complete graph lambda = 1 (alpha <= 2)
        limit = 1.0 if self.topology == "random-matching" else 2.0
        if not 0 < self.alpha <= limit:
            raise ValueError(f"alpha={self.alpha} outside the stable range (0, {limit}] for {self.topology}")
        if not 0 <= self.gamma < 1:
            raise ValueError(f"gamma must be in [0, 1), got {self.gamma}")
        edges = self.edges if self.edges is not None else [(i, j) for i in range(world) for j in range(i + 1, world)]
        adj = {i: set() for i in range(world)}
        for i, j in edges:
            if not (0 <= i < world and 0 <= j < world) or i == j:
                raise ValueError(f"bad edge ({i}, {j}) for {world} workers")
            adj[i].add(j)
            adj[j].add(i)
        seen, todo = {0}, [0]
        while todo:
            for n in adj[todo.pop()]:
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        if len(seen) != world:
            raise ValueError(f"the peer graph is disconnected: workers {sorted(set(range(world)) - seen)} "
                             "are unreachable from worker 0")
        self._adj = adj


def random_matching(adj: dict, rng: np.random.Generator) -> dict:
    """A random maximal matching over the allowed edges: ``{worker: peer}`` (unmatched workers absent)."""
    order = rng.permutation(len(adj))
    peer = {}
    for i in order:
        i = int(i)
        if i in peer:
            continue
        free = [j for j in sorted(adj[i]) if j not in peer]
        if free:
            j = free[int(rng.integers(len(free)))]
            peer[i], peer[j] = j, i
    return peer


class GASLoC:
    def __init__(self, model, cfg: GASLoCConfig, group=None):
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        cfg.validate(self.world)
        self.model, self.cfg, self.group = model, cfg, group
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.inner = torch.optim.AdamW(self.params, lr=cfg.inner_lr, weight_decay=cfg.weight_decay,
                                       betas=cfg.betas)
        self.y_prev = None
        self.round = 0
        self.wire = WireStats()

    def _flat(self):
        return torch.cat([p.detach().reshape(-1) for p in self.params])

    def _load(self, flat):
        off = 0
        with torch.no_grad():
            for p in self.params:
                p.copy_(flat[off:off + p.numel()].view_as(p))
                off += p.numel()

    def outer_step(self, data_iter) -> float:
        """H local steps, then the gossip exchange; with ``cfg.threads`` torch threads and deterministic
        algorithms (:func:`trainers.determinism.pinned`). Returns the mean inner loss."""
        with pinned(self.cfg.threads):
            return self._outer_step(data_iter)

    def _outer_step(self, data_iter) -> float:
        theta0 = self._flat().clone()
        loss = local_steps(self.model, self.inner, data_iter, self.cfg.inner_steps)
        g = self._flat() - theta0
        y = theta0 + self.cfg.eta * g
        if self.cfg.topology == "complete-average":
            s = y.clone()
            with self.wire.measure(y):
                collectives.all_reduce(s, group=self.group, compress=self.cfg.compress)
            lap = y - s / self.world                                   # (I - 11^T/N) y
        else:
            rng = np.random.default_rng([self.cfg.seed, self.round])  # the same draw on every worker
            peer = random_matching(self.cfg._adj, rng).get(self.rank)
            lap = torch.zeros_like(y)
            if peer is not None:
                other = torch.empty_like(y)
                first = self.rank < peer                                # fixed order: no send/send deadlock
                for step in ((0, 1) if first else (1, 0)):
                    if step == 0:
                        with self.wire.measure(y):
                            collectives.send(y, peer, group=self.group, compress=self.cfg.compress)
                    else:
                        collectives.recv(other, peer, group=self.group, compress=self.cfg.compress)
                lap = y - other
        nxt = y - self.cfg.alpha * lap
        if self.cfg.gamma and self.y_prev is not None:
            nxt = nxt + self.cfg.gamma * (y - self.y_prev)
        self.y_prev = y
        self._load(nxt)
        self.round += 1
        return loss

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "inner": self.inner.state_dict(), "round": self.round,
                "y_prev": None if self.y_prev is None else self.y_prev.clone(), "wire": self.wire.state_dict()}

    def load_state_dict(self, st: dict) -> None:
        self.model.load_state_dict(st["model"])
        self.inner.load_state_dict(st["inner"])
        self.round = int(st["round"])
        self.y_prev = st["y_prev"]
        self.wire.load_state_dict(st["wire"])
