"""End-to-end DDP training on the emulated cluster: torch DDP (gloo all-reduce) vs zipccl's compressed
all-reduce as a DDP communication hook, blocking and overlapped with backward.

    sudo python -m bench.ddp_train                     # -> bench/results/ddp_train_<cpu>.md

4 ranks, one per network namespace, links shaped with tc/tbf.  The model: a small GPT (byte-level,
``--layers`` pre-norm transformer blocks of width ``--dim``, causal attention), in bfloat16 (so its
gradients, and DDP's buckets, are bf16), trained with AdamW on the text of the standard library's
modules (bench.corpus.stdlib_paragraphs), each rank its own batches.  Per mode: ``--warmup`` steps,
then the median of ``--steps`` step times (barrier to barrier) and tokens/s over all ranks.  The two
zipccl modes run the same algorithm: their parameters are checked bit-identical after the steps.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def _gpt(dim: int, layers: int, ctx: int):
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
            self.attn = torch.nn.MultiheadAttention(dim, max(1, dim // 64), batch_first=True)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

        def forward(self, x, mask):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class GPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = torch.nn.Embedding(256, dim)
            self.pos = torch.nn.Embedding(ctx, dim)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
            self.ln = torch.nn.LayerNorm(dim)
            self.head = torch.nn.Linear(dim, 256, bias=False)
            self.register_buffer("mask", torch.triu(torch.full((ctx, ctx), float("-inf")), 1), persistent=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos.weight[: idx.shape[1]]
            m = self.mask[: idx.shape[1], : idx.shape[1]].to(x.dtype)
            for b in self.blocks:
                x = b(x, m)
            return self.head(self.ln(x))

    return GPT()


def _batches(rank: int, batch: int, ctx: int):
    import numpy as np
    import torch

    from bench.corpus import stdlib_paragraphs

    text = "\n".join(stdlib_paragraphs(100)).encode()
    data = torch.from_numpy(np.frombuffer(text, np.uint8).astype(np.int64))
    g = torch.Generator().manual_seed(1000 + rank)
    while True:
        starts = torch.randint(0, data.numel() - ctx - 1, (batch,), generator=g)
        x = torch.stack([data[s:s + ctx + 1] for s in starts.tolist()])
        yield x[:, :-1], x[:, 1:]


def worker(a) -> None:
    import torch
    import torch.distributed as dist

    import collectives

    dist.init_process_group("gloo")
    rank, ws = dist.get_rank(), dist.get_world_size()
    if os.environ.get("ZIPCCL_BENCH_DEBUG") and rank == 0:          # the cost model's decisions, on stdout
        import logging
        import sys

        logging.basicConfig(stream=sys.stdout, level=logging.DEBUG, format="%(message)s")
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // ws))
    out = {"params_M": None, "modes": {}}
    final = {}
    if "auto" in a.modes:
        collectives.strategy.calibrate()          # the link, for compress="auto" (rank 0 decides per bucket)
    for mode in a.modes.split(","):
        torch.manual_seed(0)
        model = _gpt(a.dim, a.layers, a.ctx).to(torch.bfloat16)
        out["params_M"] = sum(p.numel() for p in model.parameters()) / 1e6
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb)
        if mode == "zipccl_blocking":
            ddp.register_comm_hook(None, collectives.blocking_allreduce_hook)
        elif mode == "zipccl_overlapped":
            ddp.register_comm_hook(None, collectives.allreduce_hook)
        state = None
        if mode == "zipccl_overlapped_auto":        # timed once its step tuner has compared both ways
            state = collectives.HookState(compress="auto")
            ddp.register_comm_hook(state, collectives.allreduce_hook)
        warmup = a.warmup + (state.tuner.warmup + 2 * state.tuner.trial if state else 0)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        data = _batches(rank, a.batch, a.ctx)
        times, losses = [], []
        for step in range(warmup + a.steps):
            x, y = next(data)
            dist.barrier()
            t = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(ddp(x).float().reshape(-1, 256), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            dist.barrier()
            if step >= warmup:
                times.append(time.perf_counter() - t)
            losses.append(float(loss))
        step_s = statistics.median(times)
        out["modes"][mode] = {"step_s": step_s, "tokens_per_s": ws * a.batch * a.ctx / step_s,
                              "last_loss": losses[-1], "tuner_choice": state.tuner.best if state else "-"}
        final[mode] = torch.cat([p.detach().reshape(-1).view(torch.int16) for p in model.parameters()])
        del ddp, model, opt
    if "zipccl_blocking" in final and "zipccl_overlapped" in final:
        out["zipccl_modes_identical"] = bool(torch.equal(final["zipccl_blocking"], final["zipccl_overlapped"]))
    if rank == 0:
        print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rates", default="100,1000", help="link rates in Mbit/s")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--modes", default="torch_ddp,zipccl_blocking,zipccl_overlapped,zipccl_overlapped_auto")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--bucket-mb", type=float, default=2.0)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a)
        return 0
    from bench.cluster import Cluster
    from bench.ratio import to_markdown
    from bench.speed import _cpu_model, write_result

    rows = []
    passthrough = ["--modes", a.modes, "--dim", str(a.dim), "--layers", str(a.layers), "--ctx", str(a.ctx),
                   "--batch", str(a.batch), "--bucket-mb", str(a.bucket_mb), "--warmup", str(a.warmup),
                   "--steps", str(a.steps)]
    for rate in a.rates.split(","):
        threads = str(max(1, (os.cpu_count() or 1) // a.ranks))
        with Cluster([float(rate)] * a.ranks) as c:
            outs = c.run(["-m", "bench.ddp_train", "--worker", *passthrough],
                         env={"NUMBA_NUM_THREADS": threads, "OMP_NUM_THREADS": threads,
                              "ZIPCCL_LINK_CACHE": f"/tmp/zipccl-ddp-train-link-{os.getpid()}.json"}, timeout=3600)
        r = json.loads([x for x in outs[0].splitlines() if x.startswith("RESULT ")][-1][len("RESULT "):])
        base = r["modes"].get("torch_ddp", {}).get("step_s")
        for mode, m in r["modes"].items():
            rows.append({"link_mbit": float(rate), "mode": mode, "params_M": r["params_M"], "step_s": m["step_s"],
                         "tokens_per_s": m["tokens_per_s"], "speedup_vs_torch": (base / m["step_s"]) if base else 1.0,
                         "last_loss": m["last_loss"], "tuner_choice": m.get("tuner_choice", "-"),
                         "zipccl_modes_identical": r.get("zipccl_modes_identical", "")})
        print(rows[-len(r["modes"]):], flush=True)
    cols = ["link_mbit", "mode", "params_M", "step_s", "tokens_per_s", "speedup_vs_torch", "tuner_choice",
            "last_loss", "zipccl_modes_identical"]
    out = write_result(
        a.out, "ddp_train",
        "# End-to-end DDP training: torch DDP vs zipccl's all-reduce hook, blocking and overlapped\n\n"
        f"Regenerate (root): `python -m bench.ddp_train --rates {a.rates} {' '.join(passthrough)}`.\n\n"
        f"CPU: {_cpu_model()}; {a.ranks} ranks in network namespaces sharing this machine's {os.cpu_count()} "
        "cores (compute, codec and sockets compete for them), links shaped with tc/tbf. A byte-level GPT in "
        "bf16 (bf16 gradient buckets), AdamW, each rank its own batches; step time = median, barrier to "
        "barrier; tokens/s over all ranks. `zipccl_overlapped_auto` is timed after its step tuner compared "
        "the cost model's per-bucket choice with torch's own all-reduce (1 + 2 x 2 more warm-up steps); "
        "`tuner_choice` = what it then ran.\n\n" + to_markdown(rows, cols, "{:.3f}") + "\n")
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
