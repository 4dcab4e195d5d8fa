"""collectives.WeightSync on real gloo ranks (loopback sockets): full then delta syncs bit-identical to the
source after every real optimizer step, the chain on 2-4 ranks with a source other than rank 0, the
fallback to a full sync when a receiver's state does not match, mismatched tensor lists, and a dead
receiver.  All but the 2-rank steps and the no-staging cases are marked slow (CI's second step)."""
import os

import pytest

torch = pytest.importorskip("torch")

from tests.dist_helpers import run_ranks  # noqa: E402


def _model(seed: int):
    """A small model's tensors: bf16 weights (the synced copy), an fp32 norm, an int64 buffer."""
    g = torch.Generator().manual_seed(seed)
    return {"embed.weight": (torch.randn(3000, 64, generator=g) * 0.02),
            "layer.0.weight": (torch.randn(256, 256, generator=g) * 0.05),
            "layer.0.bias": torch.zeros(256),
            "norm.weight": torch.ones(64),
            "proj.weight": (torch.randn(96, 512, generator=g) * 0.05).t(),      # strided (a transposed view)
            "position_ids": torch.arange(512)}


def _synced(master):
    """The copy that is synced: bf16 for matrices, fp32 for the norm, the buffer as it is."""
    return {k: (v.to(torch.bfloat16) if v.dim() == 2 or k.endswith("bias") else v.clone()) if k != "proj.weight"
            else v.t().to(torch.bfloat16).t() for k, v in master.items()}


def _bits(tensors):
    return {k: (v.view(torch.int16) if v.dtype == torch.bfloat16 else v.view(torch.int32) if v.dtype == torch.float32
                else v).numpy().copy() for k, v in tensors.items()}


def case_steps(rank, ws, src, n_steps, piece_bytes, checksum, compress):
    import collectives

    master = _model(0)
    params = [v for k, v in master.items() if v.is_floating_point()]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=1e-4)
    tensors = _synced(master) if rank == src else {k: torch.zeros_like(v) for k, v in _synced(master).items()}
    assert not tensors["proj.weight"].is_contiguous()
    sync = collectives.WeightSync(tensors, src=src, piece_bytes=piece_bytes, checksum=checksum, compress=compress,
                                  staging=rank % 2 == 1)         # receivers of even rank decode in place
    log = []
    g = torch.Generator().manual_seed(1)
    for step in range(n_steps):
        if rank == src:
            if step:                                   # a real AdamW step on the fp32 master weights
                opt.zero_grad()
                loss = sum((p * torch.randn(p.shape, generator=g)).sum() for p in params)
                loss.backward()
                opt.step()
                with torch.no_grad():
                    for k, v in _synced(master).items():
                        tensors[k].copy_(v)
                assert not tensors["proj.weight"].is_contiguous()
            st = sync.push()
        else:
            st = sync.pull()
        log.append((st.mode, st.version, st.changed_fraction, st.wire_bytes, st.raw_bytes, st.pieces_raw))
    return {"log": log, "bits": _bits(tensors)}


@pytest.mark.parametrize("ws,src,compress", [(2, 0, False), pytest.param(4, 2, True, marks=pytest.mark.slow)])
def test_full_then_delta_bit_identical_after_every_step(ws, src, compress):
    res = run_ranks(case_steps, ws, src, 4, 64 << 10, ws == 4, compress)
    assert all(isinstance(r, dict) for r in res.values()), res
    want = res[src]["bits"]
    for r in range(ws):
        for k, v in want.items():
            assert (res[r]["bits"][k] == v).all(), (r, k)
        modes = [m for m, *_ in res[r]["log"]]
        assert modes == ["full", "delta", "delta", "delta"], (r, modes)
        assert [v for _, v, *_ in res[r]["log"]] == [1, 2, 3, 4]
    first = res[src]["log"][0]
    assert (first[5] > 0) == (not compress)               # a full sync raw or coded, as asked
    for mode, _, changed, wire, raw, n_raw in res[src]["log"][1:]:
        assert 0 < changed < 1 and wire < raw / 2        # lr 1e-4: a fraction of bf16 values move
        assert n_raw == 0                                 # deltas are always coded


def case_stale_receiver(rank, ws):
    """Rank 2's staging is corrupted behind the sync's back: its delta sync fails (digest), the source
    names it, ranks 1 and 3 commit; the next sync is a full one and all agree again."""
    import codec
    import collectives

    g = torch.Generator().manual_seed(0)
    w = (torch.randn(100_000, generator=g) * 0.02).to(torch.bfloat16)
    t = {"w": w.clone() if rank == 0 else torch.zeros_like(w)}
    sync = collectives.WeightSync(t, src=0, piece_bytes=32 << 10)
    out = []
    for step in range(3):
        if rank == 0:
            if step:
                t["w"].view(torch.int16)[::7] += 1
            try:
                st = sync.push()
                out.append(st.mode)
            except collectives.SyncError as e:
                out.append(f"SyncError rank {e.rank}")
        else:
            if step == 1 and rank == 2:
                sync._base[0].view(torch.int16)[3] += 5        # bit rot in the delta base
            try:
                st = sync.pull()
                out.append(st.mode)
            except codec.FormatError as e:
                out.append(f"FormatError {e}")
    return out, t["w"].view(torch.int16).numpy().copy()


