"""Checkpoints that survive a dead worker: per-rank files, committed only when every rank has written.

Layout under ``root``::

    round-000012/rank0.pt … rankN.pt     each written to a temporary name, fsynced, then renamed
    LATEST                               "12\n": the newest round that every rank completed

A round becomes the *complete* checkpoint only after every rank has renamed its file into
place and passed a barrier; then rank 0 rewrites ``LATEST`` atomically and deletes older
rounds (the previous complete one is kept until the new one is committed), and a second
barrier makes every rank return only once ``LATEST`` names the new round.  A worker that
dies while saving leaves at most a partial ``round-…`` directory, which :func:`latest` ignores.
"""
from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import torch
import torch.distributed as dist

from codec.atomic import atomic_write


class CheckpointError(RuntimeError):
    """A checkpoint is missing, partial, or belongs to a different run shape."""


def _atomic_write(path: Path, write) -> None:
    """``write(f)`` into a fresh temporary beside ``path`` (unpredictable name, never following a planted
    link), fsynced and renamed over it; removed on failure or SIGTERM (codec.atomic)."""
    with atomic_write(path) as f:
        write(f)


def round_dir(root, rnd: int) -> Path:
    return Path(root) / f"round-{rnd:06d}"


def latest(root) -> int | None:
    """The newest complete round under ``root``, or None if there is none."""
    p = Path(root) / "LATEST"
    if not p.exists():
        return None
    text = p.read_text().strip()
    if not text.isdigit():
        raise CheckpointError(f"{p}: expected a round number, found {text[:40]!r}")
    return int(text)


def save(root, rnd: int, state: dict, group=None) -> Path:
    """Every rank calls this after round ``rnd``; returns the committed round directory."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    d = round_dir(root, rnd)
    d.mkdir(parents=True, exist_ok=True)
    payload = dict(state, round=rnd, rank=rank, world=world)
    _atomic_write(d / f"rank{rank}.pt", lambda f: torch.save(payload, f))
    dist.barrier(group)                                       # every rank's file is in place
    if rank == 0:
        _atomic_write(Path(root) / "LATEST", lambda f: f.write(f"{rnd}\n".encode()))
        for old in Path(root).glob("round-*"):
            if old.name != d.name and old.name[6:].isdigit() and int(old.name[6:]) < rnd:
                shutil.rmtree(old, ignore_errors=True)
    dist.barrier(group)                                       # nobody reads LATEST before it names rnd
    return d


def load(root, group=None) -> dict | None:
    """This rank's state from the newest complete round, or None when ``root`` has none yet."""
    rnd = latest(root)
    if rnd is None:
        return None
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    path = round_dir(root, rnd) / f"rank{rank}.pt"
    if not path.exists():
        raise CheckpointError(f"{path} is missing although LATEST names round {rnd}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError) as e:
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated or corrupted?): "
                              f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} does not hold a checkpoint dictionary")
    if state.get("world") != world or state.get("rank") != rank or state.get("round") != rnd:
        raise CheckpointError(f"{path} was written by rank {state.get('rank')} of {state.get('world')} "
                              f"(round {state.get('round')}); this is rank {rank} of {world}")
    return state
