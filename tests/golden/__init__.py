"""Golden streams, one folder per format version (``v1``, ``v2``, ...), each with its inputs, streams and
``manifest.json``.  Streams of every version decode forever; the current version's also pin the
encoder's bytes.  ``python -m tests.golden.make_golden`` writes the current version's folder."""
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent


def versions() -> list[int]:
    return sorted(int(p.name[1:]) for p in ROOT.glob("v[0-9]*") if (p / "manifest.json").is_file())


def manifest(version: int) -> dict:
    return json.loads((ROOT / f"v{version}" / "manifest.json").read_text())


def cases() -> list[tuple[int, str]]:
    """Every ``(version, name)``."""
    return [(v, name) for v in versions() for name in sorted(manifest(v))]


def case_id(case) -> str:
    return f"v{case[0]}-{case[1]}"


def read(version: int, name: str) -> tuple[dict, bytes, bytes]:
    """``(manifest entry, input bytes, stream bytes)``; the input's words are kept as they are
    (``NAME.input``) or, for large inputs of repeated rows, as their distinct rows and each row's index
    among them (``NAME.input.npz``, arrays ``rows`` and ``index``);
    a manifest entry with ``shape`` gives the input's shape (else it is flat)."""
    folder = ROOT / f"v{version}"
    packed = folder / f"{name}.input.npz"
    if packed.is_file():
        with np.load(packed) as f:
            raw = f["rows"][f["index"]].tobytes()
    else:
        raw = (folder / f"{name}.input").read_bytes()
    return manifest(version)[name], raw, (folder / f"{name}.zccl").read_bytes()
