"""Bad input to exec and perftest gets one line and nothing is created or half-written:
argument errors without the usage dump, a capture directory that does not exist refused
(not made), output files checked before the run, a closed pipe not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _nicsim(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nicsim", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


def test_exec_argument_error_is_one_line() -> None:
    r = _nicsim("exec", "--hosts", "abc", "--", "true")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: nicsim exec: argument --hosts: invalid int value: 'abc' "
        "(see nicsim exec --help)"]


def test_exec_refuses_a_capture_directory_whose_parent_does_not_exist(tmp_path: Path) -> None:
    d = tmp_path / "no" / "such"
    r = _nicsim("exec", "--pcap", str(d), "--", "true")
    assert r.returncode == 2 and f"directory {d.parent} does not exist" in r.stderr
    assert not d.parent.exists()  # nothing made
    assert _nicsim("exec", "--pcap", str(tmp_path / "caps"), "--", "true").returncode == 0
    assert (tmp_path / "caps").is_dir()  # DIR itself is made, as run --out makes it


def test_exec_tools_stop_quietly_when_the_reader_goes_away() -> None:
    for _ in range(3):
        r = _nicsim("exec", "--hosts", "4", "--", "sh", "-c", "rdma link show | head -1")
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        assert r.stdout.startswith("link nsnic0/1")


@pytest.mark.parametrize(("arg", "says"), [
    ("--out_json_file=/no/such/x.json", "directory /no/such does not exist"),
    ("--waterfall=/no/such/x.png", "directory /no/such does not exist"),
    ("--waterfall=x.txt", "a figure file"),
])
def test_perftest_checks_its_output_files_before_the_run(arg: str, says: str,
                                                         tmp_path: Path) -> None:
    r = _nicsim("perftest", "ib_write_bw", "-n", "10", arg, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert r.stdout == ""  # nothing ran


def test_exec_python_is_nicsims_interpreter_without_an_active_venv(tmp_path: Path) -> None:
    """`nicsim exec -- python app.py` with the system's Python first on PATH (no venv
    activated): it runs with nicsim's interpreter, where pyverbs is nicsim's."""
    app = tmp_path / "app.py"
    app.write_text("import sys\nimport pyverbs.device as d\n"
                   "print(len(d.get_device_list()), sys.executable)\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "nicsim", "exec", "--", "python", str(app)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    n, exe = r.stdout.split()
    assert n == "2" and Path(exe).resolve() == Path(sys.executable).resolve()


def test_run_rtl_without_cocotb_names_the_extra(tmp_path: Path, monkeypatch, capsys) -> None:
    """`nicsim run --rtl` where the hdl extra is not installed: one line saying what to
    install, not a ModuleNotFoundError traceback."""
    import importlib.util

    from nicsim.cli import main

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("cocotb") else found(name, *a))
    root = Path(__file__).resolve().parents[1]
    assert main(["run", str(root / "examples" / "rtl.yaml"), "--rtl", "a", "--no-pcap"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cocotb" in err[0] and "[hdl]" in err[0], err
