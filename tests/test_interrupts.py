"""Ctrl-C and reused result folders: a run stops at once with one line and exit status 130,
leaving what it wrote clearly marked incomplete; a sweep keeps the points it finished; `--out`
refuses a folder with other things in it unless told to replace an earlier run's results."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nicsim.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _interrupt(args: list[str], after_s: float, cwd: Path) -> tuple[int, str, float]:
    p = subprocess.Popen([sys.executable, "-m", "nicsim", *args], cwd=cwd,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(after_s)
    t = time.monotonic()
    p.send_signal(signal.SIGINT)
    _out, err = p.communicate(timeout=120)
    return p.returncode, err, time.monotonic() - t


def test_ctrl_c_stops_a_run_and_marks_its_folder_incomplete(tmp_path: Path) -> None:
    code, err, took = _interrupt(["run", str(ROOT / "examples" / "websearch.yaml"), "--quiet",
                                  "--no-pcap", "--out", "res"], 4.0, tmp_path)
    assert code == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "interrupted"
    assert took < 10
    assert "interrupted" in (tmp_path / "res" / "INCOMPLETE").read_text()
    assert not (tmp_path / "res" / "report.html").exists()


def test_ctrl_c_stops_perftest_with_one_line(tmp_path: Path) -> None:
    code, err, _ = _interrupt(["perftest", "ib_write_bw", "-a", "-n", "5000"], 3.0, tmp_path)
    assert code == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "interrupted"


def test_ctrl_c_stops_a_sweep_promptly_and_keeps_what_finished(tmp_path: Path) -> None:
    code, err, took = _interrupt(["sweep", str(ROOT / "examples" / "load-sweep.yaml"),
                                  "--out", "sw", "--workers", "2"], 6.0, tmp_path)
    assert code == 130 and "Traceback" not in err, err
    assert took < 15
    assert "interrupted after" in err


def test_out_refuses_a_folder_with_things_in_it_unless_forced(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "res"
    assert main(["run", "--quiet", "--no-pcap", "--out", str(out)]) == 0
    # An earlier run's series this run does not write must not be linked by its report.
    (out / "timeseries" / "cc_rate.csv").write_text("time_us,qp,rate_gbps\n")
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(["run", "--quiet", "--no-pcap", "--out", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["run", "--quiet", "--no-pcap", "--out", str(out), "--force"]) == 0
    report = (out / "report.html").read_text()
    assert "cc_rate" not in report
    assert (out / "notes.txt").read_text() == "mine"  # not ours: it stays
    assert not (out / "INCOMPLETE").exists()


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NICSIM_CHECK", raising=False)
    monkeypatch.delenv("NICSIM_GENERAL_PATH", raising=False)
