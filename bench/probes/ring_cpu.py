"""Probe: where a compressed ring all-reduce's CPU seconds go, per rank and per thread (run on the emulated
cluster, root): ``python -m bench.cluster --rates 1000,1000,1000,1000 -- -m bench.probes.ring_cpu [MiB] [data] [all_reduce|all_gather]``.

Each rank wraps the codec's encode and decode with thread CPU clocks and reads every thread of its process
(``/proc/self/task``) around six all-reduce calls; rank 0 prints, summed over ranks and calls' mean: the
call's time, the machine's busy core-seconds, the ranks' CPU seconds by thread, and how much of it the
codec's encode and decode took.  What is neither is the ring's own cost (Python, additions, gloo's I/O
threads, copies, page faults)."""
import os
import resource
import sys
import threading
import time

import torch
import torch.distributed as dist

_TICK = os.sysconf("SC_CLK_TCK")


def _threads() -> dict:
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                st = f.read()
        except OSError:
            continue
        name = st[st.index("(") + 1:st.rindex(")")]
        fields = st[st.rindex(")") + 2:].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / _TICK)
    return out


def main() -> int:
    import codec
    import collectives
    from bench.collectives_bench import _codec_alone_s, _data, _host_busy_s, _Recorder

    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    kind = sys.argv[2] if len(sys.argv) > 2 else "gradients"
    spent = {"encode": 0.0, "decode": 0.0}
    names = {}
    lock = threading.Lock()

    def wrap(fn, key):
        def timed(*a, **k):
            c0 = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                with lock:
                    spent[key] += time.thread_time() - c0
                    names[threading.get_native_id()] = threading.current_thread().name
        return timed
    codec.encode, codec.decode = wrap(codec.encode, "encode"), wrap(codec.decode, "decode")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = _data((mib << 20) // 2, rank, kind)
    y = x.clone()
    op = sys.argv[3] if len(sys.argv) > 3 else "all_reduce"
    gathered = [torch.empty_like(x) for _ in range(dist.get_world_size())]

    def call():
        if op == "all_gather":
            collectives.all_gather(gathered, x)
        else:
            collectives.all_reduce(y)
    y.copy_(x)
    call()                                                # warm: kernels, pools
    calls = int(os.environ.get("RING_CPU_CALLS", 6))
    dist.barrier()
    spent.update(encode=0.0, decode=0.0)
    perf = None
    if rank == 0 and os.environ.get("RING_CPU_PERF"):      # a system-wide profile of the timed calls only
        import subprocess
        perf = subprocess.Popen(["perf", "record", "-a", "-o", os.environ["RING_CPU_PERF"]],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    dist.barrier()
    th0, b0, wall, r0 = _threads(), _host_busy_s(), 0.0, resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(calls):
        y.copy_(x)
        dist.barrier()
        t0 = time.perf_counter()
        call()
        dist.barrier()
        wall += time.perf_counter() - t0
    th1, b1, r1 = _threads(), _host_busy_s(), resource.getrusage(resource.RUSAGE_SELF)
    if perf is not None:
        import signal
        perf.send_signal(signal.SIGINT)
        perf.wait()
    per_thread = {}
    for tid, (name, cpu) in th1.items():
        label = names.get(tid, name)
        label = "main" if tid == os.getpid() else name
        per_thread[label] = per_thread.get(label, 0.0) + cpu - th0.get(tid, (name, 0.0))[1]
    per_thread["threads that ended (ring pools, sender)"] = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
                                                            - sum(per_thread.values()))
    per_thread["(of all: system)"] = 0.0
    mine = {"threads": per_thread, "system": r1.ru_stime - r0.ru_stime, **spent}   # before the recorded call
    # the same call's codec work alone: record what one call encodes and decodes, then time it one rank at
    # a time on an otherwise idle machine (the benchmark's bound, on the frames the ring actually codes)
    y.copy_(x)
    dist.barrier()
    with _Recorder() as rec:
        call()
    mine["alone"] = (*_codec_alone_s(rec), len(rec.encoded), len(rec.decoded))
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    if rank == 0:
        tot = {}
        for m in every:
            for k, v in m["threads"].items():
                tot[k] = tot.get(k, 0.0) + v / calls
        enc = sum(m["encode"] for m in every) / calls
        dec = sum(m["decode"] for m in every) / calls
        cpu = sum(tot.values())
        tot["(of all: system)"] = sum(m["system"] for m in every) / calls
        print(f"{op} {mib} MiB {kind}: {wall / calls:.3f} s a call, machine busy {(b1 - b0) / calls:.3f} core-s, "
              f"ranks {cpu:.3f} CPU-s: encode {enc:.3f}, decode {dec:.3f}, other {cpu - enc - dec:.3f}")
        ea = sum(m["alone"][0] for m in every)
        da = sum(m["alone"][1] for m in every)
        print(f"  the same frames coded alone (one rank at a time): encode {ea:.3f} s, decode {da:.3f} s "
              f"({every[0]['alone'][2]} encodes, {every[0]['alone'][3]} decodes a rank); on 2 cores "
              f"{(ea + da) / 2:.3f} s")
        for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
            print(f"  {k:32s} {v:.3f}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
