"""DiLoCo on compressed collectives: the compressed run ends bit-identical to the uncompressed one."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from tests.dist_helpers import run_ranks  # noqa: E402
from trainers.diloco import DiLoCoConfig  # noqa: E402


STAGES = ("local", "reduced", "params")      # per outer round: theta - p before the all-reduce, after it, theta'


def case_diloco(rank, ws):
    """Three outer rounds compressed, then the same three uncompressed.  Per round: this rank's local
    pseudo-gradient, the all-reduced one and the parameters after the outer step (int32 bits), and
    whether the compressed all-reduce gave the bits an uncompressed all-reduce of the same input gives
    (run side by side in the same round, so torch math cannot differ between the two)."""
    import collectives
    from trainers.diloco import DiLoCo, GPTConfig, TinyGPT, batches, flat_params, stdlib_bytes

    data = stdlib_bytes(1 << 18)
    real = collectives.all_reduce
    out = {}
    for compress in (True, False):
        rounds = []

        def spy(t, *args, **kw):                # the real all-reduce, watched; plus an uncompressed twin
            local = t.detach().clone()
            real(t, *args, **kw)
            twin = local.clone()
            real(twin, group=kw.get("group"), compress=False)
            rounds.append({"local": local.view(torch.int32).numpy(), "reduced": t.detach().clone().view(torch.int32).numpy(),
                           "twin_agrees": bool(torch.equal(twin.view(torch.int32), t.view(torch.int32)))})

        collectives.all_reduce = spy
        try:
            torch.manual_seed(0)
            model = TinyGPT(GPTConfig(dim=32, layers=1, heads=2, block=32))
            first = flat_params(model).clone()
            tr = DiLoCo(model, DiLoCoConfig(inner_steps=2, compress=compress))
            it = batches(data, 4, 32, seed=rank)
            losses = []
            for _ in range(3):
                losses.append(tr.outer_step(it))
                rounds[-1]["params"] = flat_params(model).view(torch.int32).numpy().copy()
        finally:
            collectives.all_reduce = real
        out[compress] = {"rounds": rounds, "losses": losses, "trained": not torch.equal(first, flat_params(model))}
    return out


def first_difference(a: dict, b: dict) -> str | None:
    """Where two runs' traces first differ, and what that points to; None if they agree."""
    blame = {"local": "the local AdamW steps (torch math) differ",
             "reduced": "the all-reduce (codec or collectives) differs for equal inputs",
             "params": "the outer step (torch math) differs for equal reduced deltas"}
    for k, (ra, rb) in enumerate(zip(a["rounds"], b["rounds"])):
        for stage in STAGES:
            d = np.flatnonzero(ra[stage] != rb[stage])
            if len(d):
                i = int(d[0])
                va, vb = (np.array([ra[stage][i], rb[stage][i]], np.int32).view(np.float32))
                return (f"outer round {k + 1}, {stage}: {len(d)} of {ra[stage].size} values differ, "
                        f"first at index {i} ({va!r} vs {vb!r}): {blame[stage]}")
    return None


def test_compressed_diloco_is_bit_identical_and_ranks_agree():
    res = run_ranks(case_diloco, 2)
    for r in res.values():
        assert not isinstance(r, str), r
    for rank in range(2):
        for compress in (True, False):          # the compressed all-reduce == the uncompressed one, each round
            twins = [rd["twin_agrees"] for rd in res[rank][compress]["rounds"]]
            assert all(twins), f"rank {rank}, compress={compress}: all-reduce differs from its twin: {twins}"
        where = first_difference(res[rank][True], res[rank][False])
        assert where is None, f"rank {rank}: compressed vs uncompressed run: {where}"
        assert res[rank][True]["trained"]                           # the model did train
    for k, (r0, r1) in enumerate(zip(res[0][True]["rounds"], res[1][True]["rounds"])):    # all workers share theta
        assert np.array_equal(r0["reduced"], r1["reduced"]) and np.array_equal(r0["params"], r1["params"]), \
            f"outer round {k + 1}: the workers disagree on the reduced delta or theta"
    assert res[0][True]["losses"] != res[1][True]["losses"]       # on different data


def test_first_difference_names_the_stage():
    x = np.arange(6, dtype=np.int32)
    a = {"rounds": [{"local": x, "reduced": x, "params": x}] * 2}
    y = x.copy()
    y[4] += 9
    assert first_difference(a, a) is None
    msg = first_difference(a, {"rounds": [{"local": x, "reduced": x, "params": x}, {"local": x, "reduced": y, "params": y}]})
    assert msg.startswith("outer round 2, reduced: 1 of 6 values differ, first at index 4") and "codec" in msg


@pytest.mark.parametrize("kw,msg", [({"inner_steps": 0}, "inner_steps"), ({"outer_lr": 0.0}, "outer_lr"),
                                    ({"outer_momentum": 1.0}, "outer_momentum"),
                                    ({"threads": -1}, "threads")])
def test_invalid_hyperparameters(kw, msg):
    with pytest.raises(ValueError, match=msg):
        DiLoCoConfig(**kw).validate()
