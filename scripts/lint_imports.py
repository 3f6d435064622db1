"""Check nicsim's import contracts (.importlinter) on the package as it is installed.

The driver lives in driver/ at the top of the repository and is installed as nicsim.driver
(setup.py), which an import graph of the nicsim/ folder does not see. This lays the package
out as installed (nicsim/ with driver/ as nicsim/driver/; the pyverbs facade, a directory put on
a program's path rather than a package of nicsim, left out) in a temporary folder and runs
import-linter there.

    python scripts/lint_imports.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def stage(where: Path) -> None:
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "nicsim", where / "nicsim", ignore=skip)
    shutil.copytree(ROOT / "driver", where / "nicsim" / "driver",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "facade"))


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        stage(Path(tmp))
        env = dict(os.environ, PYTHONPATH=tmp)
        lint = Path(sys.executable).with_name("lint-imports")
        return subprocess.run([str(lint), str(ROOT / ".importlinter"),
                               "--no-cache"], cwd=tmp, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
