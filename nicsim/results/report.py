"""Human and JSON reports of a scenario run."""

from __future__ import annotations

from typing import Any

from nicsim.results.summary import fct_table, goodput, pfc_watchdog, summary, wr_rows
from nicsim.scenario import build
from nicsim.scenario.collect import status_name
from nicsim.scenario.runner import NO_PROGRESS, TIME_LIMIT, RunResult

# The counters worth a line in the report, per NIC; the JSON has all of them.
KEY_COUNTERS = (
    "port.tx_frames", "port.tx_bytes", "rx.packets", "requester.wqes",
    "requester.data_packets", "requester.read_requests", "requester.atomic_requests",
    "responder.acks_sent", "responder.naks_sent", "responder.rnr_naks_sent",
    "responder.read_response_packets", "responder.bytes_placed", "completer.acks",
    "completer.naks", "requester.retransmitted_packets", "requester.timeouts",
    "responder.duplicates", "responder.out_of_sequence", "cq.cqes", "cq.cqe_errors",
    "wqe_fetch.sq_dma_reads", "xlate.mpt_hits",
    "xlate.mpt_misses", "xlate.mtt_hits", "xlate.mtt_misses", "pcie.dma_read_bytes",
    "pcie.dma_write_bytes",
)
MAX_ROWS = 40


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def text_report(r: RunResult) -> str:
    sc = r.scenario
    c = r.collector
    hosts = build.host_names(sc)  # (counters: only the hosts with a model NIC)
    out = [f"scenario {sc.name}: {r.total_wrs:,} WRs, hosts {', '.join(hosts)}, "
           + (f"profile {sc.profile}, " if sc.profile else "")
           + (f"host profile {sc.host.profile}, " if sc.host.profile else "") + "link "
           f"{sc.link.rate_gbps:g} Gb/s, MTU {sc.qp.path_mtu}, seed {sc.seed}"
           + (f", depth {sc.depth}" if sc.ops else ""), ""]
    if r.wrs and len(r.wrs) <= MAX_ROWS:
        out.append(f"{'#':>4}  {'src>dst':<8} {'opcode':<10} {'bytes':>9} {'sges':>4} "
                   f"{'latency ns':>11}  status")
        for w in sorted(r.wrs, key=lambda x: x.index):
            lat = w.latency_ns
            out.append(f"{w.index:>4}  {w.src + '>' + w.dst:<8} {w.msg.op.value:<10} "
                       f"{w.nbytes:>9} {w.msg.sges:>4} "
                       f"{'-' if lat is None else f'{lat:.1f}':>11}  {status_name(w.status)}")
    else:
        ww = max([44] + [len(g.what) for g in r.groups])
        out.append(f"{'group':<12} {'what':<{ww}} {'WRs':>9} {'ok':>9} {'p50 us':>9} "
                   f"{'p99 us':>9} {'max us':>9}  statuses")
        for g in r.groups:
            q = g.latency
            sts = ", ".join(f"{k} {v:,}" for k, v in sorted(g.statuses.items()))
            out.append(f"{g.name:<12} {g.what:<{ww}} {g.count:>9,} {g.ok:>9,} "
                       f"{_us(_div(q.quantile(0.5))):>9} {_us(_div(q.quantile(0.99))):>9} "
                       f"{_us(_div(q.max if q.n else None)):>9}  {sts}")
    until = "last completion" if r.stop_reason == "done" else "the stop"
    out += ["", f"simulated time {r.elapsed_ns / 1000:.3f} us (traffic start to {until}), "
                f"{r.wall_s:.2f} s wall"]
    gp = goodput(r)
    if gp:
        out.append("goodput (payload of successful WRs / the time they were in flight):")
        for g in gp:
            rate = "-" if g["gbps"] is None else f"{g['gbps']:.2f} Gb/s"
            out.append(f"  {g['src']} -> {g['dst']}: {g['bytes']:,} B in {g['wrs']:,} WRs "
                       f"over {g['in_flight_us']:.3f} us: {rate}")
    if c.latency.n:
        s = c.latency.summary((0.5, 0.99, 0.999))
        out.append("latency us: " + ", ".join(
            f"{k} {v / 1000:.2f}" for k, v in s.items()
            if k in ("min", "p50", "p99", "p99.9", "max")))
    fct = fct_table(r)
    if fct and (c.total > MAX_ROWS or len(r.groups) > len(sc.ops)):
        out.append("FCT slowdown (completion time / the same message alone on an idle path):")
        out.append(f"  {'size':<14} {'flows':>9} {'p50':>8} {'p95':>8} {'p99':>8}")
        for row in fct:
            out.append(f"  {row['bucket']:<14} {row['flows']:>9,} {row['p50']:>8.2f} "
                       f"{row['p95']:>8.2f} {row['p99']:>8.2f}")
    out += ["", "counters:"]
    names = list(r.counters)
    out.append(f"  {'':<34}" + "".join(f"{n:>14}" for n in names))
    for k in KEY_COUNTERS:
        out.append(f"  {k:<34}" + "".join(f"{r.counters[n].get(k, 0):>14}" for n in names))
    drops = {f"{n}.{k}": v for n in names for k, v in r.counters[n].items()
             if k.startswith("rx_drop.") and v}
    if drops:
        out.append("  drops: " + ", ".join(f"{k}={v}" for k, v in drops.items()))
    out += _fabric(r)
    out.append("")
    if any(r.faults.values()):
        out.append("link faults: " + ", ".join(f"{k} {v}" for k, v in r.faults.items()))
    if len(r.pcaps) > 1:
        out.append(f"pcaps ({len(r.pcaps)}, one per tapped port): " + ", ".join(r.pcaps))
    elif r.pcap:
        out.append(f"pcap: {r.pcap}")
    if r.stop_reason == TIME_LIMIT:
        out.append(f"stopped: time limit ({r.stop_detail})")
    elif r.stop_reason == NO_PROGRESS:
        out.append(f"stopped: no progress ({r.stop_detail}; stop.stall_us sets how long)")
    if c.outstanding:
        out.append(f"not completed: {c.outstanding:,} WRs had no completion when the run "
                   f"stopped")
    if c.unknown:
        out.append(f"status unknown: {c.unknown:,} unsignaled WRs with no later completion on "
                   f"their QP (signal the last WR of a QP to know how it ended)")
    if r.buffer_waits:
        out.append(f"note: WRs waited {r.buffer_waits:,} times for buffer memory (raise "
                   f"host.buffer_mib)")
    if c.errors:
        by: dict[str, int] = {}
        for g in r.groups:
            for k, v in g.statuses.items():
                if k not in ("SUCCESS", "outstanding", "unknown"):
                    by[k] = by.get(k, 0) + v
        first = min(c.error_wrs, key=lambda w: w.index)
        out.append(f"error completions: {c.errors:,} ("
                   + ", ".join(f"{k} {v:,}" for k, v in by.items())
                   + f"; first: WR {first.index} {first.msg.op.value} "
                   f"{status_name(first.status)})")
    if c.first_bad is None:
        skipped = c.errors + c.outstanding + c.unknown
        note = f"; {skipped:,} WRs that did not complete successfully place nothing to check" \
            if skipped else ""
        out.append(f"integrity: OK ({c.verified_bytes:,} bytes verified{note})")
    else:
        w = c.first_bad
        out.append(f"integrity: FAILED at WR {w.index} ({w.msg.op.value}, {w.nbytes} "
                   f"bytes): {w.integrity}")
    if r.breakdown is not None:
        from nicsim.trace.breakdown import text

        out += ["", *text(r.breakdown)]
    if r.out is not None:
        out.append(f"results: {r.out}/ ({', '.join(r.files)})")
    return "\n".join(out)


