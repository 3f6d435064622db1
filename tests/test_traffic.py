"""Traffic sources: perftest-like streams, patterns over many hosts, CDF flows at a load.

The generators (nicsim.apps) are checked on host lists of any size; the simulations run on
the hosts the world has (two, `a` and `b`, until topologies are in: an incast there is
1 -> 1). The simulated pattern tests take their hosts from the world builder
(nicsim.scenario.build.host_names), so they cover more hosts as soon as it offers them.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from nicsim.scenario.build import host_names
from nicsim.scenario.runner import Runner
from nicsim.scenario.schema import ScenarioError, parse_scenario
from nicsim.workloads import patterns
from nicsim.workloads.cdf import BUILTIN, CdfError, load_cdf, parse_cdf
from nicsim.workloads.flows import poisson_flows

HOSTS16 = [f"h{i}" for i in range(16)]


def run(text: str):
    return Runner(parse_scenario(text)).run()


# -- generators -------------------------------------------------------------------------------


def test_incast_permutation_and_all_to_all_over_16_hosts():
    rng = np.random.default_rng(1)
    inc = patterns.incast(HOSTS16, "h3", None, rng)
    assert sorted(inc) == sorted((h, "h3") for h in HOSTS16 if h != "h3")
    some = patterns.incast(HOSTS16, "h3", 5, rng)
    assert len(some) == 5 and len(set(some)) == 5 and all(d == "h3" != s for s, d in some)
    for seed in range(20):
        perm = patterns.permutation(HOSTS16, np.random.default_rng(seed))
        assert sorted(s for s, _ in perm) == sorted(HOSTS16)
        assert sorted(d for _, d in perm) == sorted(HOSTS16)
        assert all(s != d for s, d in perm)
    a2a = patterns.all_to_all(HOSTS16)
    assert len(a2a) == 16 * 15 == len(set(a2a)) and all(s != d for s, d in a2a)
    assert patterns.incast(["a", "b"], "b", 60, rng) == [("a", "b")]  # 1 -> 1 on two hosts


def test_builtin_cdfs_and_their_means():
    ws, fb = load_cdf("websearch"), load_cdf("fb_hadoop")
    for c, path in ((ws, BUILTIN["websearch"]), (fb, BUILTIN["fb_hadoop"])):
        text = path.read_text()
        assert "Source:" in text and "SIGCOMM" in text  # each names where it comes from
        pts = [tuple(map(float, line.split())) for line in text.splitlines()
               if line and not line.startswith("#")]
        mean = sum((x0 + x1) / 2 * (y1 - y0)
                   for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False))
        assert c.mean == pytest.approx(mean / 100)
    assert ws.mean == 1_711_250 and ws.max == 30_000_000
    assert fb.max == 10_000_000


def test_sizes_follow_the_cdf():
    ws = load_cdf("websearch")
    sizes = ws.sample(np.random.default_rng(3), 200_000)
    for x in (10_000, 80_000, 1_000_000, 10_000_000):
        assert np.mean(sizes <= x) == pytest.approx(ws.cdf_at(x), abs=0.005)
    assert sizes.min() >= 1 and sizes.max() <= 30_000_000


def test_a_users_cdf_file(tmp_path):
    p = tmp_path / "mine.cdf"
    p.write_text("# two sizes\n100 0\n100.5 50\n1000 100\n")
    c = load_cdf(str(p))
    assert c.sizes == (100, 100.5, 1000) and c.mean == pytest.approx(
        (100 + 100.5) / 2 * 0.5 + (100.5 + 1000) / 2 * 0.5)
    for bad, why in (("100 0\n50 100\n", "must both increase"), ("1 5\n2 100\n", "start at 0"),
                     ("x y\n", "not numbers"), ("1 0 3\n", "expected")):
        with pytest.raises(CdfError, match=why):
            parse_cdf(bad, "bad.cdf")
    with pytest.raises(ScenarioError, match=r"flows\[0\]\.cdf: nope.cdf: no such CDF"):
        Runner(parse_scenario("flows: [{cdf: nope.cdf, count: 1}]")).plan()


def test_poisson_arrivals_offer_the_target_load():
    """Each sender offers load x its link rate: over many flows the bytes offered per unit
    time are senders x load x rate, and the gaps are exponential (coefficient of variation
    1)."""
    ws = load_cdf("websearch")
    flows = list(poisson_flows(ws, HOSTS16, 0.4, 100.0, np.random.default_rng(5), count=50_000))
    span = flows[-1].t_ns
    offered = sum(f.size for f in flows) * 8 / span  # Gb/s
    assert offered == pytest.approx(16 * 0.4 * 100.0, rel=0.05)
    gaps = np.diff([f.t_ns for f in flows])
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, abs=0.03)
    per_src = Counter(f.src for f in flows)
    assert min(per_src.values()) > 50_000 / 16 * 0.9
    assert all(f.src != f.dst for f in flows)
    to_one = list(poisson_flows(ws, HOSTS16, 0.4, 100.0, np.random.default_rng(5), dst="h0",
                                count=1000))
    assert all(f.dst == "h0" and f.src != "h0" for f in to_one)
    timed = list(poisson_flows(ws, HOSTS16, 0.4, 100.0, np.random.default_rng(5),
                               duration_ns=1e6))
    assert timed and all(f.t_ns < 1e6 for f in timed)


# -- simulated --------------------------------------------------------------------------------


def test_stream_like_ib_write_bw():
    """count WRs per QP, depth outstanding each, a completion every signal_every WRs and on
    the last; every byte checked; the pool holds one QP per stream QP."""
    r = run("""
