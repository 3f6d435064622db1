"""`nicsim run FILE --out DIR`: flows.csv, summary.json, time series and plots, each checked
against what can be computed independently from the others (or from the model)."""

from __future__ import annotations

import csv
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, QPCap, RecvWR, SendWR

from nicsim.cli import main
from nicsim.fabric.link import LinkConfig
from nicsim.host.host import CpuCosts
from nicsim.host.pcie import PcieConfig
from nicsim.nic.config import NicConfig
from nicsim.scenario.build import Hop
from nicsim.scenario.collect import FLOW_COLUMNS
from nicsim.scenario.ideal import Ideal, IdealConfig
from nicsim.scenario.runner import Runner
from nicsim.scenario.schema import OpKind, parse_scenario
from nicsim.trace.stats import BUCKETS, Quantiles, bucket_of
from nicsim.workloads.endpoint import connect, make_side
from nicsim.world import World

WORKLOAD = """
name: mix
pcap: null
sample_us: 5
depth: 4
ops:
  - {op: write, bytes: 30000, repeat: 30}
  - {op: read, bytes: 5000, repeat: 10}
flows:
  - {cdf: fb_hadoop, load: 0.4, count: 120}
"""


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("res") / "out"
    s = d.parent / "mix.yaml"
    s.write_text(WORKLOAD)
    assert main(["run", str(s), "--out", str(d), "--quiet"]) == 0
    return d


def rows(out: Path) -> list[dict[str, str]]:
    with (out / "flows.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_flows_csv_has_every_wr_with_named_columns(out):
    with (out / "flows.csv").open() as f:
        assert tuple(next(csv.reader(f))) == FLOW_COLUMNS
    rs = rows(out)
    assert len(rs) == 30 + 10 + 120
    assert {r["group"] for r in rs} == {"ops[0]", "ops[1]", "flows[0]"}
    for r in rs:
        assert r["status"] == "SUCCESS" and r["check"] == "ok"
        fct = float(r["finish_us"]) - float(r["start_us"])
        assert float(r["fct_us"]) == pytest.approx(fct, abs=2e-6)
        assert float(r["slowdown"]) == pytest.approx(fct / float(r["ideal_fct_us"]), rel=1e-5)
        assert float(r["slowdown"]) > 0.99  # nothing beats being alone on an idle path
    units = (out / "columns.txt").read_text()
    assert all(f"  {c}: " in units for c in FLOW_COLUMNS)


def test_summary_percentiles_and_goodput_match_flows_csv(out):
    s = json.loads((out / "summary.json").read_text())
    rs = rows(out)
    fct = np.array([float(r["fct_us"]) for r in rs])
    lat = s["latency_us"]
    assert lat["count"] == len(rs)
    for k, q in (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)):
        assert lat[k] == pytest.approx(np.quantile(fct, q), rel=1e-6)
    assert (lat["min"], lat["max"]) == pytest.approx((fct.min(), fct.max()), rel=1e-6)
    by_bucket: dict[int, list[float]] = {}
    for r in rs:
        by_bucket.setdefault(bucket_of(int(r["size_bytes"])), []).append(float(r["slowdown"]))
    assert [b["flows"] for b in s["fct_slowdown"]] == [len(by_bucket[i])
                                                       for i in sorted(by_bucket)]
    for b, i in zip(s["fct_slowdown"], sorted(by_bucket), strict=True):
        for k, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
            assert b[k] == pytest.approx(np.quantile(by_bucket[i], q), rel=1e-4)
    # Goodput of the closed-loop ops (start = post): bytes over first post to last finish.
    ba = [r for r in rs if r["op"] == "read"]  # READ data flows b -> a; flows add more
    g = {(x["src"], x["dst"]): x for x in s["goodput"]}
    assert g[("b", "a")]["wrs"] == len(ba) + sum(1 for r in rs if r["group"] == "flows[0]"
                                                 and r["src"] == "b")
    assert s["configuration"]["flows"][0]["cdf"] == "fb_hadoop" and s["seed"] == 1
    assert s["stop"] == {"reason": "done", "detail": "", "timed_out": False}


def test_time_series_add_up_to_what_completed(out):
    rs = rows(out)
    with (out / "timeseries" / "qp_goodput.csv").open(newline="") as f:
        r = csv.reader(f)
        assert next(r) == ["time_us", "qp", "goodput_gbps"]
        samples = [(float(t), q, float(v)) for t, q, v in r]
    times = sorted({t for t, _, _ in samples})
    assert np.allclose(np.diff(times), 5.0)
    last = times[-1]
    # Sum over samples of rate x interval is the payload completed by the last sample.
    summed = sum(v * 5_000 / 8 for t, _, v in samples)
    done = sum(int(x["size_bytes"]) for x in rs if float(x["finish_us"]) <= last)
    assert summed == pytest.approx(done, rel=1e-4)
    with (out / "timeseries" / "port_backlog.csv").open() as f:
        assert next(csv.reader(f)) == ["time_us", "host", "backlog_bytes"]


