"""DiLoCo vs GASLoC, compressed and not, on an emulated cluster with unequal links.

    sudo python -m bench.decentralized            # -> bench/results/decentralized.md, decentralized.png

4 workers, one per network namespace, links shaped with tc/tbf to ``--rates`` Mbit/s (default
two at 1 Gbit/s, two at 100 Mbit/s).  Each configuration trains the same byte-level GPT from
the same seed for ``--rounds`` outer rounds; every worker logs, per round, its training clock
(local steps + communication, evaluation excluded) and the validation loss of its own model.
Per round we report the mean validation loss over workers against the slowest worker's clock.
Time to target = the first round whose mean validation loss is <= the target (default: the
worst final loss among the configurations, so every run reaches it).  The speed-up compression
gives an algorithm = its uncompressed time to target / its compressed time to target.  The
compressed and uncompressed runs of one algorithm follow the same trajectory bit for bit (checked
here on the logged losses), so the speed-up is pure wall-clock.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.cluster import Cluster

RESULTS = Path(__file__).resolve().parent / "results"
CONFIGS = [("diloco", False), ("diloco", True), ("gasloc", False), ("gasloc", True)]


def label(algo: str, compress: bool) -> str:
    return f"{algo} {'zipccl' if compress else 'uncompressed'}"


def run_config(rates, algo, compress, a) -> list[dict]:
    args = ["-m", "trainers.diloco", "--algo", algo, "--outer-steps", str(a.rounds), "--inner-steps", str(a.inner),
            "--dim", str(a.dim), "--layers", str(a.layers), "--batch", str(a.batch), "--threads", "1",
            "--log-json", "--timeout", "600"]
    if not compress:
        args.append("--no-compress")
    with Cluster(rates) as c:
        outs = c.run(args, timeout=a.timeout, env={"NUMBA_NUM_THREADS": "1"})
    return [json.loads(line) for out in outs for line in out.splitlines() if line.startswith("{")]


def curve(recs: list[dict]) -> list[dict]:
    """Per round: mean validation loss over workers, the slowest worker's clock, traffic."""
    out = []
    for rnd in sorted({r["round"] for r in recs}):
        rs = [r for r in recs if r["round"] == rnd]
        out.append({"round": rnd, "t": max(r["t"] for r in rs), "val": sum(r["val"] for r in rs) / len(rs),
                    "sent": sum(r["sent"] for r in rs) / len(rs), "raw": sum(r["raw"] for r in rs) / len(rs),
                    "losses": [r["loss"] for r in sorted(rs, key=lambda r: r["rank"])]})
    return out


def time_to(c: list[dict], target: float) -> float | None:
    return next((p["t"] for p in c if p["val"] <= target), None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="1000,1000,100,100", help="Mbit/s per worker")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--inner", type=int, default=10, help="H")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--target", type=float, default=None)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", default="decentralized")
    a = ap.parse_args(argv)
    rates = [float(r) for r in a.rates.split(",")]
    curves, t_start = {}, time.time()
    for algo, compress in CONFIGS:
        curves[(algo, compress)] = curve(run_config(rates, algo, compress, a))
        last = curves[(algo, compress)][-1]
        print(f"{label(algo, compress)}: {last['round']} rounds, {last['t']:.1f} s, val {last['val']:.3f}", flush=True)
    target = a.target if a.target is not None else max(c[-1]["val"] for c in curves.values())
    rows = []
    for (algo, compress), c in curves.items():
        other = curves[(algo, not compress)]
        same = all(p["losses"] == q["losses"] for p, q in zip(c, other))
        tt, tt_plain = time_to(c, target), time_to(curves[(algo, False)], target)
        rows.append({"run": label(algo, compress), "rounds": c[-1]["round"], "s_per_round": c[-1]["t"] / c[-1]["round"],
                     "final_val": c[-1]["val"], "time_to_target_s": tt,
                     "compression_speedup": (tt_plain / tt) if (tt and tt_plain) else None,
                     "MiB_sent_per_worker": c[-1]["sent"] / 2**20, "ratio": c[-1]["raw"] / c[-1]["sent"],
                     "same_losses_as_other": same})
    from bench.ratio import to_markdown

    cols = list(rows[0])
    table = to_markdown(rows, cols, "{:.3f}")
    params = 0
    try:
        from trainers.diloco import GPTConfig, TinyGPT

        params = sum(p.numel() for p in TinyGPT(GPTConfig(dim=a.dim, layers=a.layers)).parameters())
    except ImportError:
        pass
    cmd = (f"python -m bench.decentralized --rates {a.rates} --rounds {a.rounds} --inner {a.inner} --dim {a.dim} "
           f"--layers {a.layers} --batch {a.batch}" + (f" --target {a.target}" if a.target is not None else ""))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{a.out}.md").write_text(
        "# DiLoCo vs GASLoC on heterogeneous links, with and without zipccl\n\n"
        f"Regenerate (root): `{cmd}` ({(time.time() - t_start) / 60:.0f} min).\n\n"
        f"4 workers in network namespaces on one 2-core machine (one torch thread and one codec thread each), "
        f"links {a.rates} Mbit/s (tc/tbf). Byte-level GPT, {params / 1e6:.2f} M fp32 parameters, stdlib sources, "
        f"H = {a.inner} inner AdamW steps of batch {a.batch} per round, {a.rounds} rounds. Clock = local steps + "
        "communication of the slowest worker (evaluation excluded); validation loss = mean over workers of each "
        f"worker's own model. Target loss {target:.3f}. `compression_speedup` = uncompressed time to target / "
        "compressed time to target of the same algorithm; `same_losses_as_other` checks the compressed and "
        "uncompressed runs logged identical training losses on every worker and round (lossless).\n\n"
        + table + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.5, 4))
        for (algo, compress), c in curves.items():
            ax.plot([p["t"] for p in c], [p["val"] for p in c], label=label(algo, compress),
                    color="C0" if algo == "diloco" else "C1", ls="-" if compress else "--", marker=".")
        ax.axhline(target, color="grey", lw=0.8, ls=":")
        ax.set_xlabel("wall clock (s, slowest worker, evaluation excluded)")
        ax.set_ylabel("validation loss (nats/byte)")
        ax.set_title(f"4 workers, links {a.rates} Mbit/s")
        ax.legend()
        fig.tight_layout()
        fig.savefig(RESULTS / f"{a.out}.png", dpi=120)
    except ImportError:
        pass
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
