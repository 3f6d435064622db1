"""`nicsim run examples/rtl.yaml --rtl a`: the example scenario co-simulated with host a's NIC
the RTL (roce_nic on Icarus) and host b's the model, through the command a user types. Every
WR both ways (WRITE, WRITE with immediate, READ, SEND, SEND with immediate, FETCH_ADD,
CMP_SWAP) must succeed with its bytes verified at the destination (an atomic: the original
value returned and the value left in the target's memory), the RTL's own counters must
account for the traffic,
and the pcap must hold only valid RoCEv2 frames. `--out` writes the result files of a model run
(summary, per-WR flows, the HTML report)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from nicsim.fabric.pcap import check_pcap

ROOT = Path(__file__).resolve().parents[1]


def test_the_example_scenario_runs_on_the_rtl_nic(tmp_path):
    pcap = tmp_path / "rtl.pcap"
    out = tmp_path / "results"
    p = subprocess.run([sys.executable, "-m", "nicsim.cli", "run", "examples/rtl.yaml",
                        "--rtl", "a", "--json", "--pcap", str(pcap), "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=1500, check=False)
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-3000:]
    r = json.loads(p.stdout)
    assert r["integrity"] == "OK" and r["wrs"]["errors"] == 0
    ops = [(w["src"], w["op"], w["status"]) for w in r["wrs_detail"]]
    atomics = ("fetch_add", "cmp_swap")
    assert {op for _s, op, _st in ops} == {"write", "write_imm", "read", "send", "send_imm",
                                           *atomics}
    assert {s for s, _op, _st in ops} == {"a", "b"}
    assert {s for s, op, _st in ops if op in atomics} == {"a", "b"}   # atomics both ways
    assert all(st == "SUCCESS" for _s, _op, st in ops), ops
    # (an atomic verifies 16 bytes: the value returned and the value left)
    assert r["verified_bytes"] == sum(16 if w["op"] in atomics else w["bytes"]
                                      for w in r["wrs_detail"])
    rtl = r["rtl"]
    assert rtl["late"] == 0
    c = rtl["counters"]
    assert c["comp_cqes"] == sum(1 for s, _op, _st in ops if s == "a")
    assert c["rx_drops"] == c["resp_naks"] == c["req_resent"] == 0
    assert c["resp_atomics"] == sum(1 for s, op, _st in ops if op in atomics and s == "b")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["integrity"] == "OK" and summary["wrs"]["total"] == len(ops)
    flows = (out / "flows.csv").read_text().splitlines()
    assert len(flows) == len(ops) + 1 and (out / "report.html").is_file()
    rep = check_pcap(pcap)
    assert rep.ok and rep.roce_frames == rep.frames > c["req_pkts"], rep.bad
