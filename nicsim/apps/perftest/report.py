"""What perftest prints: the header block, the address lines, the result tables, its JSON.

Layouts follow perftest's (ctx_print_test_info, ctx_print_pingpong_data, print_report_bw,
print_report_lat and their JSON writers in perftest_parameters.c / perftest_communication.c):
the same lines, columns, units and number formats, so a script that reads perftest's output
reads these. The arithmetic is perftest's too: bandwidth from the first post to the last
completion, peak over every window of posted-to-completed WRs at CQ-moderation boundaries,
latency from the time between consecutive posts with the two largest samples dropped, halved
for WRITE and SEND (one way) and whole for READ and atomics (a round trip).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from nicsim.apps.perftest.params import Conn, Params, TestKind, Verb

LINE = "-" * 87
# What a server prints first (before it has a client to talk to), a blank line above it.
BANNER = ["", "*" * 36, "* Waiting for client to connect... *", "*" * 36]
_MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
LAT_TAIL = 2  # the largest samples perftest leaves out (LAT_MEASURE_TAIL)


@dataclass
class Dest:
    """One end of a QP pair as perftest exchanges it (struct pingpong_dest)."""

    lid: int
    qpn: int
    psn: int
    rkey: int
    vaddr: int
    out_reads: int
    gid: bytes


@dataclass
class Setup:
    """What the run found on the device: the values the header prints."""

    device: str
    mtu_enum: int
    inline: int
    out_reads: int
    gid_index: int


def _test_words(p: Params) -> list[str]:
    """The test's name as ctx_print_test_info builds it: verb, atomic type, Bidirectional."""
    words = [p.verb.value]
    if p.verb is Verb.ATOMIC:
        words.append(p.atomic_type.value)
    if p.kind is TestKind.BW and p.duplex:
        words.append("Bidirectional")
    return [*words, "BW" if p.kind is TestKind.BW else "Latency"]


def title(p: Params) -> str:
    return " " * 20 + " ".join(_test_words(p)) + " Test"


def _depths(p: Params, server: bool) -> list[tuple[str, int]]:
    """The queue depths an end prints: TX depth the client's (or both in a bidirectional
    run), RX depth the receiving server's for SEND (or both ends' in a bidirectional run)."""
    out = []
    if not server or p.duplex:
        out.append(("TX depth", p.tx_depth))
    if p.verb is Verb.SEND and (server or p.duplex):
        out.append(("RX depth", p.rx_depth))
    return out


def header(p: Params, s: Setup, server: bool = False) -> list[str]:
    """ctx_print_test_info, as the client prints it or (`server`) the server."""
    out = [LINE, title(p),
           f" Dual-port       : OFF\t\tDevice         : {s.device}",
           f" Number of qps   : {p.num_qps}\t\tTransport type : IB",
           f" Connection type : {p.conn.value}\t\tUsing SRQ      : OFF",
           " PCIe relax order: ON\t\tLock-free      : OFF",
           " ibv_wr* API     : ON\t\tUsing Enhanced Reorder      : OFF"]
    out += [f" {name:<16}: {depth}" for name, depth in _depths(p, server)]
    if p.kind is TestKind.BW:
        out += [f" CQ Moderation   : {p.cq_mod}", " CQE Poll Batch  : Dynamic"]
    out += [f" Mtu             : {_MTU_BYTES[s.mtu_enum]}[B]", " Link type       : Ethernet",
            f" GID index       : {s.gid_index}"]
    if p.verb in (Verb.READ, Verb.ATOMIC):
        out.append(f" Outstand reads  : {s.out_reads}")
    else:
        out.append(f" Max inline data : {s.inline}[B]")
    out += [f" rdma_cm QPs\t : {'ON' if p.rdma_cm else 'OFF'}", " Data ex. method : Ethernet",
            LINE]
    return out


def dest_lines(p: Params, side: str, d: Dest) -> list[str]:
    """perftest's address line (BASIC_ADDR_FMT, then OUT for READ, RKey/VAddr for READ and
    WRITE) and its GID line, where every byte is printed in decimal."""
    line = f" {side} address: LID {_alt(d.lid, 4)} QPN {_alt(d.qpn, 6)} PSN {_alt(d.psn, 6)}"
    if p.verb is Verb.READ:
        line += f" OUT {_alt(d.out_reads, 4)}"
    if p.verb in (Verb.READ, Verb.WRITE):
        line += f" RKey {_alt(d.rkey, 8)} VAddr {_alt(d.vaddr, 16)}"
    gid = ":".join(f"{b:02d}" for b in d.gid)
    return [line, f" GID: {gid}"]


