"""The command line tool (codec.cli) and the archive format (codec.archive): byte-identical round trips,
inspect, errors, the pinned archive layout; codec.stats."""
import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import codec
from codec import archive
from codec.cli import main
from codec.stats import entropy_bound_bits

REPO = Path(__file__).resolve().parents[1]


def roundtrip(src: Path, *extra: str) -> tuple[Path, Path]:
    """compress + decompress in-process; asserts exit codes 0 and a byte-identical result."""
    arc, back = src.with_name(src.name + ".zcar"), src.with_name(src.name + ".back")
    assert main(["compress", "-q", str(src), str(arc), *extra]) == 0
    assert arc.read_bytes()[:4] == b"ZCAR"
    assert main(["decompress", "-q", str(arc), str(back)]) == 0
    assert back.read_bytes() == src.read_bytes()
    return arc, back


@pytest.fixture
def st_file(tmp_path):
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    g = torch.Generator().manual_seed(0)
    tensors = {
        "layer.0.weight": (torch.randn(128, 96, generator=g) * 0.02).bfloat16(),
        "layer.0.bias": torch.randn(96, generator=g).half(),
        "norm": torch.randn(40, 50, generator=g),
        "token_ids": torch.arange(-5, 12, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "empty": torch.zeros(0, 4),
        "scale": torch.randn(1, generator=g),                      # tiny: stored, does not shrink
        "fp8": torch.randn(500, generator=g).to(torch.float8_e4m3fn),
        "fp8b": torch.randn(300, generator=g).to(torch.float8_e5m2),
        "zeros": torch.zeros(64, 64, dtype=torch.bfloat16),
    }
    path = tmp_path / "model.safetensors"
    st_torch.save_file(tensors, str(path), metadata={"format": "pt", "note": "zipccl test"})
    return path, tensors


def test_safetensors_roundtrip_byte_identical(st_file, capsys):
    import torch
    from safetensors.torch import load_file

    path, tensors = st_file
    arc, back = roundtrip(path)
    assert arc.stat().st_size < path.stat().st_size
    loaded = load_file(str(back))
    assert list(loaded) == list(load_file(str(path)))
    for k, v in tensors.items():
        assert loaded[k].dtype == v.dtype and loaded[k].shape == v.shape
        assert torch.equal(loaded[k].view(torch.uint8), v.contiguous().view(torch.uint8))

    capsys.readouterr()
    assert main(["inspect", str(arc)]) == 0
    out = capsys.readouterr().out
    assert "ratio" in out and "bits/value" in out and "bound" in out
    for name in tensors:
        assert name in out
    assert "zipccl test" in out                                    # __metadata__ shown

    capsys.readouterr()
    assert main(["inspect", "--json", str(arc)]) == 0
    info = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in info["entries"]}
    assert info["kind"] == "safetensors" and info["original_nbytes"] == path.stat().st_size
    assert rows["layer.0.weight"]["compressed"] and rows["layer.0.weight"]["dtype"] == "BF16"
    assert rows["layer.0.weight"]["shape"] == [128, 96]
    assert rows["layer.0.weight"]["ratio"] > 1.2
    assert rows["layer.0.weight"]["chunk_kinds"]["coded"] >= 1
    assert rows["zeros"]["chunk_kinds"]["const"] >= 1
    assert not rows["token_ids"]["compressed"] and rows["token_ids"]["dtype"] == "I64"
    assert rows["token_ids"]["bits_per_value"] == 64
    assert not rows["mask"]["compressed"] and not rows["scale"]["compressed"]
    for name in ("layer.0.weight", "norm", "fp8"):
        assert rows[name]["bits_per_value"] >= rows[name]["bound_bits"] - 0.5


