"""The physics of what a run reports (`nicsim run --check`; the run's own invariants are
nicsim.checks.physics'): no WR's payload crossed its wire faster than the wire's rate (its
bytes over its time from post to completion), and no sample of a throughput time series is
above its host's line rate by more than the one frame that can straddle a sample's edge."""

from __future__ import annotations

import csv
from pathlib import Path

from nicsim.scenario import build
from nicsim.scenario.runner import RunResult
from nicsim.scenario.traffic import Wr
from nicsim.wire.packet import ETH_FCS, ETH_IFG, ETH_PREAMBLE

_MAX_FRAME = 9216 + ETH_PREAMBLE + ETH_FCS + ETH_IFG  # bytes: a jumbo frame on the wire
_SERIES = {"qp_goodput": "qp", "port_throughput": "host"}  # series in Gb/s, and their label
_KEEP = 5


def check_result(r: RunResult) -> list[str]:
    """What the result and the files it wrote say that no wire allows (one line each)."""
    found: list[str] = []
    sc = r.scenario
    for w in r.wrs:
        _check_wr(w, build.host_rate_gbps(sc, w.src), found)
    if r.out is not None:
        ts = Path(r.out) / "timeseries"
        for name, label in _SERIES.items():
            path = ts / f"{name}.csv"
            if path.is_file():
                _check_series(path, label, sc, found)
    return found[:_KEEP] + ([f"and {len(found) - _KEEP} more"] if len(found) > _KEEP else [])


def _check_wr(w: Wr, rate_gbps: float, found: list[str]) -> None:
    if w.status != 0 or not w.nbytes or w.done_ns <= w.post_ns:
        return
    gbps = w.nbytes * 8 / (w.done_ns - w.post_ns)
    if gbps > rate_gbps * (1 + 1e-9):
        found.append(f"goodput above the wire: WR {w.index} ({w.src} -> {w.dst}, {w.nbytes} "
                     f"bytes) took {w.done_ns - w.post_ns:.0f} ns: {gbps:.2f} Gb/s on a "
                     f"{rate_gbps:g} Gb/s link")


def _check_series(path: Path, label: str, sc: object, found: list[str]) -> None:
    interval_ns = sc.sample_us * 1000.0  # type: ignore[attr-defined]
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            who = row[label]
            host = who.split("->")[0] if label == "qp" else who
            line = build.host_rate_gbps(sc, host)  # type: ignore[arg-type]
            bound = line + _MAX_FRAME * 8 / interval_ns
            v = float(next(x for k, x in row.items() if k not in ("time_us", label)))
            if v > bound:
                found.append(f"{path.stem} above the wire: {who} at {row['time_us']} us: "
                             f"{v:g} Gb/s on a {line:g} Gb/s link")
