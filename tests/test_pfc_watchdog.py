"""A PFC storm never hangs the fabric (second protection round).

One host keeps sending PFC pauses. The switch port toward it stops, the queue there fills,
the switch pauses the senders whose frames fill it, and their other traffic (to innocent
hosts, on the same lossless priority) stops too. Production fabrics break this with a PFC
watchdog: a lossless queue that stays paused with frames waiting for a detection time is
declared stormed and its frames are dropped until the pauses stop (SONiC's pfcwd, Arista's
and Juniper's watchdogs: detection and restoration around 200 ms). The NIC has one for its
own transmit queues. And an RC QP whose frames cannot leave keeps its transport timer
running, so it ends in RETRY_EXC_ERR rather than waiting forever (IBA 9.7.6.1.1).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from nicsim.driver import enums as e

from nicsim.fabric.pfc import PfcWatchdog
from nicsim.fabric.switch import PfcConfig, SwitchConfig
from nicsim.fabric.topology import Shape, TopologySpec
from nicsim.nic.config import NicConfig
from nicsim.testing.pfc import MIB, link_pair, poll_until, post_write, start_storm
from nicsim.world import World


def _world(switch: SwitchConfig | None = None, nic: NicConfig | None = None) -> World:
    return World.from_topology(TopologySpec(shape=Shape.STAR, hosts=3), seed=1, nic=nic,
                               switch=switch or SwitchConfig(buffer_bytes=2 * MIB),
                               mem_size=64 << 20)


def test_a_pfc_storm_does_not_stop_an_innocent_flow() -> None:
    w = _world()
    to_victim, _v = link_pair(w, "h0", "h2")  # traffic into the storming host
    innocent, _i = link_pair(w, "h0", "h1")
    start_storm(w, "h2")
    post_write(to_victim, _v, 4 * MIB, 1)
    w.hosts["h0"].spend(50_000)  # the queue toward h2 fills, the switch pauses h0
    post_write(innocent, _i, 256 << 10, 2)
    (wc,) = poll_until(innocent, w.env.now + 1e9)
    assert (wc.wr_id, wc.status) == (2, e.IBV_WC_SUCCESS)
    sw = w.switches["sw0"].counters()
    port = next(p for p in range(3) if sw[f"p{p}.pause_received"])
    assert sw[f"p{port}.q3.pfc_wd.storms"] >= 1
    assert sw[f"p{port}.q3.pfc_wd.dropped"] > 0


def test_without_watchdogs_the_stuck_qps_end_in_retry_exceeded() -> None:
    """The watchdogs off: nothing breaks the storm, but nothing waits for ever either. Both
    QPs of the paused sender, the one whose frames sit in its port and the one whose WQE
    never got a turn, end with RETRY_EXC_ERR within their retry budget."""
    off = PfcWatchdog(enabled=False)
    w = _world(SwitchConfig(buffer_bytes=2 * MIB, pfc=PfcConfig(watchdog=off)),
               NicConfig(pfc_watchdog=off))
    to_victim, v = link_pair(w, "h0", "h2", timeout=12, retry_cnt=3)
    innocent, i = link_pair(w, "h0", "h1", timeout=12, retry_cnt=3)
    start_storm(w, "h2")
    post_write(to_victim, v, 4 * MIB, 1)
    w.hosts["h0"].spend(50_000)
    post_write(innocent, i, 256 << 10, 2)
    post_write(innocent, i, 4096, 3)
    budget = 5 * 4096 * (1 << 12)  # (retry_cnt + 1) timeouts, and one more
    got = poll_until(innocent, w.env.now + budget) + poll_until(innocent, w.env.now + budget)
    assert [(wc.wr_id, wc.status) for wc in got] == [(2, e.IBV_WC_RETRY_EXC_ERR),
                                                     (3, e.IBV_WC_WR_FLUSH_ERR)]
    (wc,) = poll_until(to_victim, w.env.now + budget)
    assert wc.status == e.IBV_WC_RETRY_EXC_ERR
    assert w.nics["h0"].counters()["requester.send_stalls"] >= 1


def test_the_nic_watchdog_stops_honouring_a_peer_that_never_resumes() -> None:
    """Back to back: the peer itself storms. The NIC's transmit queue of that priority is
    paused with frames waiting for the detection time; then it ignores the peer's pauses
    (counted) and sends, and its WRITE completes. Once the pauses stop, the priority is
    restored: a later pause holds it again."""
    wd = PfcWatchdog(detect_ns=2e6, restore_ns=1e6)
    w = World.two_hosts(nic=NicConfig(pfc_classes=(3,), pfc_watchdog=wd))
    a, b = link_pair(w, "a", "b")
    storm = start_storm(w, "b", stop_ns=w.env.now + 5e6)
    post_write(a, b, 1 * MIB, 1)
    t0 = w.env.now
    (wc,) = poll_until(a, t0 + 50e6)
    assert wc.status == e.IBV_WC_SUCCESS
    assert w.env.now - t0 >= wd.detect_ns  # held for the detection time, no longer
    c = w.nics["a"].counters()
    assert c["port.pfc_wd_storms"] == 1 and c["port.pfc_wd_pauses_ignored"] > 0
    w.hosts["a"].spend(10e6)  # the storm stopped at 5 ms: restored a restoration time later
    assert w.nics["a"].counters()["port.pfc_wd_restores"] == 1
    assert not w.nics["a"].port.wd_storm[3]
    assert storm.sent > 0


def test_congestion_pauses_are_not_a_storm() -> None:
    """An incast on a small buffer: the switch pauses its senders over and over, but frames
    keep leaving every queue, so no watchdog fires, and every byte arrives."""
    wd = PfcWatchdog(detect_ns=20e3, restore_ns=20e3)  # short: pauses last longer than it
    w = World.from_topology(TopologySpec(shape=Shape.STAR, hosts=4), seed=1,
                            nic=NicConfig(pfc_watchdog=wd),
                            switch=SwitchConfig(buffer_bytes=512 << 10,
                                                pfc=PfcConfig(watchdog=wd)),
                            mem_size=64 << 20)
    pairs = [link_pair(w, f"h{i}", "h0") for i in (1, 2, 3)]
    for n, (a, b) in enumerate(pairs):
        post_write(a, b, 2 * MIB, n)
    for a, _b in pairs:
        (wc,) = poll_until(a, w.env.now + 100e6)
        assert wc.status == e.IBV_WC_SUCCESS
    sw = w.switches["sw0"].counters()
    assert sum(sw[f"p{p}.pause_sent"] for p in range(4)) > 0  # it did pause
    assert not any(v for k, v in sw.items() if k.endswith("pfc_wd.storms"))
    assert all(w.nics[h].counters().get("port.pfc_wd_storms", 0) == 0 for h in w.nics)


def test_a_stormed_switch_queue_is_restored_when_the_storm_ends() -> None:
    wd = PfcWatchdog(detect_ns=1e6, restore_ns=1e6)
    w = _world(SwitchConfig(buffer_bytes=2 * MIB, pfc=PfcConfig(watchdog=wd)),
               NicConfig(pfc_watchdog=PfcWatchdog(enabled=False)))
    to_victim, v = link_pair(w, "h0", "h2")
    start_storm(w, "h2", stop_ns=w.env.now + 3e6)
    post_write(to_victim, v, 1 * MIB, 1)
    (wc,) = poll_until(to_victim, w.env.now + 2e9)
    sw = w.switches["sw0"].counters()
    port = next(p for p in range(3) if sw[f"p{p}.pause_received"])
    assert sw[f"p{port}.q3.pfc_wd.storms"] == 1
    assert sw[f"p{port}.q3.pfc_wd.restores"] == 1
    assert sw[f"p{port}.q3.pfc_wd.pauses_ignored"] > 0
    # Its frames were dropped while stormed; the transport sent them again after the storm.
    assert wc.status == e.IBV_WC_SUCCESS
    assert w.nics["h0"].counters()["requester.retransmitted_packets"] > 0
    assert v.mr.read(16) == to_victim.mr.read(16)


def test_a_scenario_with_a_pfc_storm_ends_by_itself_and_reports_the_watchdog(
        tmp_path: Path) -> None:
    example = Path(__file__).parent.parent / "examples" / "pfc-storm.yaml"
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "nicsim.cli", "run", str(example), "--json",
                        "--no-pcap", "--out", str(out)], capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    assert p.returncode in (0, 1), p.stderr
    r = json.loads(p.stdout)
    assert r["stop"]["reason"] == "done"
    statuses = {(w["dst"], w["status"]) for w in r["wrs_detail"]}
    assert statuses == {("h1", "SUCCESS"), ("h2", "RETRY_EXC_ERR"), ("h2", "WR_FLUSH_ERR")}
    wd = r["pfc_watchdog"]
    assert wd["switch"] == {"enabled": True, "detect_ms": 200.0, "restore_ms": 200.0}
    assert wd["storms"] >= 1 and wd["dropped"] > 0 and wd["pauses_ignored"] > 0
    assert any(q["where"] == "sw0.p2.q3" for q in wd["queues"])
    html = (out / "report.html").read_text()
    assert "PFC watchdog" in html and "sw0.p2.q3" in html
    text = subprocess.run([sys.executable, "-m", "nicsim.cli", "run", str(example),
                           "--no-pcap"], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path).stdout
    assert "PFC watchdog (switches: detect 200 ms, restore 200 ms" in text


def test_pfc_storm_and_watchdog_settings_are_checked() -> None:
    from nicsim.scenario.plan import plan
    from nicsim.scenario.schema import ScenarioError, parse_scenario

    base = "topology: {shape: star, hosts: 3}\nstreams: [{src: h0, dst: h1, count: 1}]\n"
    for bad, field in (("pfc_storms: [{host: h9}]", "pfc_storms[0].host"),
                       ("pfc_storms: [{host: h2, start_us: 5, stop_us: 2}]", "stop_us"),
                       ("pfc_storms: [{host: h2, priorities: [8]}]", "priorities"),
                       ("switch: {pfc: {watchdog: {detect_ms: 0}}}", "detect_ms"),
                       ("nic: {pfc_watchdog: {restore_ms: -1}}", "restore_ms")):
        with pytest.raises(ScenarioError) as err:
            plan(parse_scenario(base + bad))
        assert field in str(err.value) and "\n" not in str(err.value)
