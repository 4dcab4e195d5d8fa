"""DiLoCo on compressed collectives: the compressed run ends bit-identical to the uncompressed one."""
import pytest

torch = pytest.importorskip("torch")
from tests.dist_helpers import run_ranks  # noqa: E402
from trainers.diloco import DiLoCoConfig  # noqa: E402


def case_diloco(rank, ws):
    from trainers.diloco import DiLoCo, GPTConfig, TinyGPT, batches, flat_params, stdlib_bytes

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
    return out


def test_compressed_diloco_is_bit_identical_and_ranks_agree():
    res = run_ranks(case_diloco, 2)
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
