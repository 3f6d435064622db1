"""What a run's work requests add up to, gathered as each one is checked: per-group and
per-direction figures, latency and FCT-slowdown quantiles, and flows.csv written row by row
(nothing per WR is kept, so a run of millions of WRs stays small)."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from nicsim.driver.enums import ibv_wc_status
from nicsim.scenario.schema import ATOMICS, OpKind
from nicsim.scenario.traffic import NOT_POSTED, OUTSTANDING, UNKNOWN, Wr
from nicsim.trace.stats import BUCKETS, Quantiles, bucket_of, plot_bin

KEEP_WRS = 10_000  # runs with more WRs keep summaries, not every WR
FLOW_COLUMNS = ("id", "group", "src", "dst", "qpn", "op", "size_bytes", "start_us",
                "finish_us", "fct_us", "ideal_fct_us", "slowdown", "status", "check")
FLOW_UNITS = {
    "id": "the WR's wr_id, in the order WRs became due",
    "group": "the scenario entry it came from (ops[i], streams[i], patterns[i], flows[i])",
    "src": "host that posted it", "dst": "its peer host",
    "qpn": "QP number on src", "op": "opcode",
    "size_bytes": "message length in bytes",
    "start_us": "when it became due (a flow's arrival; a closed loop's post), us after the "
                "traffic started",
    "finish_us": "when its completion was polled, us (empty: not completed)",
    "fct_us": "finish - start, us",
    "ideal_fct_us": "the same message alone on an idle path, us (nicsim.scenario.ideal)",
    "slowdown": "fct / ideal",
    "status": "the completion status, or outstanding (no completion when the run stopped), "
              "or unknown (unsignaled, no later completion on its QP)",
    "check": "ok: every byte it placed is in destination memory; else what is wrong or why it "
             "was not checked",
}


def status_name(s: int) -> str:
    if s in (OUTSTANDING, NOT_POSTED):
        return "outstanding"
    if s == UNKNOWN:
        return "unknown"
    try:
        return ibv_wc_status(s).name.removeprefix("IBV_WC_")
    except ValueError:
        return str(s)


@dataclass
class GroupStats:
    name: str
    what: str  # e.g. "write 65536 B", "websearch write at 0.3 load"
    count: int = 0
    ok: int = 0
    bytes_ok: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    latency: Quantiles = field(default_factory=Quantiles)
    slowdown: Quantiles = field(default_factory=Quantiles)


@dataclass
class Direction:
    """Payload moved from one host to another by WRs that succeeded (READ data flows from
    the responder), and the time those WRs were in flight."""

    bytes: int = 0
    wrs: int = 0
    first_ns: float = float("inf")
    last_ns: float = 0.0

    @property
    def gbps(self) -> float | None:
        span = self.last_ns - self.first_ns
        return self.bytes * 8 / span if span > 0 else None


class FlowWriter:
    """flows.csv, one row per WR as it is checked."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._f: IO[str] = path.open("w", newline="")
        self._w = csv.writer(self._f)
        self._w.writerow(FLOW_COLUMNS)

    def row(self, r: tuple) -> None:
        self._w.writerow(r)

    def close(self) -> None:
        self._f.close()


def _us(ns: float | None) -> str:
    return "" if ns is None else f"{ns / 1000:.6f}"


class Collector:
    def __init__(self, groups: list[tuple[str, str]], t0: float,
                 flows: FlowWriter | None = None, keep: bool = False) -> None:
        self.groups = [GroupStats(n, w) for n, w in groups]
        self.t0 = t0
        self.flows = flows
        self.keep = keep
        self.kept: list[Wr] = []
        self.latency = Quantiles()
        self.slowdown = [Quantiles() for _ in range(len(BUCKETS) + 1)]
        self.plot: dict[int, Quantiles] = {}
        self.directions: dict[tuple[str, str], Direction] = {}
        self.verified_bytes = 0
        self.errors = 0  # WRs with an error completion
        self.outstanding = 0
        self.unknown = 0
        self.error_wrs: list[Wr] = []
        self.first_bad: Wr | None = None
        self.total = 0

    def add(self, w: Wr, ideal_ns: float, qpn: int) -> None:
        """A WR is done with (checked, or given up at the end of the run)."""
        self.total += 1
        g = self.groups[w.group]
        g.count += 1
        st = status_name(w.status)
        g.statuses[st] = g.statuses.get(st, 0) + 1
        lat = w.latency_ns
        slow = None
        if w.status == 0:
            g.ok += 1
            g.bytes_ok += w.nbytes
            g.latency.add(lat)  # type: ignore[arg-type]
            self.latency.add(lat)  # type: ignore[arg-type]
            slow = lat / ideal_ns if ideal_ns > 0 else None  # type: ignore[operator]
            if slow is not None:
                g.slowdown.add(slow)
                self.slowdown[bucket_of(w.nbytes)].add(slow)
                self.plot.setdefault(plot_bin(w.nbytes), Quantiles()).add(slow)
            if w.msg.op not in ATOMICS:
                key = (w.dst, w.src) if w.msg.op is OpKind.READ else (w.src, w.dst)
                d = self.directions.get(key)
                if d is None:
                    d = self.directions[key] = Direction()
                d.bytes += w.nbytes
                d.wrs += 1
                d.first_ns = min(d.first_ns, w.post_ns)
                d.last_ns = max(d.last_ns, w.done_ns)
        elif w.status == UNKNOWN:
            self.unknown += 1
        elif w.status < 0:
            self.outstanding += 1
        else:
            self.errors += 1
            if len(self.error_wrs) < 100:
                self.error_wrs.append(w)
        if w.integrity != "ok" and w.status == 0 and self.first_bad is None:
            self.first_bad = w
        if self.flows is not None:
            start = w.start_ns if w.start_ns is not None else w.post_ns
            done = w.done_ns if w.status >= 0 else None
            self.flows.row((w.index, g.name, w.src, w.dst, qpn, w.msg.op.value, w.nbytes,
                            _us(start - self.t0), _us(None if done is None else done - self.t0),
                            _us(lat), _us(ideal_ns), "" if slow is None else f"{slow:.6f}", st,
                            w.integrity or "-"))
        if self.keep:
            self.kept.append(w)
            if len(self.kept) > KEEP_WRS:  # (a run whose length was not known in advance)
                self.kept.clear()
                self.keep = False