pcap: null
streams:
  - {op: write, bytes: 4096, depth: 16, count: 100, signal_every: 8, qps: 2}
""")
    assert r.ok and r.total_wrs == 200 and r.verified_bytes == 200 * 4096
    qpns = Counter(w.conn.qp.qp_num for w in r.wrs)
    assert sorted(qpns.values()) == [100, 100]
    signaled = [w for w in r.wrs if w.signaled]
    # Per QP: every 8th and the last (100 = 12 x 8 + 4).
    assert len(signaled) == 2 * 13
    gp = r.collector.directions[("a", "b")].gbps
    assert 80 < gp < 100


def test_stream_for_a_duration_ends_with_a_signaled_wr():
    """Posting stops at the end of the duration; the last WR is signaled (one more, signaled,
    is posted then if the last before was not), so every WR's fate is known."""
    for every in (4, 3):
        r = run("pcap: null\nstreams:\n"
                f"  - {{op: write, bytes: 1000, depth: 8, duration_us: 30, "
                f"signal_every: {every}}}\n")
        assert r.ok and r.collector.unknown == 0
        ws = sorted(r.wrs, key=lambda w: w.index)
        assert ws[-1].signaled
        late = [w for w in ws if w.post_ns - r.collector.t0 >= 30_000]
        assert len(late) <= 1 and ws[-1].post_ns - r.collector.t0 > 25_000


def test_inline_stream_needs_room_in_the_wqe():
    with pytest.raises(ScenarioError, match=r"streams\[0\]\.inline: 128 bytes > "
                                            r"qp.max_inline_data 0"):
        parse_scenario("streams: [{op: write, bytes: 128, count: 1, inline: true}]")
    r = run("pcap: null\nqp: {max_inline_data: 128}\n"
            "streams: [{op: write, bytes: 100, count: 50, inline: true, depth: 4}]")
    assert r.ok and r.verified_bytes == 5000


@pytest.mark.parametrize("kind", ["incast", "permutation", "all_to_all"])
def test_patterns_run_on_the_hosts_the_world_has(kind):
    r = run(f"pcap: null\npatterns:\n  - {{kind: {kind}, bytes: 20000, rounds: 3}}\n")
    hosts = host_names(r.scenario)
    want = {"incast": [(h, hosts[0]) for h in hosts[1:]],
            "permutation": None, "all_to_all": patterns.all_to_all(hosts)}[kind]
    assert r.ok
    rounds = Counter((w.src, w.dst) for w in r.wrs)
    if want is not None:
        assert sorted(rounds) == sorted(want)
    assert sum(rounds.values()) == 3 * len(want or hosts)
    assert set(rounds.values()) == {3} or kind == "permutation"


def test_pattern_hosts_are_checked_against_the_world():
    with pytest.raises(ScenarioError, match=r"patterns\[0\]\.hosts\[2\]: no host 'c' "
                                            r"\(hosts: a, b\)"):
        Runner(parse_scenario("patterns: [{kind: incast, hosts: [a, b, c]}]")).plan()
    with pytest.raises(ScenarioError, match=r"flows\[0\]\.dst: no host 'z'"):
        Runner(parse_scenario("flows: [{count: 5, dst: z}]")).plan()


def test_flows_spread_over_the_pairs_pool_and_an_incast_on_top():
    r = run("""
pcap: null
flows:
  - {cdf: fb_hadoop, load: 0.5, count: 150, qps: 4}
patterns:
  - {kind: incast, bytes: 100000, rounds: 4, every_us: 20}
""")
    assert r.ok and r.total_wrs == 150 + 4
    flows = [w for w in r.wrs if r.groups[w.group].name == "flows[0]"]
    assert {(w.src, w.dst) for w in flows} == {("a", "b"), ("b", "a")}
    assert len({w.conn.qp.qp_num for w in flows if w.src == "a"}) > 1  # the pool is used
    inc = [w for w in r.wrs if r.groups[w.group].name == "patterns[0]"]
    assert [round(w.start_ns - r.collector.t0) for w in inc] == [0, 20_000, 40_000, 60_000]
    # Arrival times are the FCT's start, even when a flow waits for its QP.
    assert all(w.post_ns >= w.start_ns for w in flows)
