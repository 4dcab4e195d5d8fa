"""Compressed collectives vs torch.distributed (gloo) on the emulated cluster, by link rate.

    sudo python -m bench.collectives_speed          # -> bench/results/collectives.md, collectives.png

4 ranks, one per network namespace, every link shaped to the same rate with tc/tbf
(0 = unshaped veth).  For each rate: all_reduce and all_gather of bf16 MiniLM weights, or of
real MiniLM gradients (``rate:size:gradients``: one backward pass, bench.corpus; half exact zeros),
rotated per rank, torch's own gloo collective vs zipccl compressed vs the same zipccl
algorithm uncompressed, best of ``--reps``; compressed results are checked bit-identical to
uncompressed.  All ranks share this machine's 2 cores, so codec time is inflated ~2x against
a real cluster where each rank has its own cores.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
from pathlib import Path

from bench.cluster import Cluster

RESULTS = Path(__file__).resolve().parent / "results"


def plot(rows, ranks, path) -> None:
    """One horizontal bar per row of ``ranks`` ranks: zipccl compressed's speed-up over torch gloo, labelled
    by op, data, size and link rate (``auto``'s choice marked), to ``path``; nothing without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rs = [r for r in rows if int(r["ranks"]) == ranks and "speedup_vs_torch" in r]
    if not rs:
        return
    rate = lambda r: "unshaped" if r["link_mbit"] in (0, "unshaped") else f"{float(r['link_mbit']) / 1000:g} Gbit/s"  # noqa: E731
    labels = [f"{r['op']} {r.get('data', '')} {float(r['MiB']):g} MiB, {rate(r)}" for r in rs]
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(rs) + 1.2))
    ys = list(range(len(rs)))[::-1]
    ax.barh(ys, [float(r["speedup_vs_torch"]) for r in rs],
            color=["tab:blue" if str(r.get("auto_choice", "")).startswith("compressed") else "tab:grey" for r in rs])
    ax.set_yticks(ys, labels, fontsize=8)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xlabel("torch gloo time / zipccl compressed time (grey: auto chose uncompressed)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--plan", default="100:16,1000:64,1000:32,1000:64:gradients,1000:32:gradients,10000:64,0:64",
                    help="rate_mbit:size_mib[:weights|gradients],...")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--p2p", default="1000:256", help="rate_mbit:size_mib for the 2-host send/recv run ('' to skip)")
    ap.add_argument("--moe", default="1000:32,100:8",
                    help="rate_mbit:size_mib,... for all_to_all_single of real activations with uneven (MoE) splits")
    ap.add_argument("--out", default=None, help="the table (default bench/results/collectives.md)")
    a = ap.parse_args(argv)
    rows = []
    runs = [(item, a.ranks, "all_reduce,all_gather") for item in a.plan.split(",") if item]
    runs += [(a.p2p, 2, "p2p")] if a.p2p else []
    runs += [(f"{item}:activations", a.ranks, "all_to_all") for item in a.moe.split(",") if item]
    if any(item.endswith((":gradients", ":activations")) for item, _, _ in runs):
        from bench.corpus import build_corpus_f32

        build_corpus_f32(verbose=True)          # computed once here (cached), not by every rank at once
    for item, ranks, ops in runs:
        rate, size, data = (item.split(":") + ["weights"])[:3]
        with Cluster([float(rate)] * ranks) as c:
            # each emulated host gets its share of this machine's cores for the codec
            threads = str(max(1, (os.cpu_count() or 1) // ranks))
            # (torch's intra-op threads too, as torchrun sets OMP_NUM_THREADS=1 for several ranks per node)
            out = c.run(["-m", "bench.collectives_bench", "--size-mib", size, "--reps", str(a.reps), "--ops", ops,
                         "--data", data],
                        env={"NUMBA_NUM_THREADS": threads, "OMP_NUM_THREADS": threads})
        for r in json.loads(out[0].strip().splitlines()[-1]):
            r["link_mbit"] = float(rate) or "unshaped"
            r.setdefault("bound_s", float("nan"))
            r.setdefault("codec_core_s", float("nan"))
            r.setdefault("model_bound_s", float("nan"))
            r.setdefault("frame_ratio", float("nan"))
            r.setdefault("compressed_vs_bound", float("nan"))
            r.setdefault("host_bound_s", float("nan"))
            r.setdefault("compressed_vs_host_bound", float("nan"))
            rows.append(r)
            print(r)
    from bench.ratio import to_markdown
    from bench.speed import _cpu_model

    cols = ["op", "data", "link_mbit", "MiB", "ranks", "ratio", "torch_gloo_s", "zipccl_uncompressed_s",
            "zipccl_compressed_s", "speedup_vs_torch", "frame_ratio", "codec_core_s", "model_bound_s", "bound_s", "compressed_vs_bound", "host_bound_s", "compressed_vs_host_bound", "auto_choice", "auto_s", "auto_vs_best", "bit_identical"]
    table = to_markdown(rows, cols, "{:.3f}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = Path(a.out) if a.out else RESULTS / "collectives.md"
    out.write_text(
        "# Compressed collectives vs torch.distributed gloo (emulated cluster)\n\n"
        f"Regenerate (root): `python -m bench.collectives_speed --plan {a.plan} --p2p {shlex.quote(a.p2p)} --moe {shlex.quote(a.moe)} "
        f"--reps {a.reps}`. CPU: {_cpu_model()}. "
        f"{a.ranks} ranks (2 for send/recv) in network namespaces on one 2-core machine, links shaped with tc/tbf; "
        "times are best of at least `--reps` rounds (more for fast calls, until the slowest candidate ran 3 s, at most 20; after one untimed call of each, the candidates interleaved; the codec speeds measured one rank at a time); speed-up = torch time / zipccl compressed time; `auto` = compress=\"auto\" "
        "(alpha-beta cost model after calibration; when it turns compression off it runs torch's own "
        "collective), `auto_vs_best` = its time / the best of torch gloo, zipccl uncompressed and zipccl "
        "compressed. `frame_ratio` = the ratio the compressed call's frames got (raw / coded bytes of every frame "
        "a rank encoded; an all-reduce's partial sums code worse than its inputs); `codec_core_s` = a rank's codec CPU seconds for "
        "the call: the frames it encoded and decoded in one compressed call, recorded, then coded again on one core "
        "of the otherwise idle machine (ranks taking turns; mean over ranks), plus an all-reduce's additions; "
        "`bound_s` = the compressed ring's lower bound, max(wire time of the coded bytes a rank sends at the "
        "calibrated link speed and frame_ratio, codec_core_s on the rank's share of the cores (2 cores / 4 ranks)); "
        "`model_bound_s` = the same bound from the cost model's codec seconds (the codec's one-thread speed on the "
        "rank's input, which undercounts an all-reduce's partial sums: the bound of tables before 2026-12-06 "
        "session p); `compressed_vs_bound` = compressed time / bound; `host_bound_s` = the same bound with this host's kernel networking charged too (TCP, veth and tc run on the same 2 cores: the machine's busy CPU seconds per byte sent during the uncompressed ring, less its additions, times the coded bytes a rank sends, forwarded frames included: before 2026-12-06 session p only the frames it encoded). Send/recv rows: split-send (low mantissa bits sent at once while the rest is coded) and "
        "whole-slice coding, both pipelined in 8 MiB slices. all_to_all rows: MoE dispatch of real MiniLM hidden "
        "states (token rows of 384 values), each rank's splits uneven (40/30/20/10 %, rotated per rank).\n\n"
        + table + "\n")
    plot(rows, a.ranks, out.with_suffix(".png"))
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
