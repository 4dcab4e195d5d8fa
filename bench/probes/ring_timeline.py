"""Probe: where a compressed ring all-reduce's time goes on one rank (run on the emulated cluster, root):
``python -m bench.cluster --rates 1000,1000,1000,1000 -- -m bench.probes.ring_timeline [MiB] [data] [all_reduce|all_gather]``.

Rank 0 records when each frame's encode, decode(+add), send and receive start and end (wrapping the
framing functions and gloo's isend/irecv), then prints per activity its busy seconds and the share of the
call during which the link had nothing to send (no send in flight).
"""
import json
import sys
import threading
import time

import torch
import torch.distributed as dist


class _Timed:
    """A gloo Work whose wait() also logs when it returned."""

    def __init__(self, work, done):
        self._work, self._done = work, done

    def wait(self, *a):
        r = self._work.wait(*a)
        self._done()
        return r

    def __getattr__(self, name):
        return getattr(self._work, name)


def main() -> int:
    import collectives
    from bench.collectives_bench import _data
    from collectives import framing

    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    kind = sys.argv[2] if len(sys.argv) > 2 else "gradients"
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = _data((mib << 20) // 2, rank, kind)
    events = []
    lock = threading.Lock()

    def log(what, t0, t1, nbytes=0):
        with lock:
            events.append((what, t0, t1, nbytes, threading.current_thread().name))

    enc0, dec0, isend0, irecv0 = framing.encode, framing.decode_into, dist.isend, dist.irecv

    def enc(t, *a, **k):
        t0 = time.perf_counter()
        out = enc0(t, *a, **k)
        log("encode", t0, time.perf_counter(), t.numel() * t.element_size())
        return out

    def dec(buf, out, *a, **k):
        t0 = time.perf_counter()
        r = dec0(buf, out, *a, **k)
        log("decode", t0, time.perf_counter(), out.numel() * out.element_size())
        return r

    def wrap(fn, what):
        def call(t, *a, **k):
            t0 = time.perf_counter()
            return _Timed(fn(t, *a, **k), lambda: log(what, t0, time.perf_counter(), t.numel() * t.element_size()))
        return call

    y = x.clone()
    gathered = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    op = sys.argv[3] if len(sys.argv) > 3 else "all_reduce"

    def call():
        if op == "all_gather":
            collectives.all_gather(gathered, x, compress=True)
        else:
            collectives.all_reduce(y, compress=True)
    for _ in range(2):
        y.copy_(x)
        call()
    framing.encode, framing.decode_into = enc, dec
    dist.isend, dist.irecv = wrap(isend0, "send"), wrap(irecv0, "recv")
    y.copy_(x)
    dist.barrier()
    t0 = time.perf_counter()
    call()
    t1 = time.perf_counter()
    framing.encode, framing.decode_into, dist.isend, dist.irecv = enc0, dec0, isend0, irecv0
    if rank == 0:
        busy = {}
        for what, a, b, n, _ in events:
            busy[what] = busy.get(what, 0) + (b - a)
        # the link idles where no send is in flight
        sends = sorted((a, b) for what, a, b, _, _ in events if what == "send" and a >= t0)
        covered, end = 0.0, t0
        for a, b in sends:
            a = max(a, end)
            if b > a:
                covered += b - a
                end = b
        out = {"seconds": t1 - t0, "busy_s": busy, "send_in_flight_share": covered / (t1 - t0),
               "events": [(w, round(a - t0, 4), round(b - t0, 4), n, th) for w, a, b, n, th in sorted(events, key=lambda e: e[1])]}
        print(json.dumps(out))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
