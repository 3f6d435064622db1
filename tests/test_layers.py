"""The package graph keeps its contracts (.importlinter, checked by scripts/lint_imports.py):
layers point one way, the driver uses only the contract and the host, the product imports no
test code, and no package has an import cycle. And no test module imports another: shared
helpers live in nicsim.testing."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "lint_imports.py")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def _test_imports(path: Path, local: set[str]) -> list[str]:
    """The imports in `path` that reach a module under tests/: `tests` or `tests.*`, a
    relative import, or a module of tests/ by its bare name (conftest, test_x)."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = ["." * node.level + (node.module or "")]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if name.startswith(".") or top == "tests" or top in local:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return bad


def test_no_test_module_imports_another() -> None:
    """Shared test helpers live in nicsim.testing (issue 22): a module under tests/ imports
    no other module under tests/."""
    files = sorted((ROOT / "tests").rglob("*.py"))
    local = {p.stem for p in files} - {"__init__"}
    bad = [hit for p in files for hit in _test_imports(p, local)]
    assert not bad, "test modules import test modules (move the helper to nicsim/testing/):\n" \
        + "\n".join(bad)
