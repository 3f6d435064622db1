"""`nicsim run` on bad input: one line on stderr naming what is wrong, exit 2, nothing
created that the user did not ask for; a closed pipe ends quietly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nicsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
OK = "pcap: null\nops:\n  - {op: write, bytes: 64}\n"


def err_of(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert "Traceback" not in cap.err and not cap.out
    return err


@pytest.fixture
def scen(tmp_path):
    def make(text: str, name: str = "s.yaml") -> str:
        p = tmp_path / name
        p.write_text(text)
        return str(p)
    return make


def test_binary_scenario_file(capsys, tmp_path):
    p = tmp_path / "bin.yaml"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    assert "not a text file" in err_of(capsys, ["run", str(p)])


def test_negative_seed_in_file_and_on_the_command_line(capsys, scen):
    e = err_of(capsys, ["run", scen("seed: -1\n" + OK)])
    assert "seed: Input should be greater than or equal to 0" in e
    e = err_of(capsys, ["run", scen(OK), "--seed", "-1"])
    assert e.startswith("error: --seed -1: seed:")


def test_unknown_pcap_placeholder(capsys, scen):
    e = err_of(capsys, ["run", scen('pcap: "{foo}.pcap"\nops:\n  - {op: write}\n')])
    assert "pcap: unknown placeholder {foo} (only {name})" in e


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_pcap_that_cannot_be_written(capsys, scen):
    e = err_of(capsys, ["run", scen(OK), "--pcap", "/dev/full"])
    assert "/dev/full" in e and "No space left on device" in e


def test_contradictions_and_wrong_types_are_refused(capsys, scen):
    e = err_of(capsys, ["run", scen(OK), "--pcap", "x.pcap", "--no-pcap"])
    assert "not allowed with argument" in e
    assert "ops[0].imm: write does not use it" in err_of(
        capsys, ["run", scen("ops:\n  - {op: write, imm: 5}\n")])
    assert "ops[0].bytes: Input should be a valid integer" in err_of(
        capsys, ["run", scen("ops:\n  - {op: write, bytes: true}\n")])
    assert "seed: Input should be a valid integer" in err_of(
        capsys, ["run", scen('seed: "1"\n' + OK)])
    assert "ops[0].compare: fetch_add does not use it" in err_of(
        capsys, ["run", scen("ops:\n  - {op: fetch_add, compare: 1}\n")])
    assert "ops[0].op: Input should be" in err_of(
        capsys, ["run", scen("ops:\n  - {op: wirte}\n")])


def test_names_stay_inside_and_no_directories_appear(capsys, scen, tmp_path, monkeypatch):
    """A scenario name is a file name, never a path; --pcap and --out make no parent
    directories."""
    monkeypatch.chdir(tmp_path)
    e = err_of(capsys, ["run", scen("name: ../../escape\n" + OK)])
    assert e.endswith("name: letters, digits, '.', '_' and '-', starting with a letter or "
                      "digit, at most 100 (it names files)")
    deep = tmp_path / "no" / "such" / "dir"
    e = err_of(capsys, ["run", scen(OK), "--pcap", str(deep / "x.pcap")])
    assert f"directory {deep} does not exist" in e
    e = err_of(capsys, ["run", scen(OK), "--out", str(deep / "out")])
    assert f"directory {deep} does not exist" in e
    assert not (tmp_path / "no").exists()
    e = err_of(capsys, ["run", scen("pcap: elsewhere/{name}.pcap\nops:\n  - {op: write}\n")])
    assert "directory elsewhere does not exist" in e and not (tmp_path / "elsewhere").exists()


def test_set_overrides_any_field_and_names_a_bad_one(capsys, scen):
    assert main(["run", scen(OK), "--set", "link.rate_gbps=25", "--set", "ops[0].bytes=128",
                 "--json"]) == 0
    out = capsys.readouterr().out
    import json

    d = json.loads(out)
    assert d["configuration"]["link"]["rate_gbps"] == 25.0
    assert d["wrs_detail"][0]["bytes"] == 128
    e = err_of(capsys, ["run", scen(OK), "--set", "link.rate=25"])
    assert e == "error: --set link.rate=25: link.rate: Extra inputs are not permitted"
    e = err_of(capsys, ["run", scen(OK), "--set", "ops[3].bytes=1"])
    assert e == "error: --set ops[3].bytes: ops has 1 entries"
    e = err_of(capsys, ["run", scen(OK), "--set", "depth=many"])
    assert e.startswith("error: --set depth=many: depth: Input should be a valid integer")


def test_a_closed_pipe_ends_quietly(tmp_path):
    """`nicsim run --json | head -1`: no BrokenPipeError traceback, exit 141 (SIGPIPE's).
    (The JSON of 2,000 WRs is far more than a pipe holds, so the writer meets the closed
    pipe whatever the timing.)"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    (tmp_path / "s.yaml").write_text("pcap: null\nops:\n  - {op: write, bytes: 8, repeat: 2000}\n")
    p = subprocess.run(
        f"{sys.executable} -m nicsim.cli run s.yaml --json | head -1; "
        f"echo \"status ${{PIPESTATUS[0]}}\"",
        shell=True, executable="/bin/bash", capture_output=True, text=True, env=env,
        cwd=tmp_path, timeout=300)
    assert p.stdout.splitlines() == ["{", "status 141"]
    assert p.stderr == ""


def test_rtl_refuses_what_the_rtl_nic_does_not_do(capsys, scen, monkeypatch):
    """`run --rtl`: the scenario is checked against roce_nic before any simulator starts."""
    from nicsim.scenario import rtl
    from nicsim.scenario.schema import OpKind, ScenarioError, load_scenario

    ten = "link: {rate_gbps: 10}\n"  # what the 64-bit RTL's port carries
    # the RTL sends and executes atomics: either side may send them
    both = scen("pcap: null\nops:\n  - {op: fetch_add, src: b, dst: a}\n"
                "  - {op: cmp_swap, src: b, dst: a}\n  - {op: fetch_add}\n"
                "  - {op: cmp_swap}\n" + ten)
    rtl.check(load_scenario(both), "a")
    # an operation the RTL does not do (none of today's: one taken away) is named
    monkeypatch.setattr(rtl, "RTL_REQUESTER_OPS", rtl.RTL_REQUESTER_OPS - {OpKind.FETCH_ADD})
    assert err_of(capsys, ["run", both, "--rtl", "a"]).endswith(
        "ops[2].op: fetch_add a>b: the RTL NIC's requester does not do fetch_add (it does "
        "write, write_imm, read, send, send_imm, cmp_swap)")
    monkeypatch.undo()
    assert "--rtl b: the RTL NIC takes the first host's place ('a')" in \
        err_of(capsys, ["run", scen(OK + ten), "--rtl", "b"])
    # a link faster than the RTL's port would overflow its MAC
    assert err_of(capsys, ["run", scen(OK), "--rtl", "a"]).endswith(
        "link.rate_gbps: 100 is faster than the RTL NIC's 64-bit port carries at 250 MHz (its "
        "MAC cannot be held off): set link: {rate_gbps: 10} or less, or --rtl-width 512")
    rtl.check(load_scenario(scen(OK)), "a", 512)  # 128 Gb/s: 100 Gb/s Ethernet
    with pytest.raises(ScenarioError, match=r"set link: \{rate_gbps: 100\} or less$"):
        rtl.check(load_scenario(scen(OK + "link: {rate_gbps: 200}\n")), "a", 512)
    star = OK + ten + "topology: {shape: star, hosts: 3}\n"
    assert "--rtl: the RTL NIC runs two-host scenarios (one cable); this one has 3 hosts" in \
        err_of(capsys, ["run", scen(star), "--rtl", "a"])
    inl = ("pcap: null\nqp: {max_inline_data: 64}\n"
           "streams:\n  - {bytes: 64, inline: true, count: 4}\n" + ten)
    assert "streams[0].inline: the RTL NIC has no inline data" in \
        err_of(capsys, ["run", scen(inl), "--rtl", "a"])
    assert err_of(capsys, ["run", scen(OK + ten), "--rtl", "a", "--breakdown"]) == (
        "error: --breakdown is not available with --rtl: it traces the model NIC's stages, and "
        "the RTL NIC has no such trace")


def test_rtl_warns_of_long_transport_timers_under_loss():
    """The RTL simulates every cycle of a transport timer the model skips: with link faults a
    long qp.timeout gets one line saying what an expiry costs, and qp.timeout 0 that a lost
    tail is never resent; a short timer or a clean link gets none."""
    from nicsim.scenario import rtl
    from nicsim.scenario.load import load

    def warn(*sets: str) -> str | None:
        sc, _ = load(str(ROOT / "examples" / "rtl.yaml"), [(f"--set {s}", s) for s in sets])
        return rtl.timer_warning(sc)

    assert warn() is None and warn("link.faults.loss=0.1", "qp.timeout=4") is None
    assert warn("link.faults.loss=0.1") == (
        "warning: --rtl with link faults: each transport-timer expiry (a lost last packet or "
        "ACK) is qp.timeout 14 = 67.1 ms = 16.8 M RTL cycles, about 117 min of Icarus; "
        "`--set qp.timeout=4` (65.5 us) keeps it to seconds")
    assert "qp.timeout 0 (the transport timer is off)" in warn("link.faults.corrupt=0.01",
                                                               "qp.timeout=0")


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ei:
        main(["--help"])
    assert ei.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("run", "sweep", "profiles", "perftest", "exec", "pcap"):
        assert f"\n    {cmd} " in out, cmd
