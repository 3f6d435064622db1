"""benchmarks/fidelity.py --json on a fit row and a check row: JSON (not a traceback), each
row with its id, profile, published and simulated value, ratio, held_out and source, and a
summary that reports the fit and check sets apart. Structure and self-consistency only: no
figure is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "benchmarks" / "fidelity_figures.yaml"


def _run(*args: str) -> tuple[int, dict]:
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fidelity.py"), "--json",
                        *args], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    return r.returncode, json.loads(r.stdout)


def _first(use: str) -> str:
    rows = yaml.safe_load(TABLE.read_text())["figures"]
    return next(f["id"] for f in rows if f["use"] == use and f["size"] <= 4096)


def test_every_row_says_fit_or_check_and_cites_a_source() -> None:
    rows = yaml.safe_load(TABLE.read_text())["figures"]
    assert len({f["id"] for f in rows}) == len(rows)
    assert all(f["use"] in ("fit", "check") and str(f["source"]).strip() for f in rows)
    assert {f["use"] for f in rows} == {"fit", "check"}


def test_json_on_a_fit_and_a_check_row() -> None:
    fit, check = _first("fit"), _first("check")
    code, out = _run("--rows", f"{fit},{check}", "--iters", "100", "--no-shapes")
    assert code in (0, 1)
    rows = {r["id"]: r for r in out["figures"]}
    assert set(rows) == {fit, check}
    for r in rows.values():
        for key in ("id", "profile", "published", "simulated", "ratio", "held_out", "source"):
            assert key in r
        assert isinstance(r["held_out"], bool) and isinstance(r["within_10pct"], bool)
        assert r["simulated"] > 0 and r["ratio"] == r["simulated"] / r["published"]
        assert r["held_out"] == (r["use"] == "check")
    assert rows[fit]["held_out"] is False and rows[check]["held_out"] is True
    summ = {s["set"]: s for s in out["summary"]}
    assert set(summ) == {"fit", "check"}
    for use, s in summ.items():
        errs = [r["abs_error"] for r in rows.values() if r["use"] == use]
        assert s["rows"] == len(errs) == 1
        assert s["median_abs_error"] == errs[0] == abs(rows[fit if use == "fit" else check]
                                                       ["ratio"] - 1)
        assert s["fraction_within_10pct"] == float(errs[0] <= 0.10)
    assert all(isinstance(t["met"], bool) and "target" in t for t in out["targets"])
    assert code == (0 if all(t["met"] for t in out["targets"]) else 1)
    assert out["shapes"] == []


def test_unknown_row_id_is_one_line_not_a_traceback() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fidelity.py"), "--rows",
                        "no-such-row"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "no-such-row" in r.stderr


def test_the_readme_shows_the_fit_and_the_check_error_of_the_current_table() -> None:
    """`make figures` writes the README's fidelity block; its row counts are the table's (a
    row added or moved between fit and check without a new run shows here)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import figures
    finally:
        sys.path.pop(0)
    text = (ROOT / "README.md").read_text()
    i, j = text.find(figures.README_BEGIN), text.find(figures.README_END)
    assert 0 <= i < j, "the README has no fidelity block"
    block = text[i:j]
    rows = yaml.safe_load(TABLE.read_text())["figures"]
    for use in ("fit", "check"):
        n = sum(f["use"] == use for f in rows)
        assert f"| {use} | {n} |" in block, (use, n, block)
    # (the writer renders what fidelity.py's JSON summary holds)
    summary = [{"set": "check", "rows": 3, "median_abs_error": 0.5, "max_abs_error": 1.0,
                "fraction_within_10pct": 1 / 3, "fraction_within_25pct": 2 / 3}]
    lines = figures.readme_fidelity({"summary": summary}, "today")
    assert "| check | 3 | 50% | 100% | 33% | 67% |" in lines
