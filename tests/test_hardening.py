"""Hardening: buffers that alias each other, outputs that cannot take the values, caller inputs that must
stay untouched."""
import ml_dtypes
import numpy as np
import pytest

import codec
from codec import format as fmt
from tests.helpers import make_values, restamp


def _mixed_stream(checksum):
    """bf16 with RAW (random bits), CONST and coded chunks."""
    x = np.random.default_rng(4).integers(0, 65536, 3 * 4096, dtype=np.uint16).view(ml_dtypes.bfloat16)
    x[4096:8192] = ml_dtypes.bfloat16(1.5)                       # a CONST chunk
    x[8192:] = make_values("gaussian", "bfloat16", 4096, 1, -1.0)  # a coded chunk
    blob = np.frombuffer(bytes(codec.encode(x, chunk_size=4096, checksum=checksum)), np.uint8)
    kinds = {c["kind"] for c in codec.inspect(blob)["chunks"]}
    assert kinds == {"raw", "const", "coded"}, kinds
    return x, blob


@pytest.mark.parametrize("backend", ["numba", "reference"])
@pytest.mark.parametrize("checksum", [False, True])
@pytest.mark.parametrize("where", ["start", "inside", "tail", "straddle_end", "straddle_start"])
def test_decode_refuses_an_out_that_overlaps_the_stream(backend, checksum, where):
    x, blob = _mixed_stream(checksum)
    nb = x.nbytes
    buf = np.zeros(nb + len(blob) + 256, np.uint8)
    o = {"start": 0, "inside": 64, "tail": nb - len(blob) // 2, "straddle_end": nb - 8,
         "straddle_start": 0}[where]
    out_at = 0 if where != "straddle_start" else 100
    stream_at = o if where != "straddle_start" else 0
    buf[stream_at:stream_at + len(blob)] = blob
    before = buf.copy()
    out = buf[out_at:out_at + nb].view(ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="overlaps the stream"):
        codec.decode(buf[stream_at:stream_at + len(blob)], out=out, backend=backend)
    assert np.array_equal(buf, before)                         # refused before anything was written
    # beside each other (no overlap) it decodes
    far = np.zeros(nb, np.uint8).view(ml_dtypes.bfloat16)
    codec.decode(buf[stream_at:stream_at + len(blob)], out=far, backend=backend)
    assert np.array_equal(far.view(np.uint16), x.view(np.uint16))


def test_header_tables_are_not_views_of_the_callers_buffer():
    x, blob = _mixed_stream(True)
    buf = bytearray(blob.tobytes())
    h = fmt.parse_header(buf)
    kinds, crcs = h.kinds.copy(), h.crcs.copy()
    buf[fmt.parse_header(buf).payload_start - 1] ^= 0xFF       # scribble over the table after parsing
    for i in range(len(buf)):
        buf[i] = 0
    assert np.array_equal(h.kinds, kinds) and np.array_equal(h.crcs, crcs)


# ------------------------------------------------------------------ outputs that cannot take the values
def test_decode_refuses_non_native_byte_order_out():
    x = make_values("gaussian", "float32", 1000, 1, -1.0)
    blob = codec.encode(x)
    out = np.zeros(1000, ">f4")
    with pytest.raises(ValueError, match="byte order"):
        codec.decode(blob, out=out)
    assert not out.any()


