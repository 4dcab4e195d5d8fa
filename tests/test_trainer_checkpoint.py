"""Checkpoints and dead workers: a resumed run is bit-identical to one that never stopped; when a worker
dies the others stop with a clear message and the last complete checkpoint survives."""
import os

import pytest

torch = pytest.importorskip("torch")
from tests.dist_helpers import run_ranks  # noqa: E402

SMALL = ["--dim", "32", "--layers", "1", "--heads", "2", "--block", "32", "--batch", "4", "--inner-steps", "2",
         "--corpus-mib", "0.25", "--eval-every", "0", "--log-json"]


def _args(extra):
    from trainers.launch import parser

    return parser().parse_args(SMALL + extra)


def _bits(res):
    return res.params.view(torch.int32).tolist()


def case_resume(rank, ws, algo, root):
    from trainers.launch import train

    whole = train(_args(["--algo", algo, "--outer-steps", "4"]))
    ck = os.path.join(root, algo)
    first = train(_args(["--algo", algo, "--outer-steps", "2", "--checkpoint-dir", ck]))
    # a fresh model and trainer, as after a restart: only the checkpoint carries state over
    second = train(_args(["--algo", algo, "--outer-steps", "4", "--checkpoint-dir", ck, "--resume"]))
    return {"whole": _bits(whole), "resumed": _bits(second), "first_rounds": first.rounds_done,
            "second_log_rounds": [r["round"] for r in second.log], "sent": (whole.log[-1]["sent"],
                                                                           second.log[-1]["sent"]),
            "raw": whole.log[-1]["raw"]}


# ~10 s each: DiLoCo in the README's run, GASLoC in CI's slow step
@pytest.mark.parametrize("algo", ["diloco", pytest.param("gasloc", marks=pytest.mark.slow)])
def test_resumed_run_is_bit_identical(tmp_path, algo):
    res = run_ranks(case_resume, 2, algo, str(tmp_path))
    for r in res.values():
        assert not isinstance(r, str), r
    for r in res.values():
        assert r["first_rounds"] == 2 and r["second_log_rounds"] == [3, 4]
        assert r["resumed"] == r["whole"]
        assert r["sent"][0] == r["sent"][1]                       # wire statistics are checkpointed too
        assert 0 < r["sent"][0] < r["raw"]                         # and compression did shrink the traffic
    ck = tmp_path / algo
    assert (ck / "LATEST").read_text().strip() == "4"
    assert sorted(p.name for p in ck.glob("round-*")) == ["round-000004"]   # older rounds were pruned


def case_dead_worker(rank, ws, root):
    from trainers.launch import train

    def die(r, rnd):
        if r == ws - 1 and rnd == 3:
            os._exit(1)                                           # killed without a word, mid-run

    import time

    t = time.perf_counter()
    res = train(_args(["--algo", "diloco", "--outer-steps", "6", "--checkpoint-dir", root, "--timeout", "60"]), die)
    return {"status": res.status, "message": res.message, "rounds": res.rounds_done,
            "seconds": time.perf_counter() - t}


@pytest.mark.slow      # 9 s: workers and a timeout: CI's slow step (the README run stays under 8 minutes on 2 cores)
def test_dead_worker_stops_the_others_and_the_checkpoint_survives(tmp_path):
    ws = 3
    res = run_ranks(case_dead_worker, ws, str(tmp_path), expect=ws - 1)
    assert sorted(res) == [0, 1]
    for r in res.values():
        assert not isinstance(r, str), r
        assert r["status"] == 3
        assert r["rounds"] == 3
        assert "outer round 4" in r["message"] and "last complete checkpoint: round 3" in r["message"]
        assert r["seconds"] < 60                                  # the survivors did not hang
    from trainers import checkpoint

    assert checkpoint.latest(tmp_path) == 3
    for rank in range(ws):
        st = checkpoint.read_state(checkpoint.rank_file(tmp_path, 3, rank))
        assert st["round"] == 3 and st["world"] == ws and "inner" in st and "model" in st


def test_bad_checkpoint_arguments():
    from trainers.launch import train

    with pytest.raises(ValueError, match="--resume needs"):
        train(_args(["--resume"]))
    with pytest.raises(ValueError, match="checkpoint-every"):
        train(_args(["--checkpoint-every", "0"]))


def test_corrupt_latest_is_reported(tmp_path):
    from trainers import checkpoint

    (tmp_path / "LATEST").write_text("twelve")
    with pytest.raises(checkpoint.CheckpointError, match="expected a round number"):
        checkpoint.latest(tmp_path)
