"""What a run reports stays under the wire (nicsim.results.physics): per-QP goodput and port
throughput series never above the line rate (plus the one frame that can straddle a sample's
edge), each WR's bytes over its time never above its link's rate."""

from __future__ import annotations

import csv
from pathlib import Path

from nicsim.results.physics import check_result
from nicsim.scenario.load import load
from nicsim.scenario.runner import Runner

ROOT = Path(__file__).resolve().parents[1]


def _max(path: Path) -> float:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))[1:]
    return max(float(r[2]) for r in rows)


def test_incast_series_stay_under_the_line_and_a_forged_one_is_named(tmp_path: Path) -> None:
    sc, _ = load(str(ROOT / "examples" / "incast.yaml"), [])
    r = Runner(sc, None, tmp_path).run()
    assert r.ok
    assert check_result(r) == []
    ts = tmp_path / "timeseries"
    slack = 9254 * 8 / (sc.sample_us * 1000.0)  # one jumbo frame per sample
    # Eight senders into one 100 Gb/s port: the QPs' goodputs add up to under its rate.
    assert 0 < _max(ts / "qp_goodput.csv") <= 100.0 + slack
    assert 0 < _max(ts / "port_throughput.csv") <= 100.0
    # Completion bursts (a coalesced ACK retiring many WRs) are not goodput: forge one.
    with (ts / "qp_goodput.csv").open("a", newline="") as f:
        csv.writer(f).writerow(["1910.000", "h4->h0#0", "1600"])
    found = check_result(r)
    assert found and found[0].startswith("qp_goodput above the wire: h4->h0#0 at 1910.000 us")


def test_port_backlog_is_bytes_queued_not_idle_time(tmp_path: Path) -> None:
    """The receiver of an incast sends only ACKs and CNPs: its queue never holds more than
    it ever sent (it showed 322,424 B queued for 138,364 B sent, counting scheduled idle
    time as backlog)."""
    sc, _ = load(str(ROOT / "examples" / "incast.yaml"), [])
    r = Runner(sc, None, tmp_path).run()
    rows = list(csv.reader((tmp_path / "timeseries" / "port_backlog.csv").open()))[1:]
    by_host: dict[str, float] = {}
    for _t, host, v in rows:
        by_host[host] = max(by_host.get(host, 0.0), float(v))
    c = r.counters["h0"]
    sent_wire = c["port.tx_bytes"] + 24 * c["port.tx_frames"]  # preamble, FCS, gap
    assert 0 < by_host["h0"] <= sent_wire
    assert by_host["h0"] < 16 * 1100  # a few ACK or CNP frames at most