def test_safetensors_gaps_padding_and_unusual_order(tmp_path):
    """Hand-made file: tensors out of offset order, padding bytes between and after them."""
    rng = np.random.default_rng(1)
    a = rng.normal(0, 1, 300).astype(np.float32)
    b = rng.normal(0, 1, (20, 10)).astype(np.float16)
    c = np.arange(7, dtype=np.int64)
    data = b"\x00" * 3 + b.tobytes() + b"PAD!" + a.tobytes() + c.tobytes() + b"trailing"
    ob = 3
    oa = ob + b.nbytes + 4
    oc = oa + a.nbytes
    header = {"a": {"dtype": "F32", "shape": [300], "data_offsets": [oa, oa + a.nbytes]},
              "__metadata__": {"k": "v"},
              "c": {"dtype": "I64", "shape": [7], "data_offsets": [oc, oc + c.nbytes]},
              "b": {"dtype": "F16", "shape": [20, 10], "data_offsets": [ob, ob + b.nbytes]}}
    hb = json.dumps(header).encode() + b"    "
    path = tmp_path / "odd.safetensors"
    path.write_bytes(struct.pack("<Q", len(hb)) + hb + data)
    roundtrip(path, "--checksum", "--chunk-size", "100")


def test_npy_roundtrips(tmp_path, capsys):
    rng = np.random.default_rng(2)
    arrays = {
        "bf16": rng.normal(0, 0.05, (64, 33)).astype(ml_dtypes.bfloat16),
        "f32": rng.normal(0, 1, (50, 40)).astype(np.float32),
        "f32_fortran": np.asfortranarray(rng.normal(0, 1, (30, 20)).astype(np.float32)),
        "i32": np.arange(-100, 100, dtype=np.int32),
        "f8": rng.normal(0, 1, 1000).astype(ml_dtypes.float8_e5m2),    # saved with descr "<f1"
        "f8_e4m3": rng.normal(0, 1, 1000).astype(ml_dtypes.float8_e4m3fn),  # saved as "<V1"
        "f64": rng.normal(0, 1, 10),
        "f32_be": rng.normal(0, 1, 10).astype(">f4"),
        "scalar": np.float32(1.5),
    }
    for name, arr in arrays.items():
        path = tmp_path / f"{name}.npy"
        np.save(path, arr)
        extra = ["--dtype", "float8_e5m2"] if name == "f8" else []
        arc, back = roundtrip(path, *extra)
        if name != "f8":                                            # numpy cannot load "<f1"
            assert np.load(back).tobytes() == np.asarray(arr).tobytes()
        capsys.readouterr()
        assert main(["inspect", "--json", str(arc)]) == 0
        (row,) = json.loads(capsys.readouterr().out)["entries"]
        assert row["compressed"] == (name in ("bf16", "f32", "f32_fortran", "f8", "f8_e4m3")), name
        if name == "bf16":
            assert row["codec_dtype"] == "bfloat16" and row["ratio"] > 1.2 and row["shape"] == [64, 33]
        if name == "f8":
            assert row["codec_dtype"] == "float8_e5m2"
        if name == "f8_e4m3":
            assert row["codec_dtype"] == "float8_e4m3fn"


def test_raw_with_dtype_and_odd_tail(tmp_path, capsys):
    rng = np.random.default_rng(3)
    words = rng.normal(0, 0.02, 5001).astype(ml_dtypes.bfloat16)
    path = tmp_path / "weights.bin"
    path.write_bytes(words.tobytes() + b"\x7f")                     # 1 byte that is not a whole word
    arc, _ = roundtrip(path, "--dtype", "bf16")
    capsys.readouterr()
    assert main(["inspect", "--json", str(arc)]) == 0
    info = json.loads(capsys.readouterr().out)
    data, tail = info["entries"]
    assert data["compressed"] and data["numel"] == 5001 and data["dtype"] == "bfloat16"
    assert tail["filler"] and tail["nbytes"] == 1

    f32 = tmp_path / "f32.raw"
    f32.write_bytes(rng.normal(0, 1, 777).astype(np.float32).tobytes() + b"abc")
    roundtrip(f32, "--dtype", "float32", "--chunk-size", "128")
    tiny = tmp_path / "tiny.raw"                                    # shorter than one word
    tiny.write_bytes(b"\x01\x02\x03")
    roundtrip(tiny, "--dtype", "float32")
    empty = tmp_path / "empty.raw"
    empty.write_bytes(b"")
    roundtrip(empty, "--dtype", "float16")


