"""Run a function on N real torch.distributed ranks (gloo over loopback sockets, separate processes)."""
import socket
import traceback

# what every rank process needs, imported once by the forkserver that forks the ranks (a spawned rank
# imported them itself: ~5 CPU-seconds per rank, most of the consumer tests' time on 2 cores)
PRELOAD = ["torch", "torch.distributed", "codec", "collectives", "tests.dist_helpers"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, ws, port, fn, args, results):
    import datetime

    import torch.distributed as dist

    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ws,
                                timeout=datetime.timedelta(seconds=120))
        results.put((rank, fn(rank, ws, *args)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        results.put((rank, f"EXC {type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(fn, ws: int, *args, expect: int | None = None, timeout: float = 300) -> dict:
    """``{rank: fn(rank, ws, *args)}`` (a string starting with "EXC" where it raised).

    ``fn`` must be a module-level function (spawned processes import it).  ``expect``: how many
    ranks report (fewer when a test kills one on purpose).
    """
    import torch.multiprocessing as mp

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, ws, port, fn, args, q)) for r in range(ws)]
    for p in procs:
        p.start()
    out = dict(q.get(timeout=timeout) for _ in range(ws if expect is None else expect))
    for p in procs:
        p.join(60)
    return out
