"""Benchmarks' --json output is JSON (numbers a script can read), not a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _json_of(script: str, *args: str) -> object:
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--json", *args],
                       capture_output=True, text=True, timeout=600)
    assert r.stderr.count("Traceback") == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_fidelity_json_has_a_row_per_figure_and_every_shape() -> None:
    out = _json_of("fidelity.py", "--iters", "200")
    assert isinstance(out, dict)
    rows = out["figures"]
    assert rows and all(isinstance(r["within_10pct"], bool) for r in rows)
    assert all(r["simulated"] > 0 and r["ratio"] == r["simulated"] / r["published"]
               for r in rows)
    assert all(isinstance(s["holds"], bool) for s in out["shapes"])