def test_decode_refuses_a_tensor_over_read_only_memory(tmp_path):
    torch = pytest.importorskip("torch")
    import warnings

    x = make_values("gaussian", "float32", 1000, 1, -1.0)
    blob = codec.encode(x)
    p = tmp_path / "ro.bin"
    np.zeros(1000, np.float32).tofile(p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                  # torch warns that the array is not writable
        t = torch.from_numpy(np.memmap(p, np.float32, "r"))
    with pytest.raises(ValueError, match="read-only"):
        codec.decode(blob, out=t)                        # was: SIGSEGV
    w = torch.from_numpy(np.memmap(p, np.float32, "r+"))  # a writable mapping is fine
    codec.decode(blob, out=w)
    assert np.array_equal(w.numpy().view(np.uint32), x.view(np.uint32))


def test_encode_refuses_an_out_over_a_non_contiguous_input():
    torch = pytest.importorskip("torch")
    x = make_values("gaussian", "float32", 100 * 64, 2, -1.0).reshape(100, 64)
    buf = np.zeros(x.nbytes + 65536, np.uint8)
    inside = buf[:x.nbytes].view(np.float32).reshape(100, 64)
    inside[:] = x
    before = buf.copy()
    for src, out in ((inside[:, ::2], buf[256:]), (torch.from_numpy(inside)[:, ::2], torch.from_numpy(buf[256:]))):
        with pytest.raises(ValueError, match="overlaps the tensor"):
            codec.encode(src, out=out)
        assert np.array_equal(buf, before)               # the caller's input is untouched


def test_decode_takes_the_tensor_encode_out_returns():
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(make_values("laplace", "bfloat16", 5000, 3, -1.0).view(np.int16)).view(torch.bfloat16)
    out = torch.empty(codec.max_encoded_size(x), dtype=torch.uint8)
    stream = codec.encode(x, out=out)
    assert isinstance(stream, torch.Tensor) and stream.dtype == torch.uint8
    assert torch.equal(codec.decode(stream).view(torch.int16), x.view(torch.int16))
    assert codec.inspect(stream)["numel"] == 5000
    with pytest.raises(ValueError, match="1-D uint8"):
        codec.decode(torch.zeros(4, dtype=torch.int32))


def test_zero_size_shape_with_a_giant_dimension_is_a_format_error():
    import struct

    blob = restamp(codec.encode(np.zeros((0, 3), np.float32)), compact=False)
    h = fmt.parse_header(blob)
    struct.pack_into("<Q", blob, fmt.header_nbytes(2, 0, False) - 8, 1 << 63)   # the second dimension
    assert h.shape == (0, 3)
    with pytest.raises(codec.FormatError, match="2\\*\\*63"):
        codec.decode(blob)


def test_compact_head_dimension_past_63_bits_is_a_format_error():
    blob = bytearray(codec.encode(np.zeros((0, 3), np.float32)))
    # chunk size 16384 (varint 80 80 01), then the dimensions 0 and 3
    at = fmt.COMPACT_FIXED + 3
    assert blob[6] & fmt.FLAG_COMPACT and blob[fmt.COMPACT_FIXED:at + 2] == bytes([0x80, 0x80, 0x01, 0, 3])
    forged = blob[:at + 1] + bytes([0xFF] * 9 + [0x01]) + blob[at + 2:]    # the 3 as 10 bytes: 64+ bits
    with pytest.raises(codec.FormatError, match="longer than 9 bytes"):
        codec.decode(forged)


# ------------------------------------------------------------------ temporaries that cannot be hijacked
def test_atomic_write_does_not_follow_a_planted_symlink(tmp_path):
    import os

    from codec.atomic import atomic_write

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    dst = tmp_path / "out.bin"
    for pid in range(os.getpid() - 5, os.getpid() + 5):        # every name the old scheme could pick
        os.symlink(victim, tmp_path / f".out.bin.tmp{pid}")
    with atomic_write(dst) as f:
        f.write(b"new")
    assert victim.read_bytes() == b"precious" and dst.read_bytes() == b"new"
    from codec.atomic import _umask

    assert dst.stat().st_mode & 0o777 == 0o666 & ~_umask()       # as open() makes it, not mkstemp's 0600
    with pytest.raises(RuntimeError):
        with atomic_write(dst) as f:
            f.write(b"partial")
            raise RuntimeError("fail in the middle")
    assert dst.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.is_symlink()) == ["out.bin", "victim"]