def _div(v: float | None) -> float | None:
    return None if v is None else v / 1000.0


def _fabric(r: RunResult) -> list[str]:
    """A line per switch (what its queues did) and one for congestion control."""
    out = []
    for name, c in r.switches.items():
        ports = sorted({k.split(".")[0] for k in c if k.startswith("p")})
        deepest = max(((c[f"{p}.q{q}.max_depth_bytes"], f"{p}.q{q}") for p in ports
                       for q in range(8)), default=(0, "-"))
        drops = {k.removeprefix("dropped."): v for k, v in c.items()
                 if k.startswith(("dropped.", "drop.")) and v}
        out.append(
            f"  switch {name}: ECN-marked {c['ecn_marked']:,}, PFC pauses sent "
            f"{sum(c[f'{p}.pause_sent'] for p in ports):,} (resumes "
            f"{sum(c[f'{p}.resume_sent'] for p in ports):,}), deepest queue {deepest[0]:,} B "
            f"({deepest[1]}), drops " + (", ".join(f"{k} {v:,}" for k, v in drops.items())
                                          or "0"))
    wd = pfc_watchdog(r)
    if wd is not None:
        def on(w: dict[str, Any]) -> str:
            return f"detect {w['detect_ms']:g} ms, restore {w['restore_ms']:g} ms" \
                if w["enabled"] else "off"

        out.append(f"  PFC watchdog (switches: {on(wd['switch'])}; NICs: {on(wd['nic'])}): "
                   f"storms {wd['storms']:,}, restored {wd['restores']:,}, frames dropped "
                   f"{wd['dropped']:,}, pauses ignored {wd['pauses_ignored']:,}"
                   + ("" if not wd["queues"] else " (" + ", ".join(
                       q["where"] for q in wd["queues"]) + ")"))
    tot = {k: sum(n.get(k, 0) for n in r.counters.values())
           for k in ("np.cnp_sent", "np.cnp_suppressed", "cc.cnp_received", "cc.rate_cuts",
                     "rx.cnp_ignored")}
    if any(tot.values()):
        out.append(f"  congestion control: CNPs sent {tot['np.cnp_sent']:,} (suppressed "
                   f"{tot['np.cnp_suppressed']:,} by the interval), received "
                   f"{tot['cc.cnp_received']:,} (ignored {tot['rx.cnp_ignored']:,}), rate cuts "
                   f"{tot['cc.rate_cuts']:,}")
    return out


def json_report(r: RunResult) -> dict[str, Any]:
    d = summary(r)
    d["wrs_detail"] = wr_rows(r)
    if r.breakdown is not None:
        d["breakdown"] = r.breakdown
    return d
