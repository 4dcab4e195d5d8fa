"""DiLoCo on compressed collectives: the compressed run ends bit-identical to the uncompressed one."""
import socket

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from trainers.diloco import DiLoCoConfig  # noqa: E402


def _worker(rank, ws, port, q):
    import datetime

    from trainers.diloco import DiLoCo, GPTConfig, TinyGPT, batches, flat_params, stdlib_bytes

    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ws,
                                timeout=datetime.timedelta(seconds=120))
        data = stdlib_bytes(1 << 18)
        out = {}
        for compress in (True, False):
            torch.manual_seed(0)
            model = TinyGPT(GPTConfig(dim=32, layers=1, heads=2, block=32))
            first = flat_params(model).clone()
            tr = DiLoCo(model, DiLoCoConfig(inner_steps=2, compress=compress))
            it = batches(data, 4, 32, seed=rank)
            losses = [tr.outer_step(it) for _ in range(3)]
            out[compress] = (flat_params(model).view(torch.int32).tolist(), losses,
                             bool(torch.equal(first, flat_params(model))))
        q.put((rank, out))
    except BaseException as e:  # noqa: BLE001
        import traceback

        q.put((rank, f"EXC {e}\n{traceback.format_exc()}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_compressed_diloco_is_bit_identical_and_ranks_agree():
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [ctx.Process(target=_worker, args=(r, 2, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    res = dict(q.get(timeout=300) for _ in range(2))
    for p in procs:
        p.join(60)
    for r in res.values():
        assert not isinstance(r, str), r
    for rank in range(2):
        assert res[rank][True][0] == res[rank][False][0]           # compression does not touch the model
        assert res[rank][True][2] is False                         # and the model did train
    assert res[0][True][0] == res[1][True][0]                      # all workers share theta
    assert res[0][True][1] != res[1][True][1]                      # on different data


@pytest.mark.parametrize("kw,msg", [({"inner_steps": 0}, "inner_steps"), ({"outer_lr": 0.0}, "outer_lr"),
                                    ({"outer_momentum": 1.0}, "outer_momentum")])
def test_invalid_hyperparameters(kw, msg):
    with pytest.raises(ValueError, match=msg):
        DiLoCoConfig(**kw).validate()