def _alt(v: int, width: int) -> str:
    """C's %#0Nx: a 0x prefix counted in the width, and no prefix for zero."""
    return f"{v:#0{width}x}" if v else "0" * width


def bw_columns(p: Params) -> list[str]:
    unit = "Gb/sec" if p.report_gbits else "MiB/sec"
    head = (f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   "
            f"MsgRate[Mpps]")
    return [LINE, head]


def lat_columns(p: Params) -> list[str]:
    if p.duration is not None:
        return [LINE, " #bytes        #iterations       t_avg[usec]    tps average"]
    return [LINE, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    "
                  "t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% "
                  "percentile[usec] "]


@dataclass
class BwResult:
    size: int
    iters: int
    bw_peak: float
    bw_avg: float
    msg_rate: float
    gbits: bool
    own_avg: float | None = None  # a bidirectional sum's: this end's own average

    def line(self) -> str:
        # perftest's extra digits for a slow link (judged by the printing end's own average)
        if self.gbits and (self.bw_avg if self.own_avg is None else self.own_avg) < 0.1:
            return (f" {self.size:<7}    {self.iters}           {self.bw_peak:<7.6f}            "
                    f"{self.bw_avg:<7.6f}            {self.msg_rate:<7.6f}")
        return (f" {self.size:<7}    {self.iters:<10}       {self.bw_peak:<7.2f}            "
                f"{self.bw_avg:<7.2f}\t\t     {self.msg_rate:<7.6f}")

    def json(self) -> dict[str, Any]:
        return {"MsgSize": self.size, "n_iterations": self.iters,
                "BW_peak": round(self.bw_peak, 6), "BW_average": round(self.bw_avg, 6),
                "MsgRate": round(self.msg_rate, 6)}


def _unit(p: Params) -> int:
    """Bytes per second of one reported unit: Gb/s with --report_gbits, else MiB/s."""
    return 125_000_000 if p.report_gbits else 0x100000


def bw_result(p: Params, size: int, posted: np.ndarray, completed: np.ndarray,
              iters: int) -> BwResult:
    """perftest's print_report_bw on times in ns: `posted[i]` when WR i was posted,
    `completed[k-1]` when the completion that made k WRs complete was polled."""
    unit = _unit(p)
    span = (completed[iters - 1] - posted[0]) * 1e-9
    avg = size * iters / span / unit
    rate = iters / span / 1e6
    peak = 0.0
    if not p.no_peak:
        best = completed[iters - 1] - posted[0]
        # Every window from post i to a completion j at a moderation boundary, per WR.
        ends = list(range(p.cq_mod - 1, iters, p.cq_mod))
        if iters % p.cq_mod:
            ends.append(iters - 1)
        j = np.asarray(ends)
        for i in range(iters):
            js = j[j >= i]
            if js.size:
                best = min(best, float(np.min((completed[js] - posted[i]) / (js - i + 1))))
        peak = size / (best * 1e-9) / unit
    return BwResult(size, iters, peak, avg, rate, p.report_gbits)


def bw_sum(mine: BwResult, theirs: BwResult) -> BwResult:
    """print_full_bw_report of a bidirectional run: this end's figures plus the other end's
    (each end measures what it sent), the peaks summed too; the iterations are this end's."""
    return BwResult(mine.size, mine.iters, mine.bw_peak + theirs.bw_peak,
                    mine.bw_avg + theirs.bw_avg, mine.msg_rate + theirs.msg_rate, mine.gbits,
                    mine.bw_avg)


def bw_timed(p: Params, size: int, start: float, stop: float, iters: int) -> BwResult:
    """A duration run's bandwidth: the WRs completed in the sampled window over its length
    (no peak: perftest measures none in duration mode)."""
    unit = _unit(p)
    span = (stop - start) * 1e-9
    return BwResult(size, iters, 0.0, size * iters / span / unit, iters / span / 1e6,
                    p.report_gbits)


@dataclass
class LatTimed:
    """A duration run's latency (print_report_lat_duration): the sampled window over the
    exchanges in it, halved for WRITE and SEND; and exchanges per second."""

    size: int
    iters: int
    t_avg: float
    tps: float

    def line(self) -> str:
        return f" {self.size:<7}       {self.iters}            {self.t_avg:<7.2f}        " \
               f"{self.tps:<7.2f}"

    def json(self) -> dict[str, Any]:
        return {"MsgSize": self.size, "n_iterations": self.iters,
                "t_avg": round(self.t_avg, 2), "tps_average": round(self.tps, 2)}


