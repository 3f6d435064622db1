"""`nicsim run --rtl HOST`: a scenario with one host's NIC the RTL (hdl_tb/rtl/roce_nic.v) and
the other's the SimPy model, in one co-simulated world (nicsim.cosim).

The scenario is checked here, before anything is built, against what the RTL NIC does (the
docs/tutorials/rtl.md): two hosts on one cable, the RTL as the first of them, and only the
operations its requester and responder implement. The run itself happens in a cocotb process
(nicsim.apps.rtl_scenario) that the command starts on Icarus Verilog (or Verilator): the same
Runner, the same report, the same integrity check of every byte; the simulators' own output
goes to a log file next to the build.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from nicsim.cosim.rates import CLK_NS, port_rate_gbps
from nicsim.nic.requester import transport_timeout_ns
from nicsim.scenario import build
from nicsim.scenario.schema import FaultSpec, OpKind, Scenario, ScenarioError

# What roce_nic's requester sends and its responder answers (docs/tutorials/rtl.md, "What roce_nic
# does"): listed, so that an operation the scenarios gain later is refused until the RTL does it.
RTL_REQUESTER_OPS = frozenset({OpKind.WRITE, OpKind.WRITE_IMM, OpKind.SEND, OpKind.SEND_IMM,
                               OpKind.READ, OpKind.CMP_SWAP, OpKind.FETCH_ADD})
RTL_RESPONDER_OPS = RTL_REQUESTER_OPS
WIDTHS = (64, 512)
# RTL cycles per CPU second of a co-simulation on Icarus (docs/tutorials/cosim.md, "Speed";
# Verilator is 2.5-5x faster): what the warning below estimates with.
ICARUS_CYCLES_PER_S = 2_400
ENV_SCENARIO = "NICSIM_RTL_SCENARIO"  # JSON: source, overrides, base, pcap, result file


class RtlError(Exception):
    """The RTL run cannot start (tools missing) or did not finish; one line for the user."""


def check(sc: Scenario, host: str, width: int = 64) -> None:
    """ScenarioError naming the first thing in `sc` the RTL NIC (`width` bits) cannot run as
    `host`."""
    names = build.host_names(sc)
    port = port_rate_gbps(width, CLK_NS)
    if sc.link.rate_gbps > port:
        wider = ", or --rtl-width 512" if width < 512 else ""
        raise ScenarioError(
            f"link.rate_gbps: {sc.link.rate_gbps:g} is faster than the RTL NIC's {width}-bit "
            f"port carries at {1000 / CLK_NS:g} MHz (its MAC cannot be held off): set "
            f"link: {{rate_gbps: {port:g}}} or less{wider}")
    if len(names) != 2 or build.shaped(sc).shape.value != "back_to_back":
        raise ScenarioError(f"--rtl: the RTL NIC runs two-host scenarios (one cable); this one "
                            f"has {len(names)} hosts on a {sc.topology.shape} topology")
    if host != names[0]:
        raise ScenarioError(f"--rtl {host}: the RTL NIC takes the first host's place "
                            f"({names[0]!r}); hosts are {', '.join(names)}")
    for field, specs in (("ops", sc.ops), ("streams", sc.streams)):
        for i, s in enumerate(specs):
            src = s.src or names[0]
            who, ops = (("requester", RTL_REQUESTER_OPS) if src == host
                        else ("responder", RTL_RESPONDER_OPS))
            if s.op not in ops:
                raise ScenarioError(
                    f"{field}[{i}].op: {s.op.value} {src}>{s.dst or names[1]}: the RTL NIC's "
                    f"{who} does not do {s.op.value} (it does {_names(ops)})")
            if getattr(s, "inline", False) and src == host:
                raise ScenarioError(f"{field}[{i}].inline: the RTL NIC has no inline data")


def timer_warning(sc: Scenario) -> str | None:
    """One line when the scenario loses packets and its QPs' transport timer is long: the
    model skips idle time, but the RTL simulates every cycle of the timer, so each expiry (a
    lost last packet or ACK) costs RTL cycles in proportion to qp.timeout."""
    faults = [sc.link.faults, *sc.topology.link_faults.values()]
    if all(f.loss == 0 and f.corrupt == 0 for f in faults if f != FaultSpec()):
        return None
    t = sc.qp.timeout
    ns = transport_timeout_ns(t)
    if ns is None:
        return ("warning: --rtl with link faults and qp.timeout 0 (the transport timer is off): "
                "a lost last packet or ACK is never resent and its WR never completes; "
                "`--set qp.timeout=4` (65.5 us) retries")
    cycles = ns / CLK_NS
    minutes = cycles / ICARUS_CYCLES_PER_S / 60
    if minutes < 1:
        return None
    return (f"warning: --rtl with link faults: each transport-timer expiry (a lost last packet "
            f"or ACK) is qp.timeout {t} = {ns / 1e6:,.1f} ms = {cycles / 1e6:,.1f} M RTL cycles, "
            f"about {minutes:,.0f} min of Icarus; `--set qp.timeout=4` (65.5 us) keeps it to "
            f"seconds")


def _names(ops: frozenset[OpKind]) -> str:
    return ", ".join(o.value for o in OpKind if o in ops)


def _tools(sim: str) -> None:
    from nicsim.cosim import build

    if not (build.RTL / "roce_nic.v").is_file():
        raise RtlError("--rtl needs nicsim's source tree (hdl_tb/ next to nicsim/): run it "
                       "from a clone of the repository")
    missing = [m for m in ("cocotb", "cocotbext.axi") if importlib.util.find_spec(m) is None]
    if missing:
        raise RtlError(f"--rtl needs {' and '.join(missing)} (the hdl extra): `make test` "
                       f"installs them, or `pip install -e '.[hdl]'`")
    if not build.simulator_available(sim):
        raise RtlError(f"--rtl needs the {sim} simulator: `make tools` installs Icarus Verilog "
                       f"(`iverilog`); Verilator comes with the hdl extra")


def run(source: str, overrides: list[str], base: Path | None, pcap: str | None, width: int,
        sim: str = "icarus", out: Path | None = None) -> tuple[str, dict, bool, str]:
    """Run the scenario with the RTL as its first host; (text report, JSON report, ok, log
    path). RtlError if it cannot start or the co-simulation failed."""
    _tools(sim)
    from nicsim.cosim.build import SIM_BUILD

    out_dir = SIM_BUILD / sim / f"run_scenario_w{width}"
    out_dir.mkdir(parents=True, exist_ok=True)
    result = out_dir / "result.json"
    result.unlink(missing_ok=True)
    log = out_dir / "run.log"
    job = {"source": source, "overrides": overrides, "width": width, "sim": sim,
           "base": str(base) if base else None,
           "pcap": str(Path(pcap).resolve()) if pcap else None, "result": str(result),
           "out": str(out.resolve()) if out else None, "build": str(out_dir / "build")}
    env = dict(os.environ, **{ENV_SCENARIO: json.dumps(job)})
    with log.open("w") as f:
        proc = subprocess.run([sys.executable, "-m", "nicsim.apps.rtl_scenario"], env=env,
                              stdout=f, stderr=subprocess.STDOUT, check=False)
    if not result.is_file():
        raise RtlError(f"--rtl: the co-simulation ended (exit status {proc.returncode}) without "
                       f"a result; its output is in {log}")
    r = json.loads(result.read_text())
    if "error" in r:
        raise RtlError(f"--rtl: {r['error']} (the co-simulation's output is in {log})")
    return r["text"], r["json"], r["ok"], str(log)
