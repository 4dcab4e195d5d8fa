"""DiLoCo over compressed collectives: H local AdamW steps, then an all-reduced pseudo-gradient.

Every worker starts an outer step from the shared parameters ``theta``, runs ``H`` inner AdamW
steps on its own data, and forms the pseudo-gradient ``delta = theta - theta_local``.  The
deltas are averaged with :func:`collectives.all_reduce` (compressed or not: the result is the
same bits) and applied by an outer SGD with Nesterov momentum.  Defaults follow OpenDiLoCo:
outer lr 0.7, momentum 0.9; inner AdamW lr 4e-4, weight decay 0.1, betas (0.9, 0.95).

Launch with torchrun conventions (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``):

    torchrun --nproc-per-node 2 -m trainers.diloco --outer-steps 20 [--algo gasloc] [--no-compress]
"""
from __future__ import annotations

import contextlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import collectives

from .determinism import pinned


# -------------------------------------------------------------------------------- data
def stdlib_bytes(limit: int = 4 << 20) -> np.ndarray:
    """Real text that ships with Python: the standard library's own source files, as bytes."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out, total = [], 0
    for p in sorted(root.glob("*.py")):
        data = p.read_bytes()
        out.append(data)
        total += len(data)
        if total >= limit:
            break
    return np.frombuffer(b"".join(out)[:limit], dtype=np.uint8)


def batches(data: np.ndarray, batch: int, block: int, seed: int):
    """Endless random ``(x, y)`` byte windows ``(batch, block)`` from ``data``."""
    g = np.random.default_rng(seed)
    while True:
        idx = g.integers(0, len(data) - block - 1, batch)
        x = np.stack([data[i:i + block] for i in idx]).astype(np.int64)
        y = np.stack([data[i + 1:i + block + 1] for i in idx]).astype(np.int64)
        yield torch.from_numpy(x), torch.from_numpy(y)


# ------------------------------------------------------------------------------- model
@dataclass
class GPTConfig:
    vocab: int = 256
    block: int = 64
    dim: int = 128
    layers: int = 2
    heads: int = 4


class TinyGPT(nn.Module):
    """A small byte-level GPT (pre-norm blocks, causal self-attention)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.block, cfg.dim)
        layer = nn.TransformerEncoderLayer(cfg.dim, cfg.heads, 4 * cfg.dim, dropout=0.0, batch_first=True,
                                           norm_first=True, activation="gelu")
        self.blocks = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, x):                                      # x: (B, T) bytes -> logits (B, T, vocab)
        t = x.shape[1]
        h = self.tok(x) + self.pos(torch.arange(t))
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        return self.head(self.norm(self.blocks(h, mask=mask, is_causal=True)))


def loss_fn(model, x, y):
    return F.cross_entropy(model(x).reshape(-1, model.cfg.vocab), y.reshape(-1))


