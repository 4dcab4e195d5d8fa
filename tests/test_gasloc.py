"""GASLoC: gossip with outer momentum; reduces to DiLoCo on a complete graph with full averaging."""
import socket

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from trainers.gasloc import GASLoCConfig, random_matching  # noqa: E402


def _worker(rank, ws, port, q, case):
    import datetime

    from trainers.diloco import DiLoCo, DiLoCoConfig, GPTConfig, TinyGPT, batches, flat_params, stdlib_bytes
    from trainers.gasloc import GASLoC

    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ws,
                                timeout=datetime.timedelta(seconds=120))
        data = stdlib_bytes(1 << 18)

        def fresh():
            torch.manual_seed(0)
            return TinyGPT(GPTConfig(dim=32, layers=1, heads=2, block=32))

        out = {}
        if case == "reduction":
            m1 = fresh()
            d = DiLoCo(m1, DiLoCoConfig(inner_steps=2, outer_momentum=0.0, outer_lr=0.7))
            it = batches(data, 4, 32, seed=rank)
            for _ in range(3):
                d.outer_step(it)
            m2 = fresh()
            gl = GASLoC(m2, GASLoCConfig(inner_steps=2, eta=0.7, alpha=1.0, gamma=0.0, topology="complete-average"))
            it = batches(data, 4, 32, seed=rank)
            for _ in range(3):
                gl.outer_step(it)
            out = (flat_params(m1) - flat_params(m2)).abs().max().item()
        else:
            for compress in (True, False):
                m = fresh()
                cfg = GASLoCConfig(inner_steps=2, gamma=0.5, compress=compress, edges=[(0, 1), (1, 2), (2, 3), (3, 0)])
                gl = GASLoC(m, cfg)
                it = batches(data, 4, 32, seed=rank)
                for _ in range(3):
                    gl.outer_step(it)
                out[compress] = flat_params(m).view(torch.int32).tolist()
        q.put((rank, out))
    except BaseException as e:  # noqa: BLE001
        import traceback

        q.put((rank, f"EXC {e}\n{traceback.format_exc()}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _run(case, ws):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [ctx.Process(target=_worker, args=(r, ws, port, q, case)) for r in range(ws)]
    for p in procs:
        p.start()
    res = dict(q.get(timeout=300) for _ in range(ws))
    for p in procs:
        p.join(60)
    for r in res.values():
        assert not isinstance(r, str), r
    return res


def test_reduces_to_diloco_on_complete_graph_with_full_averaging():
    res = _run("reduction", 2)
    assert all(v < 1e-5 for v in res.values()), res


def test_compressed_gossip_is_bit_identical():
    res = _run("gossip", 4)
    for r in res.values():
        assert r[True] == r[False]
    assert res[0][True] != res[2][True]          # gossip: workers differ after a few rounds


def test_matching_uses_allowed_edges_and_is_shared():
    import numpy as np

    adj = {0: {1, 3}, 1: {0, 2}, 2: {1, 3}, 3: {2, 0}}
    for seed in range(20):
        a = random_matching(adj, np.random.default_rng([0, seed]))
        b = random_matching(adj, np.random.default_rng([0, seed]))
        assert a == b and all(a[a[i]] == i and a[i] in adj[i] for i in a)


@pytest.mark.parametrize("kw,msg", [({"edges": [(0, 1), (2, 3)]}, "disconnected"), ({"alpha": 1.5}, "stable range"),
                                    ({"inner_steps": 0}, "inner_steps"), ({"gamma": 1.0}, "gamma")])
def test_invalid_configuration(kw, msg):
    with pytest.raises(ValueError, match=msg):
        GASLoCConfig(**kw).validate(4)