@pytest.mark.slow
def test_stale_receiver_is_refused_then_resynced_in_full():
    res = run_ranks(case_stale_receiver, 4)
    assert all(isinstance(r, tuple) for r in res.values()), res
    assert res[0][0] == ["full", "SyncError rank 2", "full"]
    assert res[1][0] == ["full", "delta", "full"] and res[3][0] == ["full", "delta", "full"]
    assert res[2][0][1].startswith("FormatError") and "digest" in res[2][0][1]
    for r in (1, 2, 3):
        assert (res[r][1] == res[0][1]).all()


def case_no_staging(rank, ws):
    """Receivers without staging: a local change to a tensor makes the next sync a full one; a piece
    that fails to decode raises SyncError naming the tensors already written (the ones before it)."""
    import collectives

    class Corrupting(collectives.WeightSync):
        calls = 0

        def encode_delta_piece(self, piece, base):
            frame, n = super().encode_delta_piece(piece, base)
            self.calls += 1                                          # pieces are coded in order
            if self.version == 2 and self.calls == 2:                # the first delta sync: its second piece (w1)
                frame[frame.numel() // 2] ^= 0x40
            return frame, n

    g = torch.Generator().manual_seed(0)
    src_t = {f"w{i}": (torch.randn(4096, generator=g) * 0.02).to(torch.bfloat16) for i in range(3)}
    t = {k: v.clone() for k, v in src_t.items()} if rank == 0 else {k: torch.zeros_like(v) for k, v in src_t.items()}
    sync = Corrupting(t, src=0, piece_bytes=8192, checksum=True, staging=False)
    out = []
    for step in range(4):
        if rank == 0:
            for v in t.values():
                v.view(torch.int16)[::5] += 1
            try:
                out.append(sync.push().mode)
            except collectives.SyncError as e:
                out.append(f"SyncError {e.rank}")
        else:
            if step == 1 and rank == 1:
                t["w2"].view(torch.int16)[7] += 3                      # a local change between syncs
            try:
                out.append(sync.pull().mode)
            except collectives.SyncError as e:
                out.append(("SyncError", e.updated, type(e.__cause__).__name__))
    return out, {k: v.view(torch.int16).numpy().copy() for k, v in t.items()}


def test_receivers_without_staging():
    res = run_ranks(case_no_staging, 3)
    assert all(isinstance(r, tuple) for r in res.values()), res
    # sync 2: rank 1 changed w2 locally -> a full sync for all; sync 3: w1's piece corrupted (checksum)
    assert res[0][0] == ["full", "full", "SyncError 1", "full"], res[0][0]
    for r in (1, 2):
        assert res[r][0][:2] == ["full", "full"] and res[r][0][3] == "full"
        assert res[r][0][2] == ("SyncError", ["w0"], "FormatError")      # w0 written before w1 failed
        for k, v in res[0][1].items():
            assert (res[r][1][k] == v).all(), (r, k)


def case_mismatch(rank, ws):
    import collectives

    t = {"a": torch.zeros(10, dtype=torch.bfloat16), "b": torch.zeros(4 if rank != 1 else 5)}
    try:
        collectives.WeightSync(t, src=0).push() if rank == 0 else collectives.WeightSync(t, src=0).pull()
    except ValueError as e:
        return str(e)
    return "no error"


@pytest.mark.slow
def test_mismatched_tensors_name_the_first_difference():
    res = run_ranks(case_mismatch, 3)
    for r in range(3):
        assert "tensor 1 differs" in res[r] and "'b' float32[4]" in res[r] and "rank 1 has 'b' float32[5]" in res[r]


def case_dead(rank, ws):
    import collectives

    t = {"w": torch.full((400_000,), float(rank == 0), dtype=torch.bfloat16)}
    sync = collectives.WeightSync(t, src=0, piece_bytes=64 << 10)
    if rank == 0:
        try:
            sync.push()
        except collectives.SyncError as e:
            return f"SyncError rank {e.rank}"
        return "pushed"
    if rank == 2:
        sync._control()          # takes part in the sync's start, then dies before any data
        os._exit(0)
    try:
        sync.pull()
        return ("pulled", float(t["w"][0]))
    except (collectives.SyncError, RuntimeError) as e:
        return ("raised", float(t["w"][0]), str(e)[:60])


@pytest.mark.slow
def test_dead_receiver_raises_and_leaves_old_or_new_values():
    res = run_ranks(case_dead, 4, expect=3, timeout=200)
    assert res[0] == "SyncError rank 2", res                 # the source names the dead rank
    assert res[1] == ("pulled", 1.0)                          # before it: the new values
    assert res[3][0] == "raised" and res[3][1] == 0.0        # after it: the old values, whole
