"""Checkpoints that survive a dead worker: per-rank files, committed only when every rank has written.

Layout under ``root``::

    round-000012/rank0.zcc.safetensors … rankN.zcc.safetensors
                                         each a compressed safetensors file (codec.save_file: every
                                         float tensor a zipccl stream, CRC32C throughout), written to
                                         a temporary name, fsynced, then renamed; the rest of the state
                                         (numbers, strings, the nesting) as tagged JSON in its metadata.
                                         (rank<r>.pt files of older runs, torch.save'd, still load.)
    LATEST                               "12\n": the newest round that every rank completed

A round becomes the *complete* checkpoint only after every rank has renamed its file into
place and passed a barrier; then rank 0 rewrites ``LATEST`` atomically and deletes older
rounds (the previous complete one is kept until the new one is committed), and a second
barrier makes every rank return only once ``LATEST`` names the new round.  A worker that
dies while saving leaves at most a partial ``round-…`` directory, which :func:`latest` ignores.
"""
from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import torch
import torch.distributed as dist

import codec
from codec.atomic import atomic_write

_STATE_KEY = "trainer_state"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, partial, or belongs to a different run shape."""


def _atomic_write(path: Path, write) -> None:
    """``write(f)`` into a fresh temporary beside ``path`` (unpredictable name, never following a planted
    link), fsynced and renamed over it; removed on failure or SIGTERM (codec.atomic)."""
    with atomic_write(path) as f:
        write(f)


def _flatten(obj, tensors: dict):
    """``obj`` as tagged JSON, its tensors moved to ``tensors`` (named t0, t1, ...)."""
    if isinstance(obj, torch.Tensor):
        name = f"t{len(tensors)}"
        tensors[name] = obj.detach().to("cpu").contiguous()
        return {"T": name}
    if isinstance(obj, dict):
        return {"D": [[_flatten(k, tensors), _flatten(v, tensors)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return {"L" if isinstance(obj, list) else "U": [_flatten(v, tensors) for v in obj]}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"V": obj}
    raise TypeError(f"a checkpoint holds tensors, numbers, strings, None, lists, tuples and dicts, not "
                    f"{type(obj).__name__}")


def _unflatten(j, tensors: dict):
    (tag, v), = j.items()
    if tag == "T":
        return tensors[v]
    if tag == "D":
        return {_unflatten(k, tensors): _unflatten(x, tensors) for k, x in v}
    if tag in ("L", "U"):
        items = [_unflatten(x, tensors) for x in v]
        return items if tag == "L" else tuple(items)
    if tag == "V":
        return v
    raise ValueError(f"unknown tag {tag!r}")


def write_state(path, state: dict) -> None:
    """``state`` as one compressed safetensors file, atomically (:func:`codec.save_file`)."""
    tensors: dict = {}
    skeleton = _flatten(state, tensors)
    codec.save_file(tensors, path, metadata={_STATE_KEY: json.dumps(skeleton)}, checksum=True)


def read_state(path) -> dict:
    """The state :func:`write_state` wrote (or a ``torch.save`` file of older runs); a corrupted or
    truncated file is a :class:`CheckpointError`."""
    path = Path(path)
    try:
        if path.suffix == ".pt":
            return torch.load(path, map_location="cpu", weights_only=True)
        with codec.safe_open(path) as f:
            return _unflatten(json.loads(f.metadata()[_STATE_KEY]), {n: f.get_tensor(n) for n in f.keys()})
    except (codec.FormatError, KeyError, ValueError, TypeError, RuntimeError, EOFError, OSError,
            pickle.UnpicklingError) as e:
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated or corrupted?): "
                              f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e


def rank_file(root, rnd: int, rank: int) -> Path:
    """Rank ``rank``'s file of round ``rnd`` (a ``.pt`` one where an older run wrote that)."""
    new = round_dir(root, rnd) / f"rank{rank}.zcc.safetensors"
    old = new.with_name(f"rank{rank}.pt")
    return old if old.exists() and not new.exists() else new


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
    write_state(d / f"rank{rank}.zcc.safetensors", payload)
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
    path = rank_file(root, rnd, rank)
    if not path.exists():
        raise CheckpointError(f"{path} is missing although LATEST names round {rnd}")
    state = read_state(path)
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} does not hold a checkpoint dictionary")
    if state.get("world") != world or state.get("rank") != rank or state.get("round") != rnd:
        raise CheckpointError(f"{path} was written by rank {state.get('rank')} of {state.get('world')} "
                              f"(round {state.get('round')}); this is rank {rank} of {world}")
    return state
