"""Congestion control as plug-ins: every hook of RateControl is called on a real run, a DCQCN
NIC wires none of the new ones (nothing changes, nothing costs), the scenario's `cc:` names
algorithms and parameters with one-line errors, and a user's algorithm loads from a Python
file named in the scenario (examples/my_cc.py, the how-to's example)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from nicsim.cli import main as cli_main
from nicsim.fabric.switch import PfcConfig, SwitchConfig
from nicsim.fabric.topology import Shape, TopologySpec
from nicsim.nic.cc import (
    ALGORITHMS,
    CcAlgorithm,
    CcConfig,
    CcConfigError,
    CnpConfig,
    RateControl,
    Signal,
    cc_from_dict,
)
from nicsim.nic.config import NicConfig
from nicsim.scenario.schema import ScenarioError, load_scenario
from nicsim.workloads.bulk import incast
from nicsim.world import World

ROOT = Path(__file__).resolve().parent.parent


class Counting(RateControl):
    """Every signal, counted; a CNP limits the QP (so that on_sent comes) and arms a timer."""

    name = "counting"
    signals = Signal.CNP | Signal.RTT | Signal.NAK | Signal.SENT | Signal.INT
    seen: Counter[str] = Counter()

    def on_cnp(self, qp):  # type: ignore[no-untyped-def]
        self.seen["cnp"] += 1
        if qp.ccs is None:
            qp.ccs = object()
            self.set_rate(qp, 50.0)
            self.start_timer(qp, 20_000.0, 7)

    def on_ack(self, qp, psn, rtt_ns):  # type: ignore[no-untyped-def]
        self.seen["ack"] += 1
        if rtt_ns is not None:
            assert 0 < rtt_ns < 10e6
            self.seen["rtt"] += 1

    def on_nak(self, qp, psn, syndrome):  # type: ignore[no-untyped-def]
        assert syndrome >> 5 in (1, 3)
        self.seen["nak"] += 1

    def on_int(self, qp, psn, hops):  # type: ignore[no-untyped-def]
        assert len(hops) == 1 and hops[0].rate_gbps == 100.0
        self.seen["int"] += 1

    def on_sent(self, qp, nbytes):  # type: ignore[no-untyped-def]
        self.seen["sent"] += 1

    def on_timer(self, qp, kind):  # type: ignore[no-untyped-def]
        assert kind == 7
        self.seen["timer"] += 1
        self.forget(qp)
        self.rate_changed(qp)


def test_every_hook_is_called_on_a_real_run():
    Counting.seen = Counter()
    cc = CcConfig(CcAlgorithm.CUSTOM, "counting", cnp=CnpConfig(interval_us=5.0),
                  impl=Counting)
    # A small buffer without PFC: drops, so go-back-N NAKs too; INT on the switch.
    sw = SwitchConfig(buffer_bytes=300_000, pfc=PfcConfig(enabled=False), int_telemetry=True)
    w = World.from_topology(TopologySpec(Shape.STAR, hosts=5), nic=NicConfig(cc=cc), switch=sw)
    r = incast(w, ["h1", "h2", "h3", "h4"], "h0", msgs=16, limit_ns=2e9)
    assert r.ok, r.errors
    seen = Counting.seen
    assert all(seen[k] > 0 for k in ("cnp", "ack", "rtt", "nak", "int", "sent", "timer")), seen
    acks = sum(w.nics[f"h{i}"].counters()["completer.acks"] for i in range(1, 5))
    assert seen["ack"] <= acks + sum(w.nics[f"h{i}"].counters()["completer.naks"]
                                     for i in range(1, 5))


def test_a_dcqcn_nic_wires_none_of_the_new_hooks():
    w = World.from_topology(TopologySpec(Shape.STAR, hosts=3),
                            nic=NicConfig(cc=cc_from_dict("dcqcn_mlx")))
    for nic in w.nics.values():
        assert nic.completer.on_acked is None and nic.completer.on_nak is None
        assert nic.requester._sent_psn is None and nic.responder.int_echo is None
        assert nic._int is None
    assert not w.switches["sw0"].cfg.int_telemetry


def test_registry_and_presets():
    assert {a.value for a in ALGORITHMS} == {"dcqcn", "hpcc", "timely", "dctcp"}
    for name in ("hpcc", "timely", "dctcp"):
        c = cc_from_dict(name)
        assert c.algorithm.value == name and c.params is not None
    c = cc_from_dict({"algorithm": "hpcc", "eta": 0.9, "max_stage": 3, "cnp": {"dscp": 40}})
    assert c.params.eta == 0.9 and c.params.max_stage == 3 and c.cnp.dscp == 40
    assert cc_from_dict({"algorithm": "dcqcn", "g": 0.5}).dcqcn.g == 0.5  # preset dcqcn_mlx
    assert cc_from_dict({"algorithm": "timely", "alpha": 1}).params.alpha == 1.0


@pytest.mark.parametrize("spec,msg", [
    ({"algorithm": "swift"}, "cc.algorithm: unknown algorithm 'swift' (known: none, dcqcn, "
     "hpcc, timely, dctcp; or cc.module: a Python file of your own)"),
    ({"algorithm": "hpcc", "g": 0.5}, "cc.g: unknown parameter (known: preset, algorithm, "
     "module, trace, pacing_jitter, cnp, base_rtt_us, eta, max_stage, min_rate_mbps, "
     "rai_mbps)"),
    ({"algorithm": "hpcc", "eta": 1.5}, "cc.eta: must be in (0, 1]"),
    ({"algorithm": "hpcc", "max_stage": 2.5}, "cc.max_stage: must be an integer, not 2.5"),
    ({"algorithm": "timely", "beta": "x"}, "cc.beta: must be a number, not 'x'"),
    ({"algorithm": "dctcp", "preset": "hpcc"}, "cc.preset: 'hpcc' is not a preset of dctcp"),
    ({"module": "./nowhere.py"}, "cc.module: ./nowhere.py: No such file or directory"),
    ({"module": "x.py", "algorithm": "hpcc"}, "cc.module: a user's algorithm takes no preset"),
])
def test_bad_cc_settings_are_one_line_errors(spec, msg):
    with pytest.raises(CcConfigError) as ei:
        cc_from_dict(spec)
    assert msg in str(ei.value) and "\n" not in str(ei.value), str(ei.value)


# -- a user's algorithm from a file ------------------------------------------------------------


def test_the_example_algorithm_runs_from_its_scenario(capsys):
    sc = load_scenario(ROOT / "examples/custom-cc.yaml")
    cc = cc_from_dict(sc.cc)
    assert cc.algorithm is CcAlgorithm.CUSTOM and cc.impl.name == "aimd"
    assert cc.params.beta == 0.3 and cc.params.step_mbps == 1000
    assert cli_main(["run", str(ROOT / "examples/custom-cc.yaml"), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] and rep["integrity"] == "OK"
    # the algorithm acted: the senders counted CNPs (its on_cnp)
    assert sum(c.get("cc.cnp_received", 0) for c in rep["counters"].values()) > 0


def test_the_how_to_shows_the_example_file_itself():
    page = (ROOT / "docs/how-to/add-cc.md").read_text()
    assert '--8<-- "examples/my_cc.py"' in page
    assert len((ROOT / "examples/my_cc.py").read_text().splitlines()) <= 50


def test_a_module_path_is_from_the_scenario_directory(tmp_path):
    d = tmp_path / "sub"
    d.mkdir()
    (d / "cc.py").write_text((ROOT / "examples/my_cc.py").read_text())
    (d / "s.yaml").write_text("name: s\ncc: {module: ./cc.py, beta: 0.25}\n"
                              "patterns: [{kind: incast, bytes: 100000}]\n")
    sc = load_scenario(d / "s.yaml")
    assert Path(sc.cc["module"]) == d / "cc.py"
    assert cc_from_dict(sc.cc).params.beta == 0.25


BAD_FILES = {
    "syntax.py": ("def f(:\n", "cc.module: {p}:1: invalid syntax"),
    "raises.py": ("x = 1\nraise RuntimeError('no luck')\n",
                  "cc.module: {p}:2: RuntimeError: no luck"),
    "empty.py": ("x = 1\n", "cc.module: {p}: defines no subclass of nicsim.nic.cc.RateControl"),
    "two.py": ("from nicsim.nic.cc import RateControl\nclass A(RateControl): pass\n"
               "class B(RateControl): pass\n",
               "cc.module: {p}: defines 2 RateControl classes (A, B): set ALGORITHM to the one "
               "to use"),
    "params.py": ("from dataclasses import dataclass\nfrom nicsim.nic.cc import RateControl\n"
                  "@dataclass(frozen=True)\nclass P:\n    k: float = 1.0\n"
                  "class A(RateControl):\n    Params = P\n",
                  "cc.k: must be a number, not 'x'"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_bad_user_file_is_one_error_line_never_a_traceback(name, tmp_path, capsys):
    text, want = BAD_FILES[name]
    (tmp_path / name).write_text(text)
    extra = ", k: x" if name == "params.py" else ""
    s = tmp_path / "s.yaml"
    s.write_text(f"name: s\ncc: {{module: ./{name}{extra}}}\npcap: null\n"
                 f"patterns: [{{kind: incast, bytes: 100000}}]\n")
    with pytest.raises(ScenarioError) as ei:
        load_scenario(s)
    msg = str(ei.value)
    assert want.format(p=str(tmp_path / name)) in msg and "\n" not in msg, msg
    assert cli_main(["run", str(s)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
