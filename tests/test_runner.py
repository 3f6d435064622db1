"""The scenario runner: every byte checked, memory that does not grow with the run, and an
honest account of how each WR and the run ended (issue 13, "honest reporting")."""

from __future__ import annotations

import json

from nicsim.scenario.plan import SLOTS
from nicsim.scenario.runner import KEEP_WRS, Runner
from nicsim.scenario.schema import DEFAULT, load_scenario, parse_scenario


def run(text: str):
    return Runner(parse_scenario(text)).run()


def test_default_scenario_checks_every_byte():
    r = Runner(load_scenario(DEFAULT)).run()
    assert r.ok and r.verified_bytes == 289344 and r.stop_reason == "done"
    assert r.total_wrs == len(r.wrs) == 14
    assert sum(g.count for g in r.groups) == 14


def test_repeats_reuse_a_bounded_set_of_buffers():
    """A long run takes buffers for what is in flight and gives them back once checked: the
    arenas stay small however many WRs, every byte is still checked, and a run of more than
    KEEP_WRS WRs keeps summaries, not every WR."""
    n = KEEP_WRS + 500
    sc = parse_scenario(f"""
name: long
depth: 8
pcap: null
ops:
  - {{op: write, bytes: 100, repeat: {n}}}
  - {{op: send, bytes: 40, repeat: {2 * SLOTS}}}
  - {{op: read, bytes: 3000, repeat: {SLOTS + 50}}}
  - {{op: fetch_add, swap_add: 3, initial: 1, repeat: {SLOTS + 7}}}
""")
    runner = Runner(sc)
    r = runner.run()
    assert r.ok, (r.first_bad, r.error_count)
    total = n + 2 * SLOTS + SLOTS + 50 + SLOTS + 7
    assert r.total_wrs == total and not r.wrs
    assert [g.count for g in r.groups] == [n, 2 * SLOTS, SLOTS + 50, SLOTS + 7]
    assert r.verified_bytes == n * 100 + 2 * SLOTS * 40 + (SLOTS + 50) * 3000 + \
        (SLOTS + 7) * 16
    # In flight at once: at most depth WRs plus those completed within the settle time.
    for arena in runner.arenas.values():
        assert arena.peak <= (sc.depth + SLOTS) * 4096


def test_goodput_is_per_direction_over_the_time_in_flight():
    """WRITEs carry data a->b, READs b->a: each direction's goodput is its payload over the
    time its WRs were in flight, not everything over a run padded with an idle tail."""
    r = run("""
pcap: null
depth: 4
ops:
  - {op: write, bytes: 65536, repeat: 40}
  - {op: read, bytes: 4096, repeat: 10}
""")
    assert r.ok
    d = {k: v for k, v in r.collector.directions.items()}
    ab, ba = d[("a", "b")], d[("b", "a")]
    assert (ab.bytes, ab.wrs, ba.bytes, ba.wrs) == (40 * 65536, 40, 10 * 4096, 10)
    writes = [w for w in r.wrs if w.msg.op.value == "write"]
    reads = [w for w in r.wrs if w.msg.op.value == "read"]
    span_w = max(w.done_ns for w in writes) - min(w.post_ns for w in writes)
    span_r = max(w.done_ns for w in reads) - min(w.post_ns for w in reads)
    assert abs(ab.gbps - 40 * 65536 * 8 / span_w) < 1e-9
    assert abs(ba.gbps - 10 * 4096 * 8 / span_r) < 1e-9
    assert 80 < ab.gbps < 100  # a 100 Gb/s link kept busy by 4 outstanding 64 KiB WRITEs
    # The run ends at its last completion: no idle tail.
    assert r.elapsed_ns == max(w.done_ns for w in r.wrs) - r.collector.t0


