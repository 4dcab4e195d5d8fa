"""FSDP2 (torch's ``fully_shard``) with zipccl's all-gather and reduce-scatter (collectives.fsdp), on real
gloo ranks: after SGD steps the parameters are bit-identical to plain FSDP2's on 2 ranks (a sum of two
does not depend on the order), and on 4 ranks compressed and uncompressed zipccl agree bit for bit
(gloo's reduce-scatter sums in its own order, so plain FSDP2 there differs by rounding only).  Both in
CI's slow step (FSDP2 setup costs seconds per model)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.dist_helpers import run_ranks  # noqa: E402


def case_fsdp2(rank, ws):
    import collectives.fsdp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (ws,))
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        for mode in ("plain", "zipccl", "zipccl_uncompressed"):
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64),
                                        torch.nn.GELU(), torch.nn.Linear(64, 8)).to(dtype)
            for layer in (model[0], model[2], model[4]):
                fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            if mode != "plain":
                assert collectives.fsdp.use_zipccl(model, compress=mode == "zipccl") == 4
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            g = torch.Generator().manual_seed(rank)
            for _ in range(3):
                opt.zero_grad()
                model(torch.randn(16, 64, generator=g).to(dtype)).float().pow(2).mean().backward()
                opt.step()
            out[(str(dtype), mode)] = [p.full_tensor().detach().float().numpy().view(np.uint32).copy()
                                       for p in model.parameters()]
    return out


def _same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b))


def _check(res, ws, want_plain):
    assert all(isinstance(r, dict) for r in res.values()), res
    for r in range(ws):
        for dtype in ("torch.float32", "torch.bfloat16"):
            got = res[r]
            assert _same(got[(dtype, "zipccl")], got[(dtype, "zipccl_uncompressed")])
            assert _same(got[(dtype, "zipccl")], res[0][(dtype, "zipccl")])           # every rank the same
            if want_plain:
                assert _same(got[(dtype, "zipccl")], got[(dtype, "plain")]), (r, dtype)


@pytest.mark.slow
def test_fsdp2_custom_comms_two_ranks_match_plain_fsdp2():
    _check(run_ranks(case_fsdp2, 2), 2, want_plain=True)


@pytest.mark.slow
def test_fsdp2_custom_comms_four_ranks():
    _check(run_ranks(case_fsdp2, 4), 4, want_plain=False)
