"""Fabric scenarios from the command line: `topology`, `switch`, `cc` and `qp.dscp` in a file,
one pcap per tapped port, switch and congestion-control figures in the report, and bad
fabric settings as one line each (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nicsim.fabric.pcap import check_pcap
from nicsim.scenario.runner import Runner
from nicsim.scenario.schema import parse_scenario

INCAST = """
name: incast
topology: {shape: star, hosts: 5, taps: [h0.eth0, sw0.p1]}
switch: {buffer_bytes: 1048576}
cc: {preset: dcqcn_paper, trace: true}
qp: {path_mtu: 4096, dscp: 26}
patterns:
  - {kind: incast, bytes: 1000000, rounds: 1}
"""


def nicsim(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nicsim.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_incast_scenario_runs_on_a_star_with_pfc_and_dcqcn(tmp_path):
    f = tmp_path / "incast.yaml"
    f.write_text(INCAST)
    p = nicsim("run", str(f), "--json", "--pcap", str(tmp_path / "incast.pcap"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["integrity"] == "OK" and r["verified_bytes"] == 4 * 1_000_000
    sw = r["switches"]["sw0"]
    assert sw["dropped.headroom_overflow"] == sw["dropped.buffer_full"] == 0
    assert sw["ecn_marked"] > 0
    assert sum(sw[f"p{p}.pause_sent"] for p in range(5)) > 0  # the 1 MiB buffer fills
    c = r["counters"]
    assert c["h0"]["np.cnp_sent"] > 0 and c["h1"]["cc.cnp_received"] > 0
    # One capture per tapped port: CNPs leave h0, PAUSE frames leave the switch toward h1.
    pcaps = sorted(Path(x).name for x in r["pcaps"])
    assert pcaps == ["incast.h0.eth0.pcap", "incast.sw0.p1.pcap"]
    rep_h0 = check_pcap(tmp_path / "incast.h0.eth0.pcap")
    rep_sw = check_pcap(tmp_path / "incast.sw0.p1.pcap")
    assert rep_h0.ok and rep_sw.ok and rep_sw.pfc_frames > 0
    frames = (tmp_path / "incast.h0.eth0.pcap").read_bytes()
    assert b"\x81\x00\xff\xff" in frames  # a CNP's BTH: opcode 0x81, flags 0, P_Key


def test_report_shows_the_fabric_and_time_series(tmp_path):
    from nicsim.results import output

    sc = parse_scenario(INCAST)
    output.prepare(tmp_path / "out")
    r = Runner(sc, str(tmp_path / "x.pcap"), tmp_path / "out").run()
    from nicsim.results.report import text_report

    text = text_report(r)
    assert "switch sw0: ECN-marked" in text and "congestion control: CNPs sent" in text
    assert {p.name for p in r.probes} >= {"switch_queue", "pause", "cc_rate"}
    series = (tmp_path / "out" / "timeseries" / "cc_rate.csv").read_text().splitlines()
    assert series[0] == "time_us,qp,rate_gbps" and len(series) > 1


def test_default_taps_are_every_host_port(tmp_path):
    sc = parse_scenario("""
topology: {shape: leaf_spine, leaves: 2, spines: 2, hosts_per_leaf: 2}
ops: [{op: write, bytes: 5000, src: h0, dst: h3}]
""")
    r = Runner(sc, str(tmp_path / "t.pcap")).run()
    assert r.ok
    assert sorted(Path(p).name for p in r.pcaps) == [f"t.h{i}.eth0.pcap" for i in range(4)]
    assert check_pcap(tmp_path / "t.h0.eth0.pcap").roce_frames > 0


@pytest.mark.parametrize("text,msg", [
    ("topology: {shape: fat_tree, k: 5}", "topology.k: 5 must be an even number >= 2"),
    ("topology: {shape: ring}", "topology.shape"),
    ("topology: {shape: star, hosts: 3}\nswitch: {buffer_bytes: 20000}",
     "switch.buffer_bytes: 20000 bytes is less than one 9216-byte frame plus"),
    ("topology: {shape: star, hosts: 3}\nswitch: {pfc: {headroom_bytes: 1000}}",
     "switch.pfc.headroom_bytes: 1000 bytes cannot hold"),
    ("topology: {shape: star}\nswitch: {red: {kmin_bytes: 300000, kmax_bytes: 200000}}",
     "switch.red.kmin_bytes: Kmin 300000 is above Kmax 200000"),
    ("cc: dcqcn_fast", "cc.preset: unknown preset 'dcqcn_fast'"),
    ("cc: {preset: dcqcn_mlx, g: 2}", "cc.g: must be in (0, 1]"),
    ("topology: {shape: star, taps: [h9.eth0]}", "topology.taps[0]: no port 'h9.eth0'"),
    ("topology: {shape: star, link_faults: {h0-sw9: {loss: 0.1}}}",
     "topology.link_faults: no link named 'h0-sw9'"),
    ("topology: {shape: star}\nops: [{op: write, dst: b}]", "ops[0].dst: no host 'b'"),
])
def test_bad_fabric_settings_are_one_line_and_exit_2(tmp_path, text, msg):
    f = tmp_path / "bad.yaml"
    if "ops:" not in text:
        text += "\nops: [{op: write}]"
    f.write_text(text)
    p = nicsim("run", str(f), "--no-pcap", cwd=tmp_path)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0], p.stderr
    assert "Traceback" not in p.stderr
