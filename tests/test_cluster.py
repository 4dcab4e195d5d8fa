"""The emulated cluster: real namespaces, real sockets, shaped links; torn down afterwards."""
import json
import subprocess

import pytest

from bench.cluster import Cluster, available

pytestmark = pytest.mark.slow

REASON = available()


@pytest.mark.skipif(REASON is not None, reason=f"emulated cluster unavailable: {REASON}")
def test_cluster_runs_compressed_collectives_and_tears_down():
    c = Cluster([200, 50], prefix="zct", subnet="10.78.0")
    with c:
        assert set(c.leftovers()) == {"zct0", "zct1"}
        qdisc = subprocess.run(["ip", "netns", "exec", "zct1", "tc", "qdisc", "show", "dev", "zct1a"],
                               capture_output=True, text=True).stdout
        assert "tbf" in qdisc and "50Mbit" in qdisc
        out = c.run(["-m", "bench.collectives_bench", "--size-mib", "1", "--reps", "1"], port=29561, timeout=300)
    rows = json.loads(out[0].strip().splitlines()[-1])
    assert {r["op"] for r in rows} == {"all_reduce", "all_gather"}
    assert all(r["bit_identical"] for r in rows)
    assert c.leftovers() == []


@pytest.mark.skipif(REASON is not None, reason=f"emulated cluster unavailable: {REASON}")
def test_cluster_teardown_on_failure():
    c = Cluster([100, 100], prefix="zct", subnet="10.78.0")
    with pytest.raises(RuntimeError, match="rank"):
        with c:
            c.run(["-c", "import sys; sys.exit(3)"], port=29562, timeout=60)
    assert c.leftovers() == []
