"""The driver is installed as nicsim.driver; the old name `driver` is the same modules and never
takes the place of another project's `driver` package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_old_name_is_the_same_modules() -> None:
    import nicsim.driver.kernel.ib_core as new
    import nicsim.driver.user.verbs as new_verbs

    import driver.kernel.ib_core as old
    import driver.user.verbs as old_verbs

    assert old is new and old_verbs is new_verbs
    assert new.__spec__.name == "nicsim.driver.kernel.ib_core"


def _run(code: str, cwd: Path, pythonpath: Path | None = None) -> str:
    env = {"PATH": "/usr/bin:/bin"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_old_name_outside_a_checkout(tmp_path: Path) -> None:
    out = _run("import nicsim.world; import driver.user.verbs as a, nicsim.driver.user.verbs as b; "
               "print(a is b)",
               tmp_path)
    assert out == "True"


def test_another_projects_driver_package_wins(tmp_path: Path) -> None:
    pkg = tmp_path / "site" / "driver"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("WHO = 'theirs'\n")
    out = _run("import nicsim.driver, nicsim.world; import driver; print(driver.WHO)",
               tmp_path, tmp_path / "site")
    assert out == "theirs"