def test_compress_prints_ratio_and_bound(tmp_path, capsys):
    path = tmp_path / "x.npy"
    np.save(path, np.random.default_rng(4).normal(0, 1, 4096).astype(np.float16))
    assert main(["compress", str(path)]) == 0                       # default output: IN.zcar
    out = capsys.readouterr().out
    assert "ratio" in out and "bits/value" in out and "entropy bound" in out
    assert (tmp_path / "x.npy.zcar").exists()
    os.remove(path)
    assert main(["decompress", str(tmp_path / "x.npy.zcar")]) == 0  # default output: without .zcar
    assert np.load(path).dtype == np.float16


def test_inspect_bare_stream(tmp_path, capsys):
    x = np.random.default_rng(5).normal(0, 1, (100, 30)).astype(np.float32)
    p = tmp_path / "x.zccl"
    p.write_bytes(codec.encode(x, chunk_size=1000))
    assert main(["inspect", str(p)]) == 0
    out = capsys.readouterr().out
    assert "float32" in out and "ratio" in out and "(100, 30)" in out and "coded" in out
    assert "row repeats" not in out
    from tests.helpers import padded_batch

    p.write_bytes(codec.encode(padded_batch("bfloat16", 40, 128, 128, 1, 20)))    # 1.3 MB, rows repeated
    assert main(["inspect", str(p)]) == 0
    out = capsys.readouterr().out
    assert "format v9" in out and "row repeats: " in out and " rows of 128 values repeat earlier rows" in out


def test_corrupted_and_truncated_archives(st_file, tmp_path, capsys):
    path, _ = st_file
    arc, _ = roundtrip(path)
    blob = arc.read_bytes()
    cases = {
        "truncated": blob[: len(blob) // 2],
        "short": blob[:10],
        "empty": b"",
        "badmagic": b"XXXX" + blob[4:],
        "extra": blob + b"\0",
        "flipped_payload": _flip(blob, len(blob) - 200),
        "flipped_crc": _flip(blob, len(blob) - 2),
        "flipped_meta": _flip(blob, 40),
    }
    for name, data in cases.items():
        bad = tmp_path / f"{name}.zcar"
        bad.write_bytes(data)
        out = tmp_path / f"{name}.out"
        capsys.readouterr()
        rc = main(["decompress", str(bad), str(out)])
        err = capsys.readouterr().err
        assert rc == 1, name
        assert "error" in err and "Traceback" not in err, name
        assert not out.exists(), name                               # no partial output left behind
        assert not [p for p in os.listdir(tmp_path) if ".tmp" in p], name
    assert main(["inspect", str(tmp_path / "truncated.zcar")]) == 1
    assert "truncated" in capsys.readouterr().err


def _flip(b: bytes, i: int) -> bytes:
    a = bytearray(b)
    a[i] ^= 0x20
    return bytes(a)


def test_internal_functions_raise_formaterror(tmp_path):
    from codec.cli import decompress_file, inspect_file

    bad = tmp_path / "bad.zcar"
    bad.write_bytes(b"ZCAR\x01\x01\x00\x00" + b"\xff" * 20)
    with pytest.raises(codec.FormatError):
        decompress_file(str(bad), str(tmp_path / "o"))
    with pytest.raises(codec.FormatError):
        inspect_file(str(bad))


def test_user_errors_exit_2(tmp_path, capsys):
    raw = tmp_path / "r.bin"
    raw.write_bytes(b"\0" * 16)
    cases = [
        ["compress", str(tmp_path / "missing.npy"), str(tmp_path / "o")],
        ["compress", str(raw), str(tmp_path / "o"), "--dtype", "int8"],
        ["compress", str(raw), str(tmp_path / "o")],                      # raw without --dtype
        ["compress", str(raw), str(tmp_path / "o"), "--dtype", "f32", "--chunk-size", "0"],
        ["compress", str(raw), str(raw), "--dtype", "f32"],               # output = input
        ["decompress", str(tmp_path / "missing.zcar"), str(tmp_path / "o")],
        ["inspect", str(tmp_path / "missing.zcar")],
        ["frobnicate"],
    ]
    for argv in cases:
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.strip() and "Traceback" not in err, argv
    assert raw.read_bytes() == b"\0" * 16


def test_invalid_input_files(tmp_path, capsys):
    bad_st = tmp_path / "bad.safetensors"
    bad_st.write_bytes(struct.pack("<Q", 5) + b"nojsn" + b"\0" * 8)
    assert main(["compress", str(bad_st), str(tmp_path / "o")]) == 1
    assert "safetensors" in capsys.readouterr().err
    bad_npy = tmp_path / "bad.npy"
    bad_npy.write_bytes(b"not an npy file at all")
    assert main(["compress", str(bad_npy), str(tmp_path / "o")]) == 1
    assert "npy" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_subprocess_python_m_codec(tmp_path):
    path = tmp_path / "w.npy"
    np.save(path, np.random.default_rng(6).normal(0, 0.02, (40, 40)).astype(ml_dtypes.bfloat16))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))

    def run(*args):
        return subprocess.run([sys.executable, "-m", "codec", *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=120)

    r = run("compress", "w.npy", "w.zcar")
    assert r.returncode == 0, r.stderr
    assert "ratio" in r.stdout
    r = run("decompress", "w.zcar", "w2.npy")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "w2.npy").read_bytes() == path.read_bytes()
    r = run("inspect", "w.zcar")
    assert r.returncode == 0 and "ratio" in r.stdout
    r = run("decompress", "nothere.zcar", "x")
    assert r.returncode == 2 and "nothere.zcar" in r.stderr and "Traceback" not in r.stderr