def test_a_wr_cut_short_by_the_time_limit_is_not_completed():
    """`timeout_us: 1` on a 1 MiB WRITE used to show latency -177950.1: now the WR is
    outstanding, with no latency, and the run says it hit the user's time limit."""
    r = run("pcap: null\nstop: {time_limit_us: 1}\nops:\n  - {op: write, bytes: 1048576}\n")
    (w,) = r.wrs
    assert w.latency_ns is None and w.status < 0
    assert r.stop_reason == "time limit" and r.timed_out and not r.ok
    assert r.collector.outstanding == 1 and r.collector.errors == 0
    assert r.elapsed_ns == 1000.0


def test_unsignaled_wrs_show_what_is_known(tmp_path):
    """An unsignaled WR is a success only when a later completion on its QP says so; under
    100% loss it gets its own error completion; with nothing after it, its status is
    unknown, never SUCCESS."""
    ok = run("pcap: null\ndepth: 2\nops:\n  - {op: write, bytes: 100, signaled: false}\n"
             "  - {op: write, bytes: 100}\n")
    assert ok.ok and [w.status for w in ok.wrs] == [0, 0]
    assert ok.wrs[0].done_ns == ok.wrs[1].done_ns  # known complete when the later one is
    lost = run("pcap: null\ndepth: 2\nlink: {faults: {loss: 1.0}}\nops:\n"
               "  - {op: write, bytes: 100, signaled: false}\n  - {op: write, bytes: 100}\n")
    assert [w.status for w in lost.wrs] == [12, 5]  # RETRY_EXC_ERR, then WR_FLUSH_ERR
    trailing = run("pcap: null\ndepth: 2\nops:\n  - {op: write, bytes: 100}\n"
                   "  - {op: write, bytes: 100, signaled: false}\n")
    w = trailing.wrs[1]
    assert w.status == -2 and w.latency_ns is None and w.integrity == "status unknown"
    assert not trailing.ok and trailing.collector.unknown == 1


def test_a_window_of_unsignaled_wrs_is_refused():
    """depth unsignaled WRs in a row with more to come can never complete: refused up front
    rather than run into a stall."""
    import pytest

    from nicsim.scenario.schema import ScenarioError

    with pytest.raises(ScenarioError, match=r"ops\[0\]\.signaled: 2 unsignaled WRs in a row"):
        parse_scenario("depth: 2\nops:\n  - {op: write, signaled: false, repeat: 2}\n"
                       "  - {op: write}\n")


def test_a_run_stops_on_no_progress_not_after_a_fixed_second():
    """Progress keeps a run going past 1 s of simulated time (a 2 MB WRITE at 10 Mb/s takes
    1.7 s); a run where nothing can move stops after stop.stall_us and says so."""
    slow = run("pcap: null\nlink: {rate_gbps: 0.01}\nops:\n  - {op: write, bytes: 2000000}\n")
    assert slow.ok and slow.elapsed_ns > 1.5e9 and slow.stop_reason == "done"
    stuck = run("pcap: null\nqp: {timeout: 0}\nstop: {stall_us: 100}\n"
                "link: {faults: {loss: 1.0}}\nops:\n  - {op: write, bytes: 100}\n")
    assert stuck.stop_reason == "no progress" and "100 us" in stuck.stop_detail
    assert stuck.collector.outstanding == 1 and not stuck.ok


def test_json_has_the_configuration_and_how_the_run_stopped(capsys, tmp_path):
    from nicsim.cli import main

    s = tmp_path / "s.yaml"
    s.write_text("pcap: null\nstop: {time_limit_us: 1}\nops:\n  - {op: write, bytes: 1048576}\n")
    assert main(["run", str(s), "--json", "--set", "link.rate_gbps=25", "--seed", "9"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["timed_out"] is True and d["stop"]["reason"] == "time limit"
    cfg = d["configuration"]
    assert (cfg["link"]["rate_gbps"], cfg["qp"]["path_mtu"], cfg["depth"], cfg["seed"]) == \
        (25.0, 1024, 1, 9)
    (w,) = d["wrs_detail"]
    assert w["latency_ns"] is None and w["completed"] is False and w["status"] == "outstanding"
