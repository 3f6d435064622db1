"""The README's cheat-sheet works as a newcomer types it, on a fresh clone: every command in
its table runs from the top of a checkout that has only what git tracks (the folders its
commands write into included) and exits 0. The few that take minutes (a sweep, an RTL run, the
HDL tests) are not run here, but the folders they write into must exist all the same."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# Commands of the table that take minutes: their own tests run them (test_sweep*, hdl_tb).
SLOW = ("nicsim sweep", "nicsim run examples/rtl.yaml --rtl", "pytest ")


def _cheat_sheet() -> list[str]:
    text = (ROOT / "README.md").read_text()
    table = text.split("## Cheat-sheet", 1)[1].split("\n## ", 1)[0]
    cmds = []
    for row in table.splitlines():
        cells = row.split("|")
        if len(cells) > 2:
            m = re.match(r"\s*`([^`]+)`", cells[2])
            if m and m.group(1).split()[0] in ("nicsim", "tshark", "pytest"):
                cmds.append(m.group(1))
    return cmds


COMMANDS = _cheat_sheet()


def test_the_cheat_sheet_has_the_jobs_a_newcomer_asks_for() -> None:
    assert len(COMMANDS) >= 10
    for job in ("nicsim run", "nicsim perftest", "nicsim exec", "tshark", "nicsim sweep",
                "--rtl", "pytest hdl_tb"):
        assert any(job in c for c in COMMANDS), job


def _fresh_checkout(tmp: Path) -> Path:
    """The folders of a fresh clone that the commands read (linked) and write into (made
    only if git tracks them, as a clone would have them)."""
    for d in ("examples", "wireshark"):
        (tmp / d).symlink_to(ROOT / d)
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    for f in tracked:
        if f.endswith(".gitkeep"):
            (tmp / f).parent.mkdir(parents=True, exist_ok=True)
    return tmp


def test_the_folders_the_commands_write_into_exist_in_a_clone(tmp_path: Path) -> None:
    tmp = _fresh_checkout(tmp_path)
    for cmd in COMMANDS:
        words = shlex.split(cmd)
        for opt in ("--out", "--pcap"):
            if opt in words:
                parent = Path(words[words.index(opt) + 1]).parent
                assert (tmp / parent).is_dir(), f"{cmd}: {parent}/ is not in a fresh clone"


def test_every_quick_command_runs(tmp_path: Path) -> None:
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (make test installs it)")
    tmp = _fresh_checkout(tmp_path)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    ran = 0
    for cmd in COMMANDS:
        if cmd.startswith(SLOW):
            continue
        # (in the table's order: the captures a later row reads come from an earlier run)
        p = subprocess.run(cmd, shell=True, cwd=tmp, env=env, capture_output=True, text=True,
                           timeout=600, check=False)
        assert p.returncode == 0, f"{cmd}: exit {p.returncode}\n{p.stderr[-2000:]}"
        assert "Traceback" not in p.stderr, f"{cmd}:\n{p.stderr[-2000:]}"
        ran += 1
    assert ran >= 8