def test_cli_leaves_no_temporary_on_sigterm(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    src = tmp_path / "big.bin"
    np.random.default_rng(0).standard_normal(48 << 20, np.float32).tofile(src)      # 192 MB: a wide window
    dst = tmp_path / "big.zcc"
    p = subprocess.Popen([sys.executable, "-m", "codec", "compress", str(src), str(dst), "--dtype", "float32"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and not any(q.name.endswith(".tmp") for q in tmp_path.iterdir()):
        time.sleep(0.005)
        if p.poll() is not None:
            break
    assert p.poll() is None, "compression of 192 MB finished before its temporary was seen"
    p.send_signal(signal.SIGTERM)
    p.wait(60)
    assert p.returncode in (143, -signal.SIGTERM)
    assert sorted(q.name for q in tmp_path.iterdir()) == ["big.bin"]


# ------------------------------------------------------------------ collectives that do not trust the peer
FORGED = [("numel", "ValueError: a peer sent 16777216 values for a tensor of 1000"),
          ("dtype", "TypeError: a peer sent float32 values for a torch.bfloat16 tensor"),
          ("checksum", "FormatError: a peer sent a frame without checksums"),
          ("broadcast_size", "ValueError: broadcast: rank 0 announced a 4398046511104-byte frame")]


def case_forged_peer(rank, ws):
    """Rank 0 speaks the wire protocol of collectives.send / broadcast by hand, with forged frames;
    rank 1 receives with the real calls and reports what each raised."""
    import torch
    import torch.distributed as dist

    import collectives

    got = []
    for what, _ in FORGED:
        if rank == 0:
            if what == "broadcast_size":
                desc = collectives._describe(torch.zeros(1000, dtype=torch.bfloat16))
                dist.all_gather([torch.empty_like(desc) for _ in range(ws)], desc)
                dist.broadcast(torch.tensor([4 << 40], dtype=torch.int64), 0)     # "4 TiB follow"
                continue
            stream = {"numel": codec.encode(np.zeros(1 << 24, ml_dtypes.bfloat16)),      # 16M values, 3 KB
                      "dtype": codec.encode(np.zeros(500, np.float32)),                    # same bytes, fp32
                      "checksum": codec.encode(np.zeros(1000, ml_dtypes.bfloat16))}[what]
            frame = torch.frombuffer(bytearray(stream), dtype=torch.uint8)
            dist.send(torch.tensor([1, 0], dtype=torch.int64), 1)
            dist.send(torch.tensor([frame.numel()], dtype=torch.int64), 1)
            dist.send(frame, 1)
            continue
        t = torch.zeros(1000, dtype=torch.bfloat16)
        try:
            if what == "broadcast_size":
                collectives.broadcast(t, 0)
            else:
                collectives.recv(t, 0, checksum=(what == "checksum"))
            got.append("no error")
        except Exception as e:  # noqa: BLE001 - the test checks the type and message
            got.append(f"{type(e).__name__}: {e}")
    return got


def test_collectives_check_the_peers_frame_before_decoding():
    pytest.importorskip("torch")
    from tests.dist_helpers import run_ranks

    res = run_ranks(case_forged_peer, 2, timeout=120)
    assert res[0] == [], res
    for (what, expect), got in zip(FORGED, res[1], strict=True):
        assert got.startswith(expect), (what, got)


# ------------------------------------------------------------------ CLI and checkpoints: messages, not tracebacks
def _safetensors(tmp_path, header: bytes, data: bytes = b"\0" * 64):
    import struct

    p = tmp_path / "m.safetensors"
    p.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return p


@pytest.mark.parametrize("header,expect", [
    (b'{"a": {"dtype": "F32", "shape": [true, 4], "data_offsets": [0, 16]}}', "bad entry for tensor 'a'"),
    (b'[' * 100_000 + b']' * 100_000, "nested too deeply"),
])
def test_cli_malformed_safetensors_are_exit_1_messages(tmp_path, capsys, header, expect):
    from codec.cli import main

    src = _safetensors(tmp_path, header)
    assert main(["compress", str(src), str(tmp_path / "o.zcar"), "-q"]) == 1
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err


def test_cli_empty_tensor_inside_another_round_trips(tmp_path):
    from codec.cli import main

    header = (b'{"a": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}, '
              b'"e": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]}}')
    data = np.random.default_rng(0).normal(0, 1, 16).astype(np.float32).tobytes()
    src = _safetensors(tmp_path, header, data)
    assert main(["compress", str(src), str(tmp_path / "o.zcar"), "-q"]) == 0        # was AssertionError
    assert main(["decompress", str(tmp_path / "o.zcar"), str(tmp_path / "back"), "-q"]) == 0
    assert (tmp_path / "back").read_bytes() == src.read_bytes()


def test_decompress_max_size_refuses_a_bomb_before_allocating(tmp_path, capsys):
    from codec.cli import main

    bomb = tmp_path / "bomb.zcc"
    bomb.write_bytes(bytes(codec.encode(np.zeros(1 << 26, np.float32))))     # 256 MiB of zeros in a few KB
    assert bomb.stat().st_size < 100_000
    assert main(["decompress", str(bomb), str(tmp_path / "out"), "-q", "--max-size", "64M"]) == 1
    assert "more than --max-size" in capsys.readouterr().err and not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="max_numel"):
        codec.decode(bomb.read_bytes(), max_numel=1 << 20)
    assert codec.decode(bomb.read_bytes()[:], max_numel=1 << 26).size == 1 << 26


def test_truncated_checkpoint_is_a_checkpoint_error(tmp_path):
    torch = pytest.importorskip("torch")
    from unittest import mock

    from trainers import checkpoint

    d = checkpoint.round_dir(tmp_path, 3)
    d.mkdir(parents=True)
    torch.save({"round": 3, "rank": 0, "world": 1, "w": torch.zeros(1000)}, d / "rank0.pt")
    (tmp_path / "LATEST").write_text("3\n")
    with mock.patch("torch.distributed.get_rank", return_value=0), \
            mock.patch("torch.distributed.get_world_size", return_value=1):
        assert checkpoint.load(tmp_path)["round"] == 3
        whole = (d / "rank0.pt").read_bytes()
        for cut in (0, 10, len(whole) // 2, len(whole) - 1):
            (d / "rank0.pt").write_bytes(whole[:cut])
            with pytest.raises(checkpoint.CheckpointError, match="not a readable checkpoint"):
                checkpoint.load(tmp_path)
        # the compressed checkpoints this version writes (codec.save_file): every cut, and a flipped bit
        (d / "rank0.pt").unlink()
        state = {"round": 3, "rank": 0, "world": 1, "w": torch.randn(5000) * 0.01, "opt": {0: {"step": 4}},
                 "betas": (0.9, 0.999)}
        checkpoint.write_state(d / "rank0.zcc.safetensors", state)
        got = checkpoint.load(tmp_path)
        assert torch.equal(got["w"], state["w"]) and got["opt"] == {0: {"step": 4}} and got["betas"] == (0.9, 0.999)
        whole = (d / "rank0.zcc.safetensors").read_bytes()
        for cut in (0, 10, len(whole) // 2, len(whole) - 1):
            (d / "rank0.zcc.safetensors").write_bytes(whole[:cut])
            with pytest.raises(checkpoint.CheckpointError, match="not a readable checkpoint"):
                checkpoint.load(tmp_path)
        bad = bytearray(whole)
        bad[-100] ^= 4
        (d / "rank0.zcc.safetensors").write_bytes(bytes(bad))
        with pytest.raises(checkpoint.CheckpointError, match="not a readable checkpoint"):
            checkpoint.load(tmp_path)


def test_reference_decode_memory_stays_proportional_to_stream_and_output():
    """5,000 tiny coded chunks: the reference's working memory is a few times the stream and output, not
    a decode table (~5 KB) per chunk held at once (was: 1.17 GiB for a 6.3 MiB stream)."""
    import tracemalloc

    x = np.random.default_rng(0).normal(0, 0.02, 64 * 5_000).astype(ml_dtypes.bfloat16)
    blob = bytes(codec.encode(x, chunk_size=64))
    assert sum(c["kind"] == "coded" for c in codec.inspect(blob)["chunks"]) > 4_900
    tracemalloc.start()
    try:
        y = codec.decode(blob, backend="reference")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(y.view(np.uint16), x.view(np.uint16))
    assert peak < 8 * (len(blob) + x.nbytes), (peak, len(blob), x.nbytes)
