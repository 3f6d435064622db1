"""Human and JSON reports of a scenario run."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from driver.user.enums import ibv_wc_status
from nicsim.scenario.runner import RunResult

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


def _status(s: int) -> str:
    if s < 0:
        return "NOT_COMPLETED"
    try:
        return ibv_wc_status(s).name.removeprefix("IBV_WC_")
    except ValueError:
        return str(s)


def text_report(r: RunResult) -> str:
    sc = r.scenario
    out = [f"scenario {sc.name}: {r.total_wrs} WRs, link {sc.link.rate_gbps:g} Gb/s, "
           f"MTU {sc.qp.path_mtu}, depth {sc.depth}", ""]
    if r.wrs and len(r.wrs) <= MAX_ROWS:
        out.append(f"{'#':>4}  {'opcode':<10} {'bytes':>9} {'sges':>4} {'latency ns':>11}  status")
        for w in r.wrs:
            out.append(f"{w.index:>4}  {w.spec.op.value:<10} {w.spec.bytes:>9} "
                       f"{w.spec.sges:>4} {w.latency_ns:>11.1f}  {_status(w.status)}")
    else:
        out.append(f"{'op':<10} {'bytes':>9} {'count':>9} {'min ns':>10} {'avg ns':>10} "
                   f"{'max ns':>10}  statuses")
        for st in r.stats:
            ok = sum(v for k, v in st.statuses.items() if k >= 0)
            avg = st.lat_sum / ok if ok else 0.0
            sts = ",".join(sorted({_status(k) for k in st.statuses}))
            out.append(f"{st.spec.op.value:<10} {st.spec.bytes:>9} {st.count:>9} "
                       f"{st.lat_min if ok else 0.0:>10.1f} {avg:>10.1f} {st.lat_max:>10.1f}  "
                       f"{sts}")
    total = r.payload_bytes
    gbps = total * 8 / r.elapsed_ns if r.elapsed_ns else 0.0
    out += ["", f"simulated time {r.elapsed_ns / 1000:.3f} us, {total} payload bytes, "
                f"{gbps:.2f} Gb/s", "", "counters:"]
    names = list(r.counters)
    out.append(f"  {'':<34}" + "".join(f"{n:>14}" for n in names))
    for k in KEY_COUNTERS:
        out.append(f"  {k:<34}" + "".join(f"{r.counters[n].get(k, 0):>14}" for n in names))
    drops = {f"{n}.{k}": v for n in names for k, v in r.counters[n].items()
             if k.startswith("rx_drop.") and v}
    if drops:
        out.append("  drops: " + ", ".join(f"{k}={v}" for k, v in drops.items()))
    out.append("")
    if any(r.faults.values()):
        out.append("link faults: " + ", ".join(f"{k} {v}" for k, v in r.faults.items()))
    if r.pcap:
        out.append(f"pcap: {r.pcap}")
    if r.timed_out:
        out.append(f"timeout: simulation passed {sc.timeout_us} us with WRs outstanding")
    if r.error_count:
        by: dict[str, int] = defaultdict(int)
        for st in r.stats:
            for k, v in st.statuses.items():
                if k:
                    by[_status(k)] += v
        first = min(r.error_wrs, key=lambda w: w.index)
        out.append(f"error completions: {r.error_count} ("
                   + ", ".join(f"{k} {v}" for k, v in by.items())
                   + f"; first: WR {first.index} {first.spec.op.value} "
                   f"{_status(first.status)})")
    if r.first_bad is None:
        unchecked = f"; {r.error_count} WRs with error completions place nothing to check" \
            if r.error_count else ""
        out.append(f"integrity: OK ({r.verified_bytes} bytes verified{unchecked})")
    else:
        w = r.first_bad
        out.append(f"integrity: FAILED at WR {w.index} ({w.spec.op.value}, {w.spec.bytes} "
                   f"bytes): {w.integrity}")
    return "\n".join(out)


def json_report(r: RunResult) -> dict[str, Any]:
    return {
        "scenario": r.scenario.name,
        "ok": r.ok,
        "elapsed_ns": r.elapsed_ns,
        "verified_bytes": r.verified_bytes,
        "integrity": "OK" if r.first_bad is None else f"FAILED at WR {r.first_bad.index}",
        "pcap": r.pcap,
        "link_faults": r.faults,
        "total_wrs": r.total_wrs,
        "wrs": [{"index": w.index, "op": w.spec.op.value, "bytes": w.spec.bytes,
                 "latency_ns": w.latency_ns, "status": _status(w.status),
                 "integrity": w.integrity} for w in r.wrs],
        "ops": [{"op": st.spec.op.value, "bytes": st.spec.bytes, "count": st.count,
                 "latency_ns": {"min": st.lat_min if st.lat_sum else 0.0, "max": st.lat_max,
                                "sum": st.lat_sum},
                 "statuses": {_status(k): v for k, v in st.statuses.items()}}
                for st in r.stats],
        "counters": r.counters,
    }