def local_steps(model, opt, data_iter, steps: int) -> float:
    """``steps`` inner optimizer steps on this worker's data; the mean loss (shared by DiLoCo and GASLoC)."""
    losses = []
    for _ in range(steps):
        x, y = next(data_iter)
        loss = loss_fn(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return float(np.mean(losses))


class WireStats:
    """Tensor bytes handed to the collectives and the bytes that went out for them, at the compression
    ratio the collectives actually achieved on those calls (``collectives.traffic``)."""

    def __init__(self):
        self.bytes_raw = 0
        self.bytes_sent = 0

    @contextlib.contextmanager
    def measure(self, t: torch.Tensor):
        raw0, framed0 = collectives.traffic.snapshot()
        yield
        raw1, framed1 = collectives.traffic.snapshot()
        ratio = (raw1 - raw0) / (framed1 - framed0) if framed1 > framed0 else 1.0
        nbytes = t.numel() * t.element_size()
        self.bytes_raw += nbytes
        self.bytes_sent += int(nbytes / ratio)

    def state_dict(self) -> dict:
        return {"bytes_raw": self.bytes_raw, "bytes_sent": self.bytes_sent}

    def load_state_dict(self, s: dict) -> None:
        self.bytes_raw, self.bytes_sent = int(s["bytes_raw"]), int(s["bytes_sent"])


# ------------------------------------------------------------------------------ DiLoCo
@dataclass
class DiLoCoConfig:
    inner_steps: int = 10          # H
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    inner_lr: float = 4e-4
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    compress: bool = True
    # torch intra-op threads while an outer step runs; fixed, with deterministic algorithms, so that the
    # local steps compute the same bits every time (trainers.determinism); 0 = keep the caller's setting
    threads: int = 1

    def validate(self):
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0 (0: keep torch's setting), got {self.threads}")
        if self.inner_steps < 1:
            raise ValueError(f"inner_steps (H) must be >= 1, got {self.inner_steps}")
        if not 0 < self.outer_lr <= 2:
            raise ValueError(f"outer_lr must be in (0, 2], got {self.outer_lr}")
        if not 0 <= self.outer_momentum < 1:
            raise ValueError(f"outer_momentum must be in [0, 1), got {self.outer_momentum}")


class DiLoCo:
    """One worker's DiLoCo state; call :meth:`outer_step` on every rank in lock step."""

    def __init__(self, model: nn.Module, cfg: DiLoCoConfig, group=None):
        cfg.validate()
        self.model, self.cfg, self.group = model, cfg, group
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.inner = torch.optim.AdamW(self.params, lr=cfg.inner_lr, weight_decay=cfg.weight_decay,
                                       betas=cfg.betas)
        self.shared = [p.detach().clone() for p in self.params]          # theta, identical on all ranks
        self.outer = torch.optim.SGD(self.shared, lr=cfg.outer_lr, momentum=cfg.outer_momentum,
                                     nesterov=cfg.outer_momentum > 0)
        self.wire = WireStats()

    def outer_step(self, data_iter) -> float:
        """H inner steps on this worker's data, then the averaged pseudo-gradient update. Returns the mean
        inner loss.  Runs with ``cfg.threads`` torch threads and deterministic algorithms
        (:func:`trainers.determinism.pinned`): the bits depend only on the data and the state."""
        with pinned(self.cfg.threads):
            return self._outer_step(data_iter)

    def _outer_step(self, data_iter) -> float:
        loss = local_steps(self.model, self.inner, data_iter, self.cfg.inner_steps)
        ws = dist.get_world_size(self.group)
        delta = torch.cat([(s - p.detach()).reshape(-1) for s, p in zip(self.shared, self.params)])
        with self.wire.measure(delta):
            collectives.all_reduce(delta, group=self.group, compress=self.cfg.compress)
        delta /= ws
        offset = 0
        for s in self.shared:
            n = s.numel()
            s.grad = delta[offset:offset + n].view_as(s).clone()
            offset += n
        self.outer.step()
        with torch.no_grad():
            for s, p in zip(self.shared, self.params):
                p.copy_(s)
        return loss

    def state_dict(self) -> dict:
        """Everything a resumed run needs to continue bit-identically (see :mod:`trainers.checkpoint`)."""
        return {"model": self.model.state_dict(), "inner": self.inner.state_dict(),
                "shared": [s.detach().clone() for s in self.shared], "outer": self.outer.state_dict(),
                "wire": self.wire.state_dict()}

    def load_state_dict(self, st: dict) -> None:
        self.model.load_state_dict(st["model"])
        self.inner.load_state_dict(st["inner"])
        with torch.no_grad():
            for s, v in zip(self.shared, st["shared"], strict=True):
                s.copy_(v)
        self.outer.load_state_dict(st["outer"])
        self.wire.load_state_dict(st["wire"])


def flat_params(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@torch.no_grad()
def evaluate(model, data, batch=16, block=64, batches_n=4) -> float:
    it = batches(data, batch, block, seed=12345)
    return float(np.mean([loss_fn(model, *next(it)).item() for _ in range(batches_n)]))


if __name__ == "__main__":
    # ``python -m trainers.diloco`` runs this file as __main__, a module of its own: the launcher sits on
    # top of trainers.diloco (it imports this file again as trainers.diloco), never the other way round
    from trainers.launch import main

    raise SystemExit(main())