def lat_timed(p: Params, size: int, start: float, stop: float, iters: int) -> LatTimed:
    factor = 1 if p.verb in (Verb.READ, Verb.ATOMIC) else 2
    span_us = (stop - start) / 1000.0
    return LatTimed(size, iters, span_us / factor / max(iters, 1), iters / (span_us * 1e-6))


@dataclass
class LatResult:
    size: int
    iters: int
    t_min: float
    t_max: float
    t_typical: float
    t_avg: float
    t_stdev: float
    p99: float
    p999: float

    def line(self) -> str:
        return (f" {self.size:<7} {self.iters}          {self.t_min:<7.2f}        "
                f"{self.t_max:<7.2f}      {self.t_typical:<7.2f}  \t       {self.t_avg:<7.2f}"
                f"     \t{self.t_stdev:<7.2f}\t\t{self.p99:<7.2f} \t\t{self.p999:<7.2f}")

    def json(self) -> dict[str, Any]:
        return {"MsgSize": self.size, "n_iterations": self.iters,
                "t_min": round(self.t_min, 2), "t_max": round(self.t_max, 2),
                "t_typical": round(self.t_typical, 2), "t_avg": round(self.t_avg, 2),
                "t_stdev": round(self.t_stdev, 2), "percentile_99": round(self.p99, 2),
                "percentile_99_9": round(self.p999, 2)}


def lat_result(p: Params, size: int, posted: np.ndarray) -> LatResult:
    """perftest's print_report_lat on post times in ns."""
    factor = 1 if p.verb in (Verb.READ, Verb.ATOMIC) else 2
    delta = np.sort(np.diff(posted)) / 1000.0 / factor  # usec, one way or round trip
    n = len(delta) - LAT_TAIL
    kept = delta[:n]
    median = (kept[n // 2] + kept[n // 2 - 1]) / 2 if (n - 1) % 2 else kept[n // 2]
    avg = float(kept.mean())
    stdev = float(np.sqrt(np.mean((kept - avg) ** 2)))
    return LatResult(size, len(posted), float(delta[0]), float(delta[n]), float(median), avg,
                     stdev, float(delta[math.ceil(n * 0.99)]),
                     float(delta[math.ceil(n * 0.999)]))


def test_info_json(p: Params, s: Setup) -> dict[str, Any]:
    test = "_".join([*_test_words(p), "Test"])
    info: dict[str, Any] = {"test": test, "Dual_port": "OFF", "Device": s.device,
                            "Number_of_qps": p.num_qps, "Transport_type": "IB",
                            "Connection_type": p.conn.value, "Using_SRQ": "OFF",
                            "PCIe_relax_order": "ON", "ibv_wr_API": "ON"}
    info.update({name.replace(" ", "_"): depth for name, depth in _depths(p, False)})
    if p.kind is TestKind.BW:
        info["CQ_Moderation"] = p.cq_mod
    info.update({"Mtu": _MTU_BYTES[s.mtu_enum], "Link_type": "Ethernet",
                 "GID_index": s.gid_index})
    if p.verb in (Verb.READ, Verb.ATOMIC):
        info["Outstand_reads"] = s.out_reads
    else:
        info["Max_inline_data"] = s.inline
    info.update({"rdma_cm_QPs": "ON" if p.rdma_cm else "OFF", "Use_ROCm_memory": "OFF",
                 "Use_MUSA_memory": "OFF", "Data_ex_method": "Ethernet"})
    return info


def out_json(p: Params, s: Setup, results: list[Any], extra: dict[str, Any]) -> str:
    """perftest's --out_json document (test_info, results), one results entry per size as
    perftest writes for its last size; nicsim adds its own keys under `nicsim`."""
    doc: dict[str, Any] = {"test_info": test_info_json(p, s),
                           "results": results[-1].json() if results else {}}
    if len(results) > 1:
        doc["all_results"] = [r.json() for r in results]
    doc["nicsim"] = extra
    return json.dumps(doc, indent=2)


def conn_supported(p: Params) -> bool:
    """The transports nicsim's NIC has: RC for every tool, UC for SEND and WRITE (perftest
    itself refuses UC for READ and atomics), UD for SEND."""
    return p.conn in (Conn.RC, Conn.UC) or (p.conn is Conn.UD and p.verb is Verb.SEND)
