"""summary.json: what a run was (its whole configuration and seed) and what it gave (how it
stopped, goodput per direction, FCT slowdown by flow size, latency percentiles, per-group
figures, counters). `nicsim run --json` prints the same, plus each WR of a small run."""

from __future__ import annotations

from typing import Any

from nicsim.scenario.collect import status_name
from nicsim.trace.stats import BUCKETS, Quantiles, bucket_label

LATENCY_QS = (0.5, 0.99, 0.999)
SLOWDOWN_QS = (0.5, 0.95, 0.99)


def _q(q: Quantiles, qs: tuple[float, ...], scale: float = 1.0) -> dict[str, Any]:
    s = q.summary(qs)
    return {k: (v * scale if isinstance(v, float) and k != "count" else v)
            for k, v in s.items()}


def fct_table(result: Any) -> list[dict[str, Any]]:
    """FCT slowdown p50/p95/p99 per flow-size bucket (buckets with flows only)."""
    out = []
    for i, q in enumerate(result.collector.slowdown):
        if q.n:
            lo = 0 if i == 0 else BUCKETS[i - 1]
            hi = BUCKETS[i] if i < len(BUCKETS) else None
            row = {"bucket": bucket_label(i), "min_bytes": lo + (1 if i else 0),
                   "max_bytes": hi, "flows": q.n}
            row.update({k: v for k, v in _q(q, SLOWDOWN_QS).items()
                        if k in ("p50", "p95", "p99")})
            out.append(row)
    return out


def goodput(result: Any) -> list[dict[str, Any]]:
    rows = []
    for (s, d), x in sorted(result.collector.directions.items()):
        span = x.last_ns - x.first_ns
        rows.append({"src": s, "dst": d, "bytes": x.bytes, "wrs": x.wrs,
                     "first_post_us": (x.first_ns - result.collector.t0) / 1000,
                     "last_completion_us": (x.last_ns - result.collector.t0) / 1000,
                     "in_flight_us": span / 1000, "gbps": x.gbps})
    return rows


def summary(result: Any) -> dict[str, Any]:
    c = result.collector
    sc = result.scenario
    return {
        "scenario": sc.name,
        "seed": sc.seed,
        "configuration": sc.model_dump(mode="json"),
        "ok": result.ok,
        "stop": {"reason": result.stop_reason, "detail": result.stop_detail,
                 "timed_out": result.timed_out},
        "timed_out": result.timed_out,
        "elapsed_ns": result.elapsed_ns,
        "wrs": {"total": c.total, "errors": c.errors, "outstanding": c.outstanding,
                "unknown": c.unknown, "waited_for_buffers": result.buffer_waits},
        "integrity": "OK" if c.first_bad is None else
        f"FAILED at WR {c.first_bad.index}: {c.first_bad.integrity}",
        "verified_bytes": c.verified_bytes,
        "goodput": goodput(result),
        "fct_slowdown": fct_table(result),
        "latency_us": _q(c.latency, LATENCY_QS, 1e-3),
        "groups": [{"group": g.name, "what": g.what, "wrs": g.count, "succeeded": g.ok,
                    "bytes": g.bytes_ok, "statuses": g.statuses,
                    "latency_us": _q(g.latency, LATENCY_QS, 1e-3),
                    "slowdown": _q(g.slowdown, SLOWDOWN_QS)}
                   for g in result.groups],
        "qps": result.qps,
        "pcap": result.pcap,
        "pcaps": result.pcaps,
        "link_faults": result.faults,
        "run": {"wall_s": result.wall_s, "events": result.events},
        "counters": result.counters,
        "switches": result.switches,
        "pfc_watchdog": pfc_watchdog(result),
    }


_WD = ("storms", "restores", "dropped", "pauses_ignored")


def pfc_watchdog(result: Any) -> dict[str, Any] | None:
    """What the PFC watchdogs of the switches and NICs did, with their settings (None: the
    run had no PFC). `queues` names every queue that was stormed."""
    sc = result.scenario
    if not result.switches or not sc.switch.pfc.enabled or not sc.switch.pfc.classes:
        return None
    tot = dict.fromkeys(_WD, 0)
    queues: list[dict[str, Any]] = []
    for sw, c in result.switches.items():
        for k, v in c.items():
            if k.endswith(".pfc_wd.storms") and v:
                q = k.removesuffix(".pfc_wd.storms")
                queues.append({"where": f"{sw}.{q}",
                               **{n: c[f"{q}.pfc_wd.{n}"] for n in _WD}})
    for host, c in result.counters.items():
        if c.get("port.pfc_wd_storms"):
            queues.append({"where": f"{host}.eth0", "dropped": 0,
                           **{n: c.get(f"port.pfc_wd_{n}", 0) for n in _WD
                              if n != "dropped"}})
    for q in queues:
        for n in _WD:
            tot[n] += q[n]

    def cfg(w: Any) -> dict[str, Any]:
        return {"enabled": w.enabled, "detect_ms": w.detect_ms, "restore_ms": w.restore_ms}

    return {"switch": cfg(sc.switch.pfc.watchdog), "nic": cfg(sc.nic.pfc_watchdog), **tot,
            "queues": queues}


def wr_rows(result: Any) -> list[dict[str, Any]]:
    return [{"index": w.index, "group": result.groups[w.group].name, "src": w.src,
             "dst": w.dst, "op": w.msg.op.value, "bytes": w.nbytes,
             "latency_ns": w.latency_ns, "completed": w.status >= 0,
             "status": status_name(w.status), "integrity": w.integrity}
            for w in sorted(result.wrs, key=lambda x: x.index)]
