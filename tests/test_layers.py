"""The package graph keeps its contracts (.importlinter, checked by scripts/lint_imports.py):
layers point one way, the driver uses only the contract and the host, the product imports no
test code, and no package has an import cycle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "lint_imports.py")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout
