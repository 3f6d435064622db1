"""rdma-core's own test suite (tests/ of linux-rdma/rdma-core) run unmodified on nicsim.

    python benchmarks/rdma_core_tests.py PATH/TO/rdma-core [--jobs 4] [--json] [--only FILE]

Each tests/test_*.py file runs in its own `nicsim exec` process (one simulated world each, so
a crash or a hang costs one file), loaded the way rdma-core's tests/run_tests.py loads it
(the `tests` package with its args_parser). Prints pass / fail / error / skip per file and in
total; with --baseline, runs without `nicsim exec` (what a program sees with no pyverbs).
Tests of other vendors' devices (mlx5, efa) are counted apart: they skip on nsnic by design.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MARK = "@@nicsim-rdma-core@@ "
OUTCOMES = ("pass", "fail", "error", "skip")
VENDOR_PREFIXES = ("test_mlx5_", "test_efa")


def _inner(checkout: str, module: str) -> int:
    """Inside `nicsim exec`: run one test module, one JSON line per test."""
    import unittest
    from importlib.machinery import SourceFileLoader

    tests_dir = os.path.join(checkout, "tests")
    sys.path.insert(0, tests_dir)
    sys.path.insert(0, checkout)
    sys.argv = [os.path.join(tests_dir, "run_tests.py")]
    from args_parser import parser  # rdma-core's own

    parser.parse_args()

    def emit(test: unittest.TestCase, outcome: str, detail: str = "") -> None:
        print(MARK + json.dumps({"test": test.id(), "outcome": outcome,
                                 "detail": detail[-2000:]}), flush=True)

    class Result(unittest.TestResult):
        def addSuccess(self, test):  # noqa: N802, ANN001
            emit(test, "pass")

        def addFailure(self, test, err):  # noqa: N802, ANN001
            emit(test, "fail", self._exc_info_to_string(err, test))

        def addError(self, test, err):  # noqa: N802, ANN001
            emit(test, "error", self._exc_info_to_string(err, test))

        def addSkip(self, test, reason):  # noqa: N802, ANN001
            emit(test, "skip", reason)

        def addExpectedFailure(self, test, err):  # noqa: N802, ANN001
            emit(test, "pass", "expected failure")

        def addUnexpectedSuccess(self, test):  # noqa: N802, ANN001
            emit(test, "fail", "unexpected success")

    try:
        SourceFileLoader("tests", os.path.join(tests_dir, "__init__.py")).load_module()
        suite = unittest.defaultTestLoader.loadTestsFromName(f"tests.{module}")
    except Exception as e:  # noqa: BLE001 - an import error is a result, reported as such
        print(MARK + json.dumps({"test": f"tests.{module}", "outcome": "error",
                                 "detail": f"import: {type(e).__name__}: {e}"}), flush=True)
        return 0
    suite.run(Result())
    return 0


def run_file(checkout: Path, module: str, timeout: float, baseline: bool) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--inner", str(checkout), module]
    if not baseline:
        cmd = [sys.executable, "-m", "nicsim.cli", "exec", "--", *cmd]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True, timeout=timeout,
                           check=False)
        out, err, timed_out = p.stdout, p.stderr, False
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err, timed_out = "", True
    results = [json.loads(line[len(MARK):]) for line in out.splitlines()
               if line.startswith(MARK)]
    counts = dict.fromkeys(OUTCOMES, 0)
    for r in results:
        counts[r["outcome"]] += 1
    if timed_out:
        counts["error"] += 1
        results.append({"test": f"tests.{module}", "outcome": "error",
                        "detail": f"timed out after {timeout:.0f} s"})
    elif not results:
        counts["error"] += 1
        results.append({"test": f"tests.{module}", "outcome": "error",
                        "detail": f"no results; stderr: {err[-2000:]}"})
    return {"file": module, "counts": counts, "seconds": round(time.monotonic() - t0, 1),
            "tests": results}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", help="an rdma-core source tree (its tests/ directory is run)")
    ap.add_argument("--jobs", type=int, default=4, help="files run at once")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per file")
    ap.add_argument("--only", action="append", help="run only this test file (test_qp)")
    ap.add_argument("--baseline", action="store_true", help="run without nicsim exec")
    ap.add_argument("--json", action="store_true", help="print every test's outcome as JSON")
    ap.add_argument("--verbose", action="store_true", help="list each failing test and why")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("module", nargs="?", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.inner:
        return _inner(a.checkout, a.module)
    checkout = Path(a.checkout).resolve()
    files = sorted(p.stem for p in (checkout / "tests").glob("test_*.py"))
    if a.only:
        files = [f for f in files if f in {o.removesuffix(".py") for o in a.only}]
    if not files:
        print(f"error: no tests/test_*.py under {checkout}", file=sys.stderr)
        return 2
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        rows = list(pool.map(lambda m: run_file(checkout, m, a.timeout, a.baseline), files))
    total = {k: {o: 0 for o in OUTCOMES} for k in ("generic", "vendor")}
    for r in rows:
        kind = "vendor" if r["file"].startswith(VENDOR_PREFIXES) else "generic"
        for o in OUTCOMES:
            total[kind][o] += r["counts"][o]
    if a.json:
        print(json.dumps({"files": rows, "total": total}, indent=1))
        return 0
    print(f"{'file':<32} {'pass':>5} {'fail':>5} {'error':>5} {'skip':>5} {'s':>6}")
    for r in rows:
        c = r["counts"]
        print(f"{r['file']:<32} {c['pass']:>5} {c['fail']:>5} {c['error']:>5} {c['skip']:>5} "
              f"{r['seconds']:>6}")
        if a.verbose:
            for t in r["tests"]:
                if t["outcome"] in ("fail", "error"):
                    why = t["detail"].strip().splitlines()[-1] if t["detail"].strip() else ""
                    print(f"    {t['outcome']:<5} {t['test']}: {why[:150]}")
    for kind in ("generic", "vendor"):
        c = total[kind]
        print(f"{kind + ' total':<32} {c['pass']:>5} {c['fail']:>5} {c['error']:>5} "
              f"{c['skip']:>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
