"""Weight synchronisation, trainer -> inference ranks, on the emulated cluster: zipccl's WeightSync (full and
delta) against torch.distributed.broadcast and against an XOR + zstd delta pipeline run the same way.

    sudo python -m bench.weight_sync                  # -> bench/results/weight_sync_<cpu>.md, .png
    sudo python -m bench.weight_sync --plan minilm:1000 --steps 10

1 trainer + 3 receivers, one per network namespace, every link shaped with tc/tbf.  The trainer takes
real AdamW steps (fp32 master weights, lr ``--lr``) and syncs the bf16 copy:

* ``minilm``: the packaged all-MiniLM-L6-v2 (BertModel, 22.7 M parameters; loss as bench.corpus:
  pooled embeddings and pooler output against fixed random targets, 16 stdlib paragraphs per step);
* ``synthetic``: 8 bias-free 4096x4096 linear layers (134 M parameters, 256 MiB in bf16), an MSE
  loss on random batches, so that the wire dominates.

Full sync: zipccl ``WeightSync(delta=False)`` vs ``torch.distributed.broadcast`` of every tensor and of
one flat bucket, best of ``--reps``.  Delta sync, ``--steps`` consecutive optimizer steps: zipccl's
delta against XOR-with-the-previous-version + zstd (level 3) through the same chain, pieces and
staging (``XorZstdSync``: only the coding of a piece differs).  Receivers' values are checked
bit-identical to the trainer's after every sync (CRC32C of all bf16 bits, gathered).  This worker
script is also the example to adapt: ``trainer()`` and ``receiver()`` are the two loops.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np


# -- the worker (one per rank) -------------------------------------------------------------------

def _xor_zstd_sync():
    import torch
    import zstandard

    import codec
    from collectives import WeightSync

    class XorZstdSync(WeightSync):
        """The usual hand-built pipeline: XOR against the previous version, then zstd level 3."""

        def encode_delta_piece(self, piece, base):
            ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[piece.element_size()]
            x = torch.bitwise_xor(piece.view(ints), base.view(ints))
            blob = zstandard.ZstdCompressor(level=3).compress(x.numpy().tobytes())
            return torch.frombuffer(bytearray(blob), dtype=torch.uint8), 0

        def apply_delta_piece(self, frame, out):
            ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[out.element_size()]
            raw = zstandard.ZstdDecompressor().decompress(frame.numpy().tobytes(),
                                                          max_output_size=out.numel() * out.element_size())
            if len(raw) != out.numel() * out.element_size():
                raise codec.FormatError("xor frame of the wrong size")
            out.view(ints).bitwise_xor_(torch.frombuffer(bytearray(raw), dtype=ints))
            return 0

    return XorZstdSync


def _minilm(rank: int, src: int):
    """(named bf16 tensors to sync, a step function on the trainer or None)."""
    import torch
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import AutoConfig, AutoTokenizer, BertModel

    from bench.corpus import _model_dir, corpus_loss, stdlib_paragraphs

    mdir = str(_model_dir())
    if rank != src:
        model = BertModel(AutoConfig.from_pretrained(mdir, local_files_only=True))
        return {k: torch.zeros(p.shape, dtype=torch.bfloat16) for k, p in model.named_parameters()}, None
    model = BertModel.from_pretrained(mdir, local_files_only=True, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(mdir, local_files_only=True)
    enc = tok(stdlib_paragraphs(64), padding=True, truncation=True, max_length=128, return_tensors="pt")
    gen = torch.Generator().manual_seed(0)
    params = dict(model.named_parameters())
    opt = torch.optim.AdamW(params.values(), lr=_ARGS.lr, weight_decay=0.01)
    synced = {k: p.detach().to(torch.bfloat16) for k, p in params.items()}
    counter = [0]

    def step():
        s = counter[0] % 4
        counter[0] += 1
        part = {k: v[s * 16:(s + 1) * 16] for k, v in enc.items()}
        loss = corpus_loss(model(**part), part["attention_mask"], gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            for k, p in params.items():
                synced[k].copy_(p)
    return synced, step


def _synthetic(rank: int, src: int):
    import torch

    shapes = {f"layers.{i}.weight": (4096, 4096) for i in range(8)}
    if rank != src:
        return {k: torch.zeros(s, dtype=torch.bfloat16) for k, s in shapes.items()}, None
    gen = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096, bias=False) for _ in range(8)])
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 4096 ** -0.5, generator=gen)
    opt = torch.optim.AdamW(model.parameters(), lr=_ARGS.lr, weight_decay=0.01)
    params = dict(model.named_parameters())
    synced = {f"layers.{k}": p.detach().to(torch.bfloat16) for k, p in params.items()}

    def step():
        x = torch.randn(32, 4096, generator=gen)
        loss = ((model(x) - torch.randn(32, 4096, generator=gen)) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            for k, p in params.items():
                synced[f"layers.{k}"].copy_(p)
    return synced, step


def _digest(tensors) -> int:
    import torch

    from codec.format import crc32c

    d = 0
    for t in tensors.values():
        d = crc32c(t.contiguous().view(torch.uint8).numpy(), d)
    return d


def _same_everywhere(tensors) -> bool:
    import torch
    import torch.distributed as dist

    mine = torch.tensor([_digest(tensors)], dtype=torch.int64)
    rows = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, mine)
    return all(int(r) == int(rows[0]) for r in rows)


def worker(a) -> None:
    import torch
    import torch.distributed as dist

    from bench.collectives_bench import _timed
    from collectives import WeightSync

    dist.init_process_group("gloo")
    rank, src = dist.get_rank(), 0
    tensors, step = (_minilm if a.model == "minilm" else _synthetic)(rank, src)
    raw = sum(t.numel() * t.element_size() for t in tensors.values())
    piece = int(a.piece_mib * (1 << 20))
    out = {"model": a.model, "raw_MB": raw / 1e6, "n_tensors": len(tensors)}

    # full sync: zipccl vs torch.distributed.broadcast (per tensor, and one flat bucket)
    staging = a.staging == "on"
    full = WeightSync(tensors, src=src, delta=False, piece_bytes=piece, staging=staging)
    stats = []
    out["zipccl_full_s"] = _timed(lambda: stats.append(full.push() if rank == src else full.pull()), a.reps)
    out["full_wire_MB"] = stats[-1].wire_bytes / 1e6
    out["full_identical"] = _same_everywhere(tensors)
    keep = {k: v.clone() for k, v in tensors.items()}
    out["torch_broadcast_s"] = _timed(lambda: [dist.broadcast(t, src) for t in tensors.values()], a.reps)

    def flat_broadcast():
        flat = torch.cat([t.reshape(-1) for t in tensors.values()]) if rank == src else \
            torch.empty(raw // 2, dtype=torch.bfloat16)
        dist.broadcast(flat, src)
        if rank != src:
            off = 0
            for t in tensors.values():
                t.view(-1).copy_(flat[off:off + t.numel()])
                off += t.numel()
    out["torch_broadcast_flat_s"] = _timed(flat_broadcast, a.reps)
    out["broadcast_identical"] = _same_everywhere(tensors) and all(torch.equal(keep[k], v) for k, v in tensors.items())
    best_torch = min(out["torch_broadcast_s"], out["torch_broadcast_flat_s"])
    out["full_speedup"] = best_torch / out["zipccl_full_s"]
    del full, keep

    # delta sync over consecutive real optimizer steps: zipccl delta vs XOR + zstd, same chain
    ours = WeightSync(tensors, src=src, delta=True, piece_bytes=piece, staging=staging)
    xor = _xor_zstd_sync()(tensors, src=src, delta=True, piece_bytes=piece, staging=True)   # its own base copy
    for s in (ours, xor):                                       # the first sync of each is a full one
        s.push() if rank == src else s.pull()
    rows = []
    for k in range(a.steps):
        if rank == src:
            step()
        row = {"step": k + 1}
        for name, s in (("zipccl", ours), ("xor_zstd", xor)):
            dist.barrier()
            t = time.perf_counter()
            st = s.push() if rank == src else s.pull()
            dist.barrier()
            row[f"{name}_s"] = time.perf_counter() - t
            row[f"{name}_MB"] = st.wire_bytes / 1e6
            row[f"{name}_mode"] = st.mode
            if name == "zipccl":
                row["changed_pct"] = 100 * (st.changed_fraction or 0.0)
        row["identical"] = _same_everywhere(tensors)
        rows.append(row)
        if rank == src:
            print(json.dumps(row), flush=True)
    out["steps"] = rows
    if rank == src:
        print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()


# -- the launcher ----------------------------------------------------------------------------------

def _plot(results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for r in results:
        lab = f"{r['model']} {r['link_mbit']:.0f} Mbit/s"
        steps = [s["step"] for s in r["steps"]]
        axes[0].plot(steps, [s["xor_zstd_MB"] / s["zipccl_MB"] for s in r["steps"]], marker="o", label=lab)
        axes[1].plot(steps, [s["xor_zstd_s"] / s["zipccl_s"] for s in r["steps"]], marker="o", label=lab)
    axes[0].set_ylabel("XOR+zstd bytes / zipccl delta bytes")
    axes[1].set_ylabel("XOR+zstd time / zipccl delta time")
    for ax in axes:
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("optimizer step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="minilm", choices=["minilm", "synthetic"])
    ap.add_argument("--plan", default="minilm:1000,minilm:10000,synthetic:1000,synthetic:10000",
                    help="model:rate_mbit,...")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--piece-mib", type=float, default=4.0)
    ap.add_argument("--staging", default="on", choices=["on", "off"],
                    help="receivers decode into a staging copy (all-or-nothing) or straight into their tensors")
    ap.add_argument("--out", default=None)
    global _ARGS
    a = _ARGS = ap.parse_args(argv)
    if a.worker:
        worker(a)
        return 0
    from bench.cluster import Cluster
    from bench.ratio import to_markdown
    from bench.speed import _cpu_model, write_result

    results = []
    for item in a.plan.split(","):
        model, rate = item.split(":")
        threads = str(max(1, (os.cpu_count() or 1) // a.ranks))
        with Cluster([float(rate)] * a.ranks) as c:
            outs = c.run(["-m", "bench.weight_sync", "--worker", "--model", model, "--steps", str(a.steps),
                          "--reps", str(a.reps), "--lr", str(a.lr), "--piece-mib", str(a.piece_mib),
                          "--staging", a.staging],
                         env={"NUMBA_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}, timeout=3600)
        line = [x for x in outs[0].splitlines() if x.startswith("RESULT ")][-1]
        r = json.loads(line[len("RESULT "):])
        r["link_mbit"] = float(rate)
        results.append(r)
        print({k: v for k, v in r.items() if k != "steps"}, flush=True)
    full_cols = ["model", "link_mbit", "raw_MB", "n_tensors", "torch_broadcast_s", "torch_broadcast_flat_s",
                 "zipccl_full_s", "full_speedup", "full_wire_MB", "full_identical", "broadcast_identical"]
    summary = []
    for r in results:
        st = r["steps"]
        summary.append({
            "model": r["model"], "link_mbit": r["link_mbit"], "steps": len(st),
            "changed_pct": float(np.mean([s["changed_pct"] for s in st])),
            "zipccl_MB": float(np.mean([s["zipccl_MB"] for s in st])),
            "xor_zstd_MB": float(np.mean([s["xor_zstd_MB"] for s in st])),
            "bytes_xor/zipccl": float(np.mean([s["xor_zstd_MB"] / s["zipccl_MB"] for s in st])),
            "zipccl_s": float(np.median([s["zipccl_s"] for s in st])),
            "xor_zstd_s": float(np.median([s["xor_zstd_s"] for s in st])),
            "time_xor/zipccl": float(np.median([s["xor_zstd_s"] / s["zipccl_s"] for s in st])),
            "all_delta": all(s["zipccl_mode"] == "delta" for s in st),
            "all_identical": all(s["identical"] for s in st)})
    sum_cols = list(summary[0])
    per_step = []
    for r in results:
        for s in r["steps"]:
            per_step.append({"model": r["model"], "link_mbit": r["link_mbit"], **s})
    step_cols = ["model", "link_mbit", "step", "changed_pct", "zipccl_MB", "xor_zstd_MB", "zipccl_s", "xor_zstd_s",
                 "identical"]
    out = write_result(a.out, "weight_sync",
        "# Weight synchronisation: zipccl WeightSync vs torch.distributed.broadcast and XOR + zstd\n\n"
        f"Regenerate (root): `python -m bench.weight_sync --plan {a.plan} --steps {a.steps} --reps {a.reps} "
        f"--lr {a.lr} --piece-mib {a.piece_mib} --staging {a.staging}`.\n\nCPU: {_cpu_model()}; {a.ranks} ranks (1 trainer, "
        f"{a.ranks - 1} receivers) in network namespaces sharing this machine's {os.cpu_count()} cores, links "
        "shaped with tc/tbf. The trainer takes real AdamW steps (fp32 master, lr as above, weight decay 0.01) "
        "and syncs the bf16 copy. Bit identity: CRC32C of every rank's bf16 bits, gathered after each sync.\n\n"
        "## Full sync (best of reps; speed-up = the faster torch broadcast / zipccl)\n\n"
        + to_markdown(results, full_cols, "{:.3f}")
        + "\n\n## Delta sync over consecutive optimizer steps (means; times are medians)\n\n"
        + to_markdown(summary, sum_cols, "{:.3f}")
        + "\n\n## Per step\n\n" + to_markdown(per_step, step_cols, "{:.3f}") + "\n")
    try:
        _plot(results, out.with_suffix(".png"))
    except ImportError:
        pass
    print(out.read_text())
    return 0


_ARGS = None

if __name__ == "__main__":
    raise SystemExit(main())
