"""The scenario runner: every byte checked, and memory that does not grow with the run."""

from __future__ import annotations

from nicsim.scenario.runner import KEEP_WRS, SLOTS, Runner
from nicsim.scenario.schema import DEFAULT, load_scenario, parse_scenario


def test_default_scenario_checks_every_byte():
    r = Runner(load_scenario(DEFAULT)).run()
    assert r.ok and r.verified_bytes == 289344
    assert r.total_wrs == len(r.wrs) == 14
    assert sum(s.count for s in r.stats) == 14


def test_repeats_reuse_a_bounded_set_of_buffers():
    """Repeats beyond depth + SLOTS reuse buffers once the WR that used one is checked: the
    MRs stay the same size however long the run, every byte is still checked, and a run of
    more than KEEP_WRS WRs keeps per-op summaries, not every WR."""
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
    lines, loc, rem = runner._plan()
    assert all(line.slots <= sc.depth + SLOTS for line in lines)
    r = runner.run()
    assert r.ok, (r.first_bad, r.error_count)
    total = n + 2 * SLOTS + SLOTS + 50 + SLOTS + 7
    assert r.total_wrs == total and not r.wrs
    assert [s.count for s in r.stats] == [n, 2 * SLOTS, SLOTS + 50, SLOTS + 7]
    assert r.verified_bytes == n * 100 + 2 * SLOTS * 40 + (SLOTS + 50) * 3000 + \
        (SLOTS + 7) * 16


def test_a_scenario_too_big_for_the_host_or_the_nic_is_refused_before_it_runs(tmp_path, capsys):
    """More registered memory than the NIC's MTT maps, or than host.mem_mib gives: one line
    naming the field and the limit, exit 2, nothing simulated."""
    from nicsim.cli import main

    big = tmp_path / "big.yaml"
    big.write_text("ops:\n  - {op: write, bytes: 1073741824, repeat: 5}\n")
    assert main(["run", str(big), "--no-pcap"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {big}: ops[0]:") and "4,096 MiB" in err
    assert "\n" not in err
    small = tmp_path / "small.yaml"
    small.write_text("host: {mem_mib: 64}\nops:\n  - {op: write, bytes: 67108864}\n")
    assert main(["run", str(small), "--no-pcap"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {small}: host.mem_mib: 64 MiB is less than")
