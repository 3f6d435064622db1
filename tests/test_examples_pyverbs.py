"""The pyverbs example programs (examples/pyverbs/) run unmodified under `nicsim exec`: each
exits 0 and prints its one summary line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

EXPECTED = {
    "rc_write_read": r"rc_write_read: wrote 2048 bytes nsnic0 -> nsnic1 and read them back: OK",
    "rc_send_recv": r"rc_send_recv: 38 bytes and immediate 0xc0ffee nsnic0 -> nsnic1: OK",
    "ud_send_recv": r"ud_send_recv: 32 bytes from QP \d+ \(nsnic0\) to QP \d+ \(nsnic1\), "
                    r"behind a 40-byte GRH: OK",
    "rdma_cm_client_server": r"rdma_cm_client_server: 10\.0\.0\.1 -> 10\.0\.0\.2:7471 sent "
                             r"'ping from the client', got 'pong from the server', "
                             r"disconnected: OK",
}


def test_every_example_is_tested() -> None:
    assert sorted(p.stem for p in (ROOT / "examples" / "pyverbs").glob("*.py")) == \
        sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_under_nicsim_exec(name: str) -> None:
    r = subprocess.run([sys.executable, "-m", "nicsim.cli", "exec", "--", "python",
                        f"examples/pyverbs/{name}.py"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(EXPECTED[name], r.stdout.strip()), r.stdout


def test_the_docs_include_every_example_verbatim() -> None:
    """The tutorial includes the files themselves (pymdownx.snippets), so the docs show what
    CI runs."""
    page = (ROOT / "docs" / "tutorials" / "examples.md").read_text()
    for name in EXPECTED:
        assert f'--8<-- "examples/pyverbs/{name}.py"' in page, name