# ----------------------------------------------------------------------------- codec.archive
def test_archive_records_are_the_documented_layout():
    # codec/archive.py's docstring: a 20-byte header, then per entry a u32 name length and a 17-byte head
    assert archive.ARCHIVE_HEAD.struct.format == "<4sBBHQI" and archive.ARCHIVE_HEAD.size == 20
    assert archive.ARCHIVE_HEAD.offset == {"magic": 0, "version": 4, "input": 5, "reserved": 6, "size": 8,
                                           "meta_len": 16}
    assert archive.ENTRY_HEAD.struct.format == "<BdQ" and archive.ENTRY_HEAD.size == 17
    assert archive.ENTRY_HEAD.offset == {"flags": 0, "bound": 1, "length": 9}
    assert archive.ENTRY_COUNT.size == archive.ENTRY_NAME.size == archive.ARCHIVE_TRAILER.size == 4
    assert archive.INPUT_NAMES == {1: "safetensors", 2: "npy", 3: "raw"}
    # the input kinds are not the stream's chunk kinds (codec.format.KIND_*)
    assert not any(n.startswith("KIND_") for n in vars(archive))


def test_archive_bytes_are_pinned(tmp_path):
    """An archive written by hand from the layout table: compress writes exactly these bytes, and
    decompress reads them back (the format cannot change without this test noticing)."""
    import crc32c

    nan = struct.pack("<d", math.nan)
    zeros = np.zeros(4096, np.float16)
    words = zeros.tobytes()                                         # compresses (CONST chunks)...
    blob = bytes(codec.encode(zeros, chunk_size=1024))
    assert len(blob) < len(words)
    data = words + b"\x01"                                          # ...then a 1-byte tail
    src = tmp_path / "w.raw"
    src.write_bytes(data)
    bound = entropy_bound_bits(zeros)
    expect = (b"ZCAR" + bytes([1, 3]) + b"\0\0" + struct.pack("<QI", len(data), len(b"float16")) + b"float16"
              + struct.pack("<I", 2)
              + struct.pack("<I", 4) + b"data" + struct.pack("<BdQ", 1, bound, len(blob)) + blob
              + struct.pack("<I", 6) + b"(tail)" + b"\x02" + nan + struct.pack("<Q", 1) + b"\x01"
              + struct.pack("<I", crc32c.crc32c(data)))
    arc = tmp_path / "w.zcar"
    assert main(["compress", "-q", str(src), str(arc), "--dtype", "f16", "--chunk-size", "1024"]) == 0
    assert arc.read_bytes() == expect
    hand = tmp_path / "hand.zcar"
    hand.write_bytes(expect)
    assert main(["decompress", "-q", str(hand), str(tmp_path / "back")]) == 0
    assert (tmp_path / "back").read_bytes() == data


