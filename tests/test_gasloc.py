"""GASLoC: gossip with outer momentum; reduces to DiLoCo on a complete graph with full averaging."""
import pytest

torch = pytest.importorskip("torch")
from tests.dist_helpers import run_ranks  # noqa: E402
from trainers.gasloc import GASLoCConfig, random_matching  # noqa: E402


def _fresh():
    from trainers.diloco import GPTConfig, TinyGPT

    torch.manual_seed(0)
    return TinyGPT(GPTConfig(dim=32, layers=1, heads=2, block=32))


def _rounds(trainer, rank, n=3):
    from trainers.diloco import batches, stdlib_bytes

    it = batches(stdlib_bytes(1 << 18), 4, 32, seed=rank)
    for _ in range(n):
        trainer.outer_step(it)


def case_reduction(rank, ws):
    from trainers.diloco import DiLoCo, DiLoCoConfig, flat_params
    from trainers.gasloc import GASLoC

    m1 = _fresh()
    _rounds(DiLoCo(m1, DiLoCoConfig(inner_steps=2, outer_momentum=0.0, outer_lr=0.7)), rank)
    m2 = _fresh()
    _rounds(GASLoC(m2, GASLoCConfig(inner_steps=2, eta=0.7, alpha=1.0, gamma=0.0, topology="complete-average")), rank)
    return (flat_params(m1) - flat_params(m2)).abs().max().item()


def case_gossip(rank, ws):
    from trainers.diloco import flat_params
    from trainers.gasloc import GASLoC

    out = {}
    for compress in (True, False):
        m = _fresh()
        cfg = GASLoCConfig(inner_steps=2, gamma=0.5, compress=compress, edges=[(0, 1), (1, 2), (2, 3), (3, 0)])
        _rounds(GASLoC(m, cfg), rank)
        out[compress] = flat_params(m).view(torch.int32).tolist()
    return out


def _run(case, ws):
    res = run_ranks(case, ws)
    for r in res.values():
        assert not isinstance(r, str), r
    return res


def test_reduces_to_diloco_on_complete_graph_with_full_averaging():
    res = _run(case_reduction, 2)
    assert all(v < 1e-5 for v in res.values()), res


def test_compressed_gossip_is_bit_identical():
    res = _run(case_gossip, 4)
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
