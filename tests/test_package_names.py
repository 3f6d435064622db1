"""The driver has one import name, nicsim.driver: nothing in the repository imports `driver`,
no import hook makes that name work, and another project's `driver` package is never
shadowed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLD = re.compile(r"^\s*(from|import)\s+driver(\.|\s|$)", re.M)


def _run(code: str, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def test_nothing_imports_the_old_name() -> None:
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    bad = [f for f in tracked if OLD.search((ROOT / f).read_text())]
    assert not bad, f"`driver` imported by its old name in {bad}"


def test_the_old_name_is_not_installed(tmp_path: Path) -> None:
    r = _run("import nicsim.world, nicsim.driver.user.verbs\n"
             "try:\n    import driver\nexcept ImportError:\n    print('none')\n", tmp_path)
    assert r.stdout.strip() == "none", r.stderr


def test_the_folder_refuses_to_be_imported_as_driver() -> None:
    """In a source checkout the `driver/` folder is on the path as `driver`: importing it by
    that name would load every module twice, so it says how to import it instead."""
    r = _run("import driver", ROOT)
    assert r.returncode != 0 and "nicsim.driver" in r.stderr


def test_another_projects_driver_package_wins(tmp_path: Path) -> None:
    pkg = tmp_path / "site" / "driver"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("WHO = 'theirs'\n")
    r = _run("import nicsim.driver, nicsim.world; import driver; print(driver.WHO)",
             tmp_path, tmp_path / "site")
    assert r.stdout.strip() == "theirs", r.stderr
