"""The training entry point shared by DiLoCo and GASLoC: torchrun conventions, checkpoints, a dead worker.

    torchrun --nproc-per-node 4 -m trainers.diloco --algo gasloc --outer-steps 40 \\
        --checkpoint-dir ckpt [--resume] [--no-compress] [--log-json]

Each outer round draws its batches from a generator seeded by ``(seed, rank, round)``, so a run
resumed from a checkpoint continues bit-identically to one that never stopped.  When a peer
dies (or the group times out), every surviving worker prints which round failed and the last
complete checkpoint, and exits with status 3; ``--resume`` continues from that checkpoint.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from . import checkpoint
from .diloco import DiLoCo, DiLoCoConfig, GPTConfig, TinyGPT, batches, evaluate, flat_params, stdlib_bytes
from .gasloc import GASLoC, GASLoCConfig

EXIT_PEER_LOST = 3


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m trainers.diloco",
                                 description="DiLoCo / GASLoC pre-training of a byte-level GPT on the stdlib sources "
                                             "over compressed collectives (torchrun environment).")
    ap.add_argument("--algo", choices=("diloco", "gasloc"), default="diloco")
    ap.add_argument("--outer-steps", type=int, default=20)
    ap.add_argument("--inner-steps", type=int, default=10, help="H, local AdamW steps per outer round")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--corpus-mib", type=float, default=4.0, help="bytes of stdlib sources to train on (10%% held out)")
    ap.add_argument("--gamma", type=float, default=0.5, help="GASLoC outer momentum")
    ap.add_argument("--alpha", type=float, default=0.5, help="GASLoC gossip step")
    ap.add_argument("--no-compress", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=1, help="validation loss every N rounds (0: never)")
    ap.add_argument("--checkpoint-dir", default=None)
    ap.add_argument("--checkpoint-every", type=int, default=1)
    ap.add_argument("--resume", action="store_true", help="continue from the last complete checkpoint")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a silent peer counts as dead")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads of the training steps, fixed for the run (with deterministic "
                         "algorithms) so that runs are bit-reproducible; 0: torch's default")
    ap.add_argument("--log-json", action="store_true", help="every rank prints one JSON line per round")
    return ap


@dataclass
class Result:
    rounds_done: int
    params: torch.Tensor
    log: list = field(default_factory=list)
    status: int = 0
    message: str = ""


def train(a: argparse.Namespace, on_round=None) -> Result:
    """Run on every rank (the process group is created from the environment if not already up).
    ``on_round(rank, round)`` is called before each outer round (tests use it to kill a worker)."""
    if a.checkpoint_every < 1:
        raise ValueError(f"--checkpoint-every must be >= 1, got {a.checkpoint_every}")
    if a.resume and not a.checkpoint_dir:
        raise ValueError("--resume needs --checkpoint-dir")
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout))
    rank = dist.get_rank()
    data = stdlib_bytes(int(a.corpus_mib * 2**20))
    split = int(len(data) * 0.9)
    train_data, val = data[:split], data[split:]
    torch.manual_seed(a.seed)
    model = TinyGPT(GPTConfig(dim=a.dim, layers=a.layers, heads=a.heads, block=a.block))
    if a.algo == "diloco":
        trainer = DiLoCo(model, DiLoCoConfig(inner_steps=a.inner_steps, compress=not a.no_compress,
                                                    threads=a.threads))
    else:
        trainer = GASLoC(model, GASLoCConfig(inner_steps=a.inner_steps, compress=not a.no_compress, seed=a.seed,
                                             gamma=a.gamma, alpha=a.alpha, threads=a.threads))
    start = 0
    if a.resume:
        state = checkpoint.load(a.checkpoint_dir)
        if state is not None:
            trainer.load_state_dict(state)
            start = state["round"]
    res = Result(start, flat_params(model))
    clock = 0.0                                               # training + communication time, no evaluation
    rnd = start
    try:
        for rnd in range(start, a.outer_steps):
            if on_round is not None:
                on_round(rank, rnd)
            t0 = time.perf_counter()
            loss = trainer.outer_step(batches(train_data, a.batch, a.block, seed=[a.seed, rank, rnd]))
            clock += time.perf_counter() - t0
            if a.checkpoint_dir and ((rnd + 1) % a.checkpoint_every == 0 or rnd + 1 == a.outer_steps):
                checkpoint.save(a.checkpoint_dir, rnd + 1, trainer.state_dict())
            vloss = evaluate(model, val, block=a.block) if a.eval_every and (rnd + 1) % a.eval_every == 0 else None
            w = trainer.wire
            rec = {"algo": a.algo, "compress": not a.no_compress, "rank": rank, "round": rnd + 1, "t": clock,
                   "loss": loss, "val": vloss, "raw": w.bytes_raw, "sent": w.bytes_sent}
            res.log.append(rec)
            res.rounds_done = rnd + 1
            if a.log_json:
                print(json.dumps(rec), flush=True)
            elif rank == 0:
                val_s = "" if vloss is None else f" val {vloss:.3f}"
                print(f"{a.algo} outer {rnd + 1}/{a.outer_steps} inner loss {loss:.3f}{val_s} "
                      f"sent {w.bytes_sent / 2**20:.1f} MiB (ratio {w.bytes_raw / max(w.bytes_sent, 1):.2f}) "
                      f"{clock:.1f}s", flush=True)
    except RuntimeError as e:
        if not _peer_lost(e):
            raise
        done = checkpoint.latest(a.checkpoint_dir) if a.checkpoint_dir else None
        where = (f"last complete checkpoint: round {done} in {a.checkpoint_dir} (continue with --resume)"
                 if done is not None else "no complete checkpoint")
        res.status = EXIT_PEER_LOST
        res.message = (f"[rank {rank}] training stopped in outer round {rnd + 1}: a worker died or the group "
                       f"timed out; {where}. Cause: {str(e).splitlines()[0][:300]}")
        print(res.message, file=sys.stderr, flush=True)
    res.params = flat_params(model)
    return res


def _peer_lost(e: BaseException) -> bool:
    """gloo's connection-closed / timeout errors, directly or as wrapped by :mod:`collectives`."""
    return isinstance(e, dist.DistError) or str(e).startswith("zipccl collective failed")


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    res = train(a)
    if res.status == 0:
        dist.destroy_process_group()                          # after a lost peer this could block: just exit
    return res.status
