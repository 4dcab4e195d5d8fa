"""Probe: how busy a collective keeps the machine (run on the emulated cluster, root):
``python -m bench.cluster --rates 1000,1000,1000,1000 -- -m bench.probes.ring_busy [MiB] [data] [compress]``
(``data``: weights or gradients, as bench.collectives_bench; ``compress``: 1 or 0).

Times six ``collectives.all_reduce`` calls and, around each, the machine's busy CPU seconds (every core,
user and kernel, from /proc/stat) and every rank's own user and system seconds; rank 0 prints a line a
call.  Busy seconds near 2 x the call's time on 2 cores: the call is CPU-bound (the codec, the ranks'
Python and the kernel's networking share the cores).  ``ZIPCCL_RING_SLICE_BYTES`` in the environment
sets the ring's slice (measured on Zen 3, 64 MiB weights at 1 Gbit/s: 1.6, 1.26, 1.18 and 1.1 busy
core-seconds a call with 1, 2, 4 and 8 MiB slices).  Set ``NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1`` as
bench.collectives_speed does for 4 ranks on 2 cores.
"""
import resource
import sys
import time

import torch.distributed as dist


def main() -> int:
    import collectives
    from bench.collectives_bench import _data, _host_busy_s

    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    kind = sys.argv[2] if len(sys.argv) > 2 else "weights"
    compress = (sys.argv[3] if len(sys.argv) > 3 else "1") == "1"
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = _data((mib << 20) // 2, rank, kind)
    y = x.clone()
    for _ in range(6):
        y.copy_(x)
        dist.barrier()
        b0, r0, t0 = _host_busy_s(), resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        collectives.all_reduce(y, compress=compress)
        dist.barrier()
        t1, r1, b1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF), _host_busy_s()
        mine = (r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime)
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
        if rank == 0:
            user, system = sum(u for u, _ in every), sum(s for _, s in every)
            print(f"{mib} MiB {kind} compress={compress}: {t1 - t0:.3f} s, machine busy {b1 - b0:.3f} core-s "
                  f"({(b1 - b0) / (2 * (t1 - t0)):.0%} of 2 cores), ranks user {user:.3f} s, system {system:.3f} s",
                  flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
