"""An emulated cluster on one machine: network namespaces, veth pairs, a bridge, ``tc`` shaping.

Each host is a network namespace ``{prefix}{i}`` with one veth interface addressed
``10.77.0.{i+1}/24`` (addresses that exist only inside these namespaces), joined to a bridge
in the root namespace.  Each host's egress is shaped with ``tbf`` (rate, burst, latency), so
hosts can have different link rates.  One torch.distributed rank runs per host (gloo bound to
that host's interface).  Everything is torn down on exit, on Ctrl-C and on failure.

    with Cluster([1000, 1000, 100, 100]) as c:            # Mbit/s per host (0: unshaped)
        results = c.run(["-m", "bench.collectives_bench", "--size-mib", "64"])

Needs root and iproute2 (``ip``, ``tc``).
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def available() -> str | None:
    """None if namespaces can be built here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs {tool} (iproute2)"
    return None


def _sh(*args, check=True):
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


class Cluster:
    def __init__(self, rates_mbit, *, latency_ms: float = 0.2, prefix: str = "zcc", subnet: str = "10.77.0"):
        if not rates_mbit:
            raise ValueError("at least one host")
        self.rates = [float(r) for r in rates_mbit]
        self.latency_ms = latency_ms
        self.prefix = prefix
        self.subnet = subnet
        self.bridge = f"{prefix}br"
        self.hosts = [f"{prefix}{i}" for i in range(len(self.rates))]
        self._up = False

    def addr(self, i: int) -> str:
        return f"{self.subnet}.{i + 1}"

    def __enter__(self):
        reason = available()
        if reason:
            raise RuntimeError(f"cannot build the emulated cluster: {reason}")
        self.teardown()                                   # leftovers of a killed run
        atexit.register(self.teardown)
        self._old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        self._up = True
        try:
            _sh("ip", "link", "add", self.bridge, "type", "bridge")
            _sh("ip", "link", "set", self.bridge, "up")
            for i, (ns, rate) in enumerate(zip(self.hosts, self.rates)):
                inner, outer = f"{ns}a", f"{ns}b"
                _sh("ip", "netns", "add", ns)
                _sh("ip", "link", "add", inner, "type", "veth", "peer", "name", outer)
                _sh("ip", "link", "set", inner, "netns", ns)
                _sh("ip", "link", "set", outer, "master", self.bridge)
                _sh("ip", "link", "set", outer, "up")
                _sh("ip", "-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", inner)
                _sh("ip", "-n", ns, "link", "set", inner, "up")
                _sh("ip", "-n", ns, "link", "set", "lo", "up")
                if rate > 0:                                       # 0: unshaped veth
                    # ~4 ms of traffic, and never less than one 64 KiB GSO super-packet plus headers:
                    # tbf drops any packet larger than its burst (slow links collapsed below ~50 Mbit/s)
                    burst = max(70_000, int(rate * 1e6 / 8 / 250))
                    _sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", inner, "root", "tbf",
                        "rate", f"{rate}mbit", "burst", str(burst), "latency", f"{max(self.latency_ms, 1.0) * 50}ms")
        except BaseException:
            self.teardown()
            raise
        return self

    def _on_signal(self, signum, frame):
        self.teardown()
        raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(128 + signum)

    def __exit__(self, *exc):
        self.teardown()
        for s, h in getattr(self, "_old", {}).items():
            signal.signal(s, h)
        return False

    def teardown(self):
        for ns in self.hosts:
            _sh("ip", "netns", "del", ns, check=False)
            _sh("ip", "link", "del", f"{ns}b", check=False)     # a veth outliving its namespace's processes
        _sh("ip", "link", "del", self.bridge, check=False)
        self._up = False

    def leftovers(self) -> list[str]:
        out = _sh("ip", "netns", "list", check=False).stdout.split()
        return [n for n in out if n.startswith(self.prefix) and n[len(self.prefix):].isdigit()]

    def run(self, python_args, *, timeout: float = 600, port: int = 29555, env=None) -> list[str]:
        """Start one rank per host (``python ARGS`` with torchrun-style environment); return stdouts."""
        procs = []
        base = dict(os.environ, **(env or {}))
        base["PYTHONPATH"] = str(REPO) + os.pathsep + base.get("PYTHONPATH", "")
        for i, ns in enumerate(self.hosts):
            e = dict(base, RANK=str(i), WORLD_SIZE=str(len(self.hosts)), MASTER_ADDR=self.addr(0),
                     MASTER_PORT=str(port), GLOO_SOCKET_IFNAME=f"{ns}a", LOCAL_RANK=str(i),
                     LOCAL_WORLD_SIZE=str(len(self.hosts)))       # all hosts share this machine's cores
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, *python_args], env=e,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO))
        outs = []
        try:
            for p in procs:
                o, err = p.communicate(timeout=timeout)
                if p.returncode:
                    raise RuntimeError(f"rank {procs.index(p)} failed ({p.returncode}):\n{err[-3000:]}")
                outs.append(o)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        return outs


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Run a command on an emulated cluster (one rank per host).")
    ap.add_argument("--rates", default="1000,1000,1000,1000", help="Mbit/s per host, comma separated")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then python arguments, e.g. -- -m bench.collectives_bench")
    a = ap.parse_args(argv)
    if a.args and a.args[0] == "--":
        a.args = a.args[1:]
    with Cluster([float(r) for r in a.rates.split(",")]) as c:
        for i, out in enumerate(c.run(a.args)):
            print(f"--- rank {i}\n{out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

