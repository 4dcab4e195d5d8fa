"""Compressed collectives on real torch.distributed (gloo over loopback sockets), 2 and 4 ranks."""
import os

import pytest

torch = pytest.importorskip("torch")

from codec.layouts import layout_for  # noqa: E402
from tests.dist_helpers import run_ranks  # noqa: E402


def _run(case, ws):
    return run_ranks(case, ws, expect=ws - (case is case_dead))


def _data(rank, n, dtype, seed=0):
    g = torch.Generator().manual_seed(seed * 100 + rank)
    x = torch.randn(n, generator=g) * 0.02
    x[::7] = 0
    return x.to(dtype)


def _bits(t):
    t = t.contiguous()
    return t.view(layout_for(t.dtype).torch_view_ints).tolist()


DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn]


def case_all(rank, ws):
    """Every collective, compressed and not, must give identical bits."""
    import collectives

    out = {}
    for dt in DTYPES:
        for n in (0, 1, 1001, 70_000):
            x = _data(rank, n, dt)
            for compress in (True, False):
                key = f"{dt}-{n}-{compress}"
                gl = [torch.empty_like(x) for _ in range(ws)]
                collectives.all_gather(gl, x, compress=compress)
                b = x.clone() if rank == 1 else torch.zeros_like(x)
                collectives.broadcast(b, 1, compress=compress)
                ar = {}
                for algo in ("ring", "gather"):
                    if dt == torch.float8_e4m3fn:
                        continue                       # torch has no fp8 addition
                    t = x.clone()
                    w = collectives.all_reduce(t, algorithm=algo, compress=compress, async_op=True)
                    w.wait()
                    ar[algo] = _bits(t)
                rs = None
                if dt != torch.float8_e4m3fn and n:
                    inputs = [_data(rank, n // ws + 3, dt, seed=j + 1) for j in range(ws)]
                    o = torch.empty(n // ws + 3, dtype=dt)
                    collectives.reduce_scatter(o, inputs, compress=compress)
                    rs = _bits(o)
                splits_in = [(rank + j) % 3 for j in range(ws)]
                src = _data(rank, sum(splits_in), dt, seed=9)
                # rank r receives (j + r) % 3 rows from rank j... every rank's splits_in[j] goes to j
                splits_out = [(j + rank) % 3 for j in range(ws)]
                dst = torch.empty(sum(splits_out), dtype=dt)
                collectives.all_to_all_single(dst, src, splits_out, splits_in, compress=compress)
                out[key] = ([_bits(t) for t in gl], _bits(b), ar, rs, _bits(dst), _bits(x), _bits(src), splits_in)
    return out


def _special(n, dt, seed):
    """Gaussian values with raw random words (NaN payloads, -0, subnormals, infinities) mixed in."""
    x = _data(seed, n, dt)
    w = x.view(layout_for(x.dtype).torch_view_ints)
    g = torch.Generator().manual_seed(seed)
    w[::13] = torch.randint(-(1 << (8 * x.element_size() - 1)), 1 << (8 * x.element_size() - 1),
                            (w[::13].numel(),), generator=g, dtype=torch.int64).to(w.dtype)
    return x


def case_p2p(rank, ws):
    import collectives

    out = []
    for dt in DTYPES:
        for n in (0, 1, 5000):
            x = _special(n, dt, 7)
            ref = _bits(x)
            for kw in ({"checksum": True}, {"slice_bytes": 999}, {"split": False, "slice_bytes": 999},
                       {"compress": False}):
                if rank == 0:
                    collectives.send(x, 1, **kw)
                    out.append(_bits(x) == ref)                        # the input was not modified
                else:
                    y = torch.empty_like(x)
                    collectives.recv(y, 0, **{k: v for k, v in kw.items() if k in ("checksum", "compress")})
                    out.append((str(dt), n, str(kw), _bits(y) == ref))
    return out


def case_mismatch(rank, ws):
    import collectives

    x = torch.zeros(10 + (rank == ws - 1), dtype=torch.bfloat16)
    try:
        collectives.all_reduce(x)
    except ValueError as e:
        return str(e)
    return "no error"


def case_corrupt(rank, ws):
    import codec
    import collectives.framing

    real = collectives.framing.encode

    def corrupting(t, compress, checksum):
        p = real(t, compress, checksum).clone()
        if rank == 0 and p.numel() > 100:
            p[p.numel() // 2] ^= 0x40
        return p

    collectives.framing.encode = corrupting
    x = _data(rank, 3000, torch.bfloat16)
    gl = [torch.empty_like(x) for _ in range(ws)]
    try:
        collectives.all_gather(gl, x, checksum=True)
    except codec.FormatError as e:
        return f"FormatError {e}"
    return "no error"


def _ddp_train(rank, state, hook, steps, bucket_cap_mb):
    """A small MLP trained ``steps`` SGD steps under DDP with ``hook`` (None: torch's own all-reduce)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 300), torch.nn.GELU(), torch.nn.Linear(300, 300),
                                torch.nn.GELU(), torch.nn.Linear(300, 8))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    if hook is not None:
        ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        opt.zero_grad()
        ddp(torch.randn(32, 64, generator=g)).pow(2).mean().backward()
        opt.step()
    return model


def case_ddp(rank, ws):
    """Default DDP all-reduce vs the overlapped and the blocking zipccl hook: two SGD steps each, several
    small buckets (so that buckets are in flight while backward goes on).  Then the overlapped hook with
    compress="auto" for 7 steps: its step tuner tries the cost model and torch's own all-reduce, runs rank 0's
    faster one, and compares again, switching at the same steps on every rank."""
    import collectives

    grads = []
    hooks = [(None, None), (None, collectives.allreduce_hook), (None, collectives.blocking_allreduce_hook),
             (collectives.HookState(compress=False), collectives.allreduce_hook)]
    for state, hook in hooks:
        model = _ddp_train(rank, state, hook, 2, 0.1)
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    diffs = [((grads[0] - other).abs().max().item(), grads[0].abs().max().item()) for other in grads[1:]]
    state = collectives.HookState(compress="auto", tuner_trial=1, tuner_period=2)
    params = [torch.cat([p.detach().reshape(-1) for p in _ddp_train(rank, s, h, 7, 0.05).parameters()])
              for s, h in ((None, None), (state, collectives.allreduce_hook))]
    diffs.append(((params[0] - params[1]).abs().max().item(), params[0].abs().max().item()))
    return diffs, state.tuner.history


def case_work_future(rank, ws):
    """Work.get_future() is a torch Future completed with the output, chainable with .then."""
    import collectives

    x = torch.full((100_000,), float(rank + 1), dtype=torch.bfloat16)
    w = collectives.all_reduce(x, async_op=True)
    fut = w.get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    got = doubled.wait()
    return isinstance(fut, torch.futures.Future), fut.value()[0] is x, float(got[0]), float(x[-1])


def case_dead(rank, ws):
    import time

    import collectives

    if rank == 1:
        os._exit(0)                                  # dies without a word
    t = time.perf_counter()
    try:
        collectives.all_reduce(torch.ones(100_000, dtype=torch.bfloat16))
    except RuntimeError as e:
        return f"{time.perf_counter() - t:.1f}s {e}"
    return "no error"


def case_fsdp(rank, ws):
    import collectives

    out = {}
    for compress in (True, False):
        x = _data(rank, 3000, torch.bfloat16)
        full = torch.empty(ws * 3000, dtype=torch.bfloat16)
        collectives.all_gather_into_tensor(full, x, compress=compress)
        big = _data(rank, ws * 1000, torch.float32, seed=4)
        mine = torch.empty(1000, dtype=torch.float32)
        collectives.reduce_scatter_tensor(mine, big, compress=compress)
        out[compress] = (_bits(full), _bits(mine))
    true = sum(_data(j, ws * 1000, torch.float32, seed=4) for j in range(ws))[rank * 1000:(rank + 1) * 1000]
    ok_sum = torch.allclose(torch.tensor(out[True][1], dtype=torch.int32).view(torch.float32), true, atol=1e-6)
    want_full = sum((_bits(_data(j, 3000, torch.bfloat16)) for j in range(ws)), [])
    return out[True] == out[False] and out[True][0] == want_full and ok_sum




def test_ddp_comm_hooks_match_default_allreduce():
    res = _run(case_ddp, 2)
    for diffs, _ in res.values():
        assert len(diffs) == 4, res                            # 3 hooks' gradients, auto's parameters
        for diff, scale in diffs:
            assert diff <= 1e-6 * max(scale, 1.0), res
    history = res[0][1]                                        # the auto hook's step tuner
    assert res[1][1] == history, res                           # every rank switched at the same steps
    assert len(history) == 7 and history[1:3] == ["model", "native"] and history[5:] == ["model", "native"]
    assert history[3] == history[4] in ("model", "native"), history


def test_work_future_is_a_torch_future():
    res = _run(case_work_future, 2)
    for r in range(2):
        assert res[r] == (True, True, 6.0, 3.0), res


@pytest.mark.parametrize("ws", [2, pytest.param(4, marks=pytest.mark.slow)])     # 4 ranks: CI's slow step
def test_collectives_bit_identical_to_uncompressed(ws):
    res = _run(case_all, ws)
    for rank, r in res.items():
        assert not isinstance(r, str), r
    keys = res[0].keys()
    for key in keys:
        if key.endswith("False"):
            continue
        plain = key[:-4] + "False"
        for rank in range(ws):
            gl, b, ar, rs, a2a, x, src, splits = res[rank][key]
            assert (gl, b, ar, rs, a2a) == tuple(res[rank][plain][:5]), (key, rank)
            assert gl == [res[j][key][5] for j in range(ws)]                    # all_gather is exact
            assert b == res[1][key][5]                                          # broadcast from rank 1
            assert ar["ring"] == res[0][key][2]["ring"] if ar else True         # all ranks agree
        if key.startswith("torch.float32") and not key.startswith("torch.float32-0"):   # sums are right
            n = int(key.split("-")[1])
            true = sum(_data(j, n, torch.float32) for j in range(ws))
            got = torch.tensor(res[0][key][2]["ring"], dtype=torch.int32).view(torch.float32)
            assert torch.allclose(got, true, atol=1e-6), key
        for rank in range(ws):                                                  # all_to_all routing
            a2a = res[rank][key][4]
            expect = []
            for j in range(ws):
                src_j, splits_j = res[j][key][6], res[j][key][7]
                start = sum(splits_j[:rank])
                expect += src_j[start:start + splits_j[rank]]
            assert a2a == expect, (key, rank)


def test_send_recv():
    """Pipelined and split-send point-to-point, every dtype, special words: bit-exact, input untouched."""
    res = _run(case_p2p, 2)
    for r in res.values():
        assert not isinstance(r, str), r
    assert all(res[0]) and len(res[0]) == 48
    bad = [c for c in res[1] if not c[-1]]
    assert not bad and len(res[1]) == 48


# ~12-15 s of spawned ranks: in CI's slow step (the README's run stays under 8 minutes on 2 cores)
@pytest.mark.slow
def test_mismatched_shapes_name_the_ranks():
    res = _run(case_mismatch, 4)
    for r in res.values():
        assert "ranks disagree" in r and "rank 3" in r, r


# (tests/test_hardening.py checks a peer's forged frame in the README's run)
# ~12-15 s of spawned ranks: in CI's slow step (the README's run stays under 8 minutes on 2 cores)
@pytest.mark.slow
def test_corrupted_frame_raises_with_checksum():
    res = _run(case_corrupt, 2)
    assert all(v.startswith("FormatError") for v in res.values()), res


def test_strategy_turns_compression_off_on_fast_links():
    from collectives import strategy

    x = (torch.randn(1 << 20) * 0.02).to(torch.bfloat16)
    slow = strategy.decide("all_reduce", x, 4, link=strategy.Link(alpha=1e-4, beta=12.5e6))      # 100 Mbit/s
    fast = strategy.decide("all_reduce", x, 4, link=strategy.Link(alpha=1e-5, beta=100e9))      # 100 GB/s
    small = strategy.decide("all_gather", x[:64], 4, link=strategy.Link(alpha=1e-4, beta=12.5e6))
    assert slow.choice.startswith("compressed") and fast.choice == "uncompressed"
    assert small.choice == "uncompressed"                     # latency-bound: nothing to gain
    assert set(slow.predicted_s) >= {"uncompressed", "compressed-ring"} and slow.ratio > 1.3


def test_cost_model_counts_cores_shared_by_ranks(monkeypatch):
    """At 1 Gbit/s the codec pays only if each rank has its own cores: 4 ranks sharing 2 cores must
    not compress (measured: compressed 0.6x of gloo there), 2 cores per rank may."""
    from collectives import strategy

    link = strategy.Link(alpha=1e-4, beta=125e6)
    args = (64 << 20, 4, link, 1.52, 230e6, 400e6)
    shared = strategy.predict_all_reduce(*args, cores=0.5)
    own = strategy.predict_all_reduce(*args, cores=2)
    assert shared["compressed-ring"] > shared["uncompressed"]
    assert own["compressed-ring"] < shared["compressed-ring"]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1000000")
    assert strategy.cores_per_rank() == 0.25                    # floored, never zero
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert strategy.cores_per_rank() >= 1


def test_cost_model_charges_the_codec_when_it_runs_beside_compute():
    """A DDP hook's all-reduce overlaps backward on the same cores: its wire time is hidden, its codec
    seconds are not.  2 MiB bf16 buckets, 4 ranks on 2 cores: at 1 Gbit/s the wire saving (~1/3 of
    ~24 ms) is less than the codec's CPU, so no compression; at 100 Mbit/s it is more."""
    from collectives import strategy

    args = (2 << 20, 4)
    rest = (1.45, 300e6, 800e6)
    for rate, want in ((125e6, "uncompressed"), (12.5e6, "compressed-ring")):
        link = strategy.Link(alpha=1e-4, beta=rate)
        beside = strategy.predict_all_reduce(*args, link, *rest, cores=0.5, add=2e9, while_computing=True)
        assert min(beside, key=beside.get) == want, (rate, beside)
        alone = strategy.predict_all_reduce(*args, link, *rest, cores=0.5, add=2e9)
        assert beside["compressed-ring"] >= beside["uncompressed"] or alone["compressed-ring"] < alone["uncompressed"]


def test_cost_model_samples_the_whole_tensor_and_counts_the_gathers_cpu():
    """The ratio comes from pieces spread over the tensor (a flattened gradient's head is the word
    embedding's zero rows), and the gather algorithm's codec and additions, which follow its wire on
    one thread, do not beat the pipelined ring where ranks share cores (measured: 3.4x slower)."""
    import codec
    from collectives import strategy

    x = torch.randn(1 << 22) * 0.02
    x[:1 << 20] = 0
    x = x.to(torch.bfloat16)
    whole = x.numel() * 2 / len(codec.encode(x))
    assert strategy.sample_ratio(x) < 2 * whole                 # the head alone: one CONST chunk, ~10^4
    link = strategy.Link(alpha=1e-4, beta=125e6)
    pred = strategy.predict_all_reduce(64 << 20, 4, link, 4.35, 2e9, 3.5e9, cores=0.5, add=2e9)
    assert pred["compressed-ring"] < pred["compressed-gather"] < pred["uncompressed"] * 2


def test_dead_rank_raises_clear_error():
    res = _run(case_dead, 2)
    assert "a rank died or the group timed out" in res[0], res
    assert float(res[0].split("s ", 1)[0]) < 60                  # within the group timeout, no hang


def test_fsdp_pair():
    res = _run(case_fsdp, 4)
    assert all(v is True for v in res.values()), res


def case_ring_slices(rank, ws):
    """The pipelined ring with many tiny slices: same bits as one slice, compressed or not, and the true sum
    (summed in ring order: shard j from rank j+1 onward)."""
    import collectives
    import collectives.ring as ring

    out = {}
    # 64-byte slices hold 16-32 values: 1,234 values already make 13-39 slices per shard, each hop
    sizes = {0: (0, 5, 1_234, 12_345), 1000: (0, 5, 12_345), 64: (0, 5, 1_234)}
    for slice_bytes in (0, 1000, 64):
        ring.RING_SLICE_BYTES = slice_bytes
        for dt in (torch.bfloat16, torch.float32):
            for n in sizes[slice_bytes]:
                x = _data(rank, n, dt, seed=3)
                for compress in (True, False):
                    y = x.clone()
                    collectives.all_reduce(y, algorithm="ring", compress=compress)
                    parts = [_data(j, n, dt, seed=3) for j in range(ws)]
                    m = n // ws
                    rs_in = [x[i * m:(i + 1) * m].clone() for i in range(ws)]
                    rs_out = torch.empty_like(rs_in[rank])
                    collectives.reduce_scatter(rs_out, rs_in, compress=compress)
                    out[(slice_bytes, str(dt), n, compress)] = (_bits(y), _bits(rs_out), _bits(x))
                    if compress:
                        # the reference: shard j summed from rank j+1 onward, in the tensor's dtype
                        ref = []
                        for j, _ in enumerate(torch.tensor_split(x, ws)):
                            order = [(j + 1 + i) % ws for i in range(ws)]
                            acc = torch.tensor_split(parts[order[0]], ws)[j].clone()
                            for o in order[1:]:
                                acc = torch.tensor_split(parts[o], ws)[j] + acc
                            ref.append(acc)
                        out[("ref", str(dt), n)] = _bits(torch.cat(ref)) if n else []
    return out


@pytest.mark.parametrize("ws", [2, pytest.param(3, marks=pytest.mark.slow)])     # 3 ranks: CI's slow step
def test_pipelined_ring_slices_are_bit_identical(ws):
    res = run_ranks(case_ring_slices, ws)
    for r in res.values():
        assert not isinstance(r, str), r
    for rank, r in res.items():
        for (sb, dt, n, compress), (y, rs, x) in ((k, v) for k, v in r.items() if k[0] != "ref"):
            assert x == r[(0, dt, n, True)][2]                 # the input was not modified
            assert y == r[(0, dt, n, True)][0], (sb, dt, n, compress)
            assert rs == r[(0, dt, n, True)][1], (sb, dt, n, compress)
            assert y == r[("ref", dt, n)], (sb, dt, n)                # the sum in ring order
        assert r[(64, "torch.float32", 1_234, True)][0] == res[0][(64, "torch.float32", 1_234, True)][0]


def case_interleaved_shards(rank, ws):
    """An all-reduce whose shards are interleaved pieces (ring.interleave > 1): the same bits compressed or
    not, in place or not, whatever the slice size, and the sum of each piece in its shard's ring order."""
    import collectives
    import collectives.ring as ring

    n = 1_300_000                                  # 2 ranks, bf16: 1.3 MB a shard -> two pieces each
    q = ring.interleave(n, 2, ws)
    x = _data(rank, n, torch.bfloat16, seed=7)
    x[: n // 2] = 0                                # a first half of zeros (unused rows), as a gradient's
    parts = [_data(j, n, torch.bfloat16, seed=7) for j in range(ws)]
    for p in parts:
        p[: n // 2] = 0
    out = {"q": q}
    for slice_bytes in (0, 100_000):
        ring.RING_SLICE_BYTES = slice_bytes
        for compress in (True, False):
            y = x.clone()
            collectives.all_reduce(y, algorithm="ring", compress=compress)
            z = torch.empty(2 * n, dtype=torch.bfloat16)[::2]     # strided: not in place
            z.copy_(x)
            collectives.all_reduce(z, algorithm="ring", compress=compress)
            out[(slice_bytes, compress)] = (_bits(y), _bits(z))
    ring.RING_SLICE_BYTES = 0
    pieces = [torch.tensor_split(p, ws * q) for p in parts]
    ref = []
    for i in range(ws * q):
        j = i % ws                                 # piece i is in rank j's shard: summed from rank j+1 onward
        order = [(j + 1 + t) % ws for t in range(ws)]
        acc = pieces[order[0]][i].clone()
        for o in order[1:]:
            acc = pieces[o][i] + acc
        ref.append(acc)
    out["ref"] = _bits(torch.cat(ref))
    out["x"] = _bits(x)
    return out


@pytest.mark.slow        # 7 s: CI's slow step (the README run keeps the pipelined ring's 2-rank test)
def test_all_reduce_interleaves_its_shards():
    res = run_ranks(case_interleaved_shards, 2)
    for r in res.values():
        assert not isinstance(r, str), r
        assert r["q"] == 2
        for key, (y, z) in ((k, v) for k, v in r.items() if isinstance(k, tuple)):
            assert y == r["ref"] and z == r["ref"], key
    assert res[0]["ref"] == res[1]["ref"]


def case_ring_destinations(rank, ws):
    """The ring decodes straight into the caller's tensors: FSDP's all-gather whose input is this rank's
    chunk of the output, an all_gather list holding the input itself and a non-contiguous entry, a
    reduce-scatter whose output is an input's slice; every result exact, no input changed."""
    import collectives

    n = 70_000                                        # above RING_MIN_NUMEL: the ring
    out = {}
    for compress in (True, False):
        data = [_data(j, n, torch.bfloat16, seed=5) for j in range(ws)]
        buf = torch.zeros(ws * n, dtype=torch.bfloat16)
        mine = buf.chunk(ws)[rank]
        mine.copy_(data[rank])
        collectives.all_gather_into_tensor(buf, mine, compress=compress)
        fsdp_ok = torch.equal(buf.view(torch.int16), torch.cat(data).view(torch.int16))
        x = data[rank].clone()
        wide = torch.zeros(n, 2, dtype=torch.bfloat16)
        tl = [torch.empty(n, dtype=torch.bfloat16) for _ in range(ws)]
        tl[rank] = x
        tl[(rank + 1) % ws] = wide[:, 1]                  # strided: written by a copy afterwards
        collectives.all_gather(tl, x, compress=compress)
        gather_ok = all(torch.equal(t.contiguous().view(torch.int16), d.view(torch.int16))
                        for t, d in zip(tl, data)) and torch.equal(x.view(torch.int16), data[rank].view(torch.int16))
        inputs = [data[rank][:n // ws * ws].chunk(ws)[j].clone() for j in range(ws)]
        keep = [t.clone() for t in inputs]
        o = inputs[rank]                                  # output aliases this rank's own input
        collectives.reduce_scatter(o, inputs, compress=compress)
        others_ok = all(torch.equal(a.view(torch.int16), b.view(torch.int16))
                        for j, (a, b) in enumerate(zip(inputs, keep)) if j != rank)
        out[compress] = (fsdp_ok, gather_ok, others_ok, _bits(o))
    return out


def test_ring_writes_into_callers_tensors():
    res = run_ranks(case_ring_destinations, 3)
    for rank, r in res.items():
        assert not isinstance(r, str), r
        for compress in (True, False):
            assert r[compress][:3] == (True, True, True), (rank, compress)
        assert r[True][3] == r[False][3], rank


def case_auto(rank, ws):
    """compress="auto" under a link that makes compression pay and one that does not (rank 0's cached
    link decides for all): the choice, and the bits, against the uncompressed ring and torch's own."""
    import json
    import tempfile
    from pathlib import Path

    import torch.distributed as dist

    import collectives

    out = {}
    x = _data(rank, 70_000, torch.bfloat16)
    small = _data(rank, 1000, torch.float32)
    for name, (alpha, beta) in (("slow", (1e-4, 1e6)), ("fast", (1e-6, 1e13))):
        path = Path(tempfile.mkdtemp()) / "link.json"
        path.write_text(json.dumps({"alpha": alpha, "beta": beta}))
        os.environ["ZIPCCL_LINK_CACHE"] = str(path)
        t = x.clone()
        collectives.all_reduce(t, compress="auto")
        out[name] = (collectives.last_decision.choice, _bits(t))
        gl = [torch.empty_like(x) for _ in range(ws)]
        collectives.all_gather(gl, x, compress="auto")
        out[name + "-gather"] = (collectives.last_decision.choice, [_bits(g) for g in gl])
        s = small.clone()
        collectives.all_reduce(s, compress="auto")
        out[name + "-small"] = (collectives.last_decision.choice, _bits(s))
    t = x.clone()
    collectives.all_reduce(t, compress=False, algorithm="ring")
    out["ring"] = _bits(t)
    s = small.clone()
    dist.all_reduce(s)
    out["torch-small"] = _bits(s)
    out["x"] = _bits(x)
    return out


def test_auto_choice_and_bits():
    """A slow link compresses, a fast one does not; every choice gives the uncompressed ring's bits (small
    tensors: torch's own all_reduce), the same on every rank, and all_gather is exact.  4 ranks: there
    gloo's summation order differs from the ring's, so running gloo's for a large tensor would show."""
    res = _run(case_auto, 4)
    for rank in range(4):
        r = res[rank]
        assert not isinstance(r, str), r
        assert r["slow"][0].startswith("compressed") and r["fast"][0] == "uncompressed", r
        assert r["slow-gather"][0] == "compressed-gather" and r["fast-gather"][0] == "uncompressed"
        assert r["slow"][1] == r["fast"][1] == r["ring"] == res[0]["ring"]
        assert r["fast-small"][0] == "uncompressed" and r["fast-small"][1] == r["torch-small"]
        for name in ("slow-gather", "fast-gather"):
            assert r[name][1] == [res[j]["x"] for j in range(4)]