def test_archive_module_without_the_command_line(tmp_path):
    """codec.archive plans, writes, parses, describes and rebuilds on its own (file objects in, file
    objects out), and imports nothing of the command line."""
    import ast
    import io

    x = np.random.default_rng(8).normal(0, 0.02, (32, 40)).astype(ml_dtypes.bfloat16)
    src = tmp_path / "a.npy"
    np.save(src, x)
    raw = src.read_bytes()
    assert archive.detect_input(str(src)) == archive.INPUT_NPY
    with open(src, "rb") as f:
        meta, pieces = archive.plan(f, len(raw), archive.INPUT_NPY)
        assert [p.name for p in pieces] == ["array"] and pieces[0].layout.name == "bfloat16"
        out = io.BytesIO()
        rows = archive.write(f, out, archive.INPUT_NPY, len(raw), meta, pieces)
    assert rows[0]["compressed"] and rows[0]["numel"] == x.size
    mv = memoryview(out.getvalue())
    arc = archive.parse_archive(mv)
    assert (arc.input, arc.size, arc.meta, len(arc.entries)) == (archive.INPUT_NPY, len(raw), meta, 1)
    info = archive.describe(mv)
    assert info["kind"] == "npy" and info["entries"][0]["dtype"] == "V2 as bfloat16"
    back = io.BytesIO()
    archive.rebuild(mv, arc, back)
    assert back.getvalue() == raw
    with open(src, "rb") as f, pytest.raises(archive.LayoutConflict):
        archive.plan(f, len(raw), archive.INPUT_NPY, codec.layouts.layout_for("float32"))

    tree = ast.parse((REPO / "codec" / "archive.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & {"argparse", "tqdm", "cli", "codec.cli", "sys"}, imported


# ----------------------------------------------------------------------------- codec.stats
def test_entropy_bound_simple_cases():
    assert entropy_bound_bits(np.zeros(1000, np.float32)) == 0.0                  # all +0: one symbol
    assert entropy_bound_bits(np.full(64, 1.0, ml_dtypes.bfloat16)) == pytest.approx(8.0)  # 1 + 7 bits
    half = np.array([0.0, 1.0] * 50, dtype=np.float16)                            # H = 1, half pay 1 + 10
    assert entropy_bound_bits(half) == pytest.approx(1 + 0.5 * 11)
    negz = np.array([0.0, -0.0] * 50, dtype=np.float32)                           # -0 is not +0
    assert entropy_bound_bits(negz) == pytest.approx(1 + 0.5 * 24)
    assert entropy_bound_bits(np.zeros(0, ml_dtypes.float8_e4m3fn)) == 0.0
    with pytest.raises(TypeError):
        entropy_bound_bits(np.zeros(4, np.int32))


def test_entropy_bound_is_close_to_codec():
    x = np.random.default_rng(7).normal(0, 0.02, 1 << 16).astype(ml_dtypes.bfloat16)
    bound = entropy_bound_bits(x)
    actual = 8 * len(codec.encode(x)) / x.size
    # the codec also models the leading mantissa bit, so it may beat this bound by a little
    assert 8 < bound < 11 and bound - 0.3 < actual < bound + 0.5
    assert math.isclose(entropy_bound_bits(x.reshape(256, 256)), bound)