def test_plots_are_pictures(out):
    for name in ("fct_slowdown.png", "latency_cdf.png", "qp_goodput.png",
                 "port_throughput.png", "port_backlog.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name
        w, h = struct.unpack(">II", data[16:24])
        assert (w, h) == (750, 420)


def test_sampling_changes_nothing(tmp_path):
    """The sampler only reads: the same WRs complete at the same simulated times with and
    without it."""
    text = WORKLOAD.replace("sample_us: 5", "sample_us: 0.7")
    plain = Runner(parse_scenario(text)).run()
    d = tmp_path / "o"
    d.mkdir()
    sampled = Runner(parse_scenario(text), out=d).run()
    assert [w.done_ns for w in plain.wrs] == [w.done_ns for w in sampled.wrs]
    assert plain.counters == sampled.counters


def test_quantiles_beyond_the_exact_range_stay_close():
    rng = np.random.default_rng(0)
    v = rng.lognormal(8, 2, 300_000)
    q = Quantiles()
    for x in v:
        q.add(float(x))
    assert not q.exact and q.n == len(v)
    for p in (0.5, 0.9, 0.99, 0.999):
        assert q.quantile(p) == pytest.approx(np.quantile(v, p), rel=2e-3)
    assert (q.min, q.max) == (v.min(), v.max())


MTU = {1024: e.IBV_MTU_1024, 4096: e.IBV_MTU_4096}
OPS = {OpKind.WRITE: e.IBV_WR_RDMA_WRITE, OpKind.SEND: e.IBV_WR_SEND,
       OpKind.READ: e.IBV_WR_RDMA_READ, OpKind.WRITE_IMM: e.IBV_WR_RDMA_WRITE_WITH_IMM,
       OpKind.FETCH_ADD: e.IBV_WR_ATOMIC_FETCH_AND_ADD}


@pytest.mark.parametrize("rate,gen,lanes,mtu", [(100.0, 3, 16, 1024), (25.0, 2, 8, 4096),
                                                (200.0, 1, 4, 1024)])
def test_ideal_fct_is_the_model_alone_on_an_idle_path(rate, gen, lanes, mtu):
    """Every kind and size of message, alone and with warm caches, completes in its ideal
    time to within 2% (never faster): the ideal is computed from the same parameters the
    model runs on, for PCIe-bound and line-bound configurations."""
    pcie = PcieConfig(gen=gen, lanes=lanes)
    nic = NicConfig(pcie=pcie)
    w = World.two_hosts(link=LinkConfig(rate, 50), nic=nic, mem_size=128 << 20)
    cap = QPCap(64, 64, 4, 4, 0)
    a = make_side(w, "a", mr_len=4 << 20, cap=cap)
    b = make_side(w, "b", mr_len=4 << 20, cap=cap)
    connect(a, b, MTU[mtu])
    connect(b, a, MTU[mtu])
    ideal = Ideal(IdealConfig(mtu, pcie, nic, CpuCosts(), 4, 0, 4))
    hops = [Hop(rate, 50)]
    env = w.env
    for op, code in OPS.items():
        sizes = [8] if op is OpKind.FETCH_ADD else [1, 100, mtu, mtu + 1, 3 * mtu + 7, 65536,
                                                     1 << 20]
        for n in sizes:
            for _ in range(2):  # the second is warm
                if op in (OpKind.SEND, OpKind.WRITE_IMM):
                    sg = [SGE(b.mr.buf, n, b.mr.lkey)] if op is OpKind.SEND else []
                    b.qp.post_recv(RecvWR(wr_id=1, num_sge=len(sg), sg=sg))
                wr = SendWR(opcode=code, num_sge=1, sg=[SGE(a.mr.buf, n, a.mr.lkey)],
                            send_flags=e.IBV_SEND_SIGNALED)
                if op is OpKind.FETCH_ADD:
                    wr.set_wr_atomic(b.mr.rkey, b.mr.buf, 1, 0)
                else:
                    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
                a.ctx.host.spend(50_000)  # idle
                t0 = env.now
                a.qp.post_send(wr)
                while not (wcs := a.cq.poll(1)[1]):
                    pass
                fct = env.now - t0
                assert wcs[0].status == 0
                if op in (OpKind.SEND, OpKind.WRITE_IMM):
                    a.ctx.host.spend(50_000)
                    while not b.cq.poll(1)[0]:
                        pass
            slowdown = fct / ideal.ns(op, n, hops, hops)
            assert 0.9995 <= slowdown <= 1.02, (op, n, slowdown)


def test_size_buckets():
    assert [bucket_of(n) for n in (1, 1000, 1001, 10**4, 10**6 + 1, 10**7, 10**7 + 1)] == \
        [0, 0, 1, 1, 4, 4, len(BUCKETS)]
