"""Every benchmark, in a short configuration, holds to physics: it runs unmodified with the
physics checker on every world it builds (nicsim.checks.physics), each world checked when it
is closed (or when the benchmark ends). Figures are not looked at here: numbers live in the
benchmarks' own output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Each benchmark with arguments that keep it short. Left out: the HDL ones (the RTL), the
# rdma-core tests (an outside checkout), fidelity (tests/test_benchmark_json.py runs it) and
# memory (its 1,000,000-WR case cannot be shortened; its worlds are these at length).
SHORT = {
    "echo": ["--requests", "200"],
    "fabric_speed": ["--packets", "3000", "--trials", "1"],
    "fault_sweep": ["--qps", "2", "--wrs", "20"],
    "fuzz_rx": ["--packets", "300"],
    "goodput": ["--mb", "1"],
    "incast": ["--n", "2", "--mbytes", "2"],
    "nic_model": ["--iters", "200"],
    "odp": ["--sizes", "4096,65536"],
    "scale_qps": ["--qps", "4", "--wrs", "20"],
    "sim_speed": ["--packets", "4000", "--trials", "1"],
    "soak": ["--seeds", "3", "--qps", "2", "--wrs", "20"],
    "sweep": ["--count", "20"],
    "workload": ["--flows", "60", "--loads", "0.5"],
}
RUN = """
import runpy, sys
from nicsim.checks import physics
physics.enable()
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as e:
    if e.code not in (0, 1, None):
        raise
physics.close_all()
print("PHYSICS OK", file=sys.stderr)
"""


@pytest.mark.parametrize("name", sorted(SHORT))
def test_benchmark_runs_checked(name: str) -> None:
    r = subprocess.run([sys.executable, "-c", RUN, str(ROOT / "benchmarks" / f"{name}.py"),
                        "--json", *SHORT[name]], capture_output=True, text=True, timeout=900,
                       cwd=ROOT)
    assert "PHYSICS OK" in r.stderr, r.stderr[-3000:]
