"""HPCC (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019): a sender's
window from the in-flight bytes its path's switches report with INT.

Switches add a record of their egress port to each data packet (queue length qLen, bytes
sent txBytes, timestamp ts, link rate B; nicsim.wire.telemetry, SwitchConfig.int_telemetry)
and the receiver echoes the records in its ACK. Per ACK, with L the records of the previous
ACK and T the base RTT (section 3, Algorithm 1):

    MeasureInflight, over the hops i of the path:
        txRate  = (ack.L[i].txBytes - L[i].txBytes) / (ack.L[i].ts - L[i].ts)
        u'      = min(ack.L[i].qLen, L[i].qLen) / (ack.L[i].B * T) + txRate / ack.L[i].B
        u, tau  = the largest u' and its ack.L[i].ts - L[i].ts
        tau     = min(tau, T)
        U       = (1 - tau/T) U + tau/T u   (an EWMA over about one T of ACKs)
    ComputeWind:
        if U >= eta or incStage >= maxStage:  W = Wc / (U/eta) + W_AI   (MI/MD);
                                               if updateWc: incStage = 0, Wc = W
        else:                                 W = Wc + W_AI                         (AI);
                                               if updateWc: incStage += 1, Wc = W
    NewAck: updateWc when ack.seq > lastUpdateSeq, which then becomes snd_nxt
        (Wc moves once per RTT; W follows every ACK); R = W / T.

W starts at W_init = B_nic x T (line rate) and U at 1. W_AI = R_AI x T (HPCC's ns-3 takes the
additive step as a rate too). An ACK whose path has another number of hops than the last
(a new path) only replaces L. Hops whose timestamp did not move are skipped (no rate from
them), and an ACK with no such hop changes nothing.

What the model leaves out: HPCC also limits the bytes in flight to W (a window); the NIC's
send engine keeps rates only, so the QP is paced at R = W/T and not also held to W.
snd_nxt is the PSN after the last packet handed to the port (RateControl.snd_nxt).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nicsim.nic.cc.config import _check
from nicsim.nic.cc.control import RateControl, Signal
from nicsim.nic.qp import QpCtx, psn_diff
from nicsim.wire.telemetry import IntHop, bytes_delta, ts_delta


@dataclass(frozen=True)
class HpccParams:
    eta: float = 0.95  # target utilization (eta; the paper runs 95%)
    max_stage: int = 5  # AI steps before a multiplicative update (maxStage; the paper's 5)
    base_rtt_us: float = 8.0  # T: the base RTT of the fabric (set it to yours)
    # W_AI = rai x T (HPCC's ns-3 gives the step as a rate). Chosen here: fairness comes
    # from the additive step (section 3), and a step of a few hundred bytes per RTT brings
    # flows within 10% of each other in a millisecond or two.
    rai_mbps: float = 500.0
    min_rate_mbps: float = 100.0

    def check(self) -> None:
        _check(0 < self.eta <= 1, "eta", "must be in (0, 1]")
        _check(self.max_stage >= 0, "max_stage", "must be >= 0")
        _check(self.base_rtt_us > 0, "base_rtt_us", "must be > 0")
        _check(self.rai_mbps >= 0, "rai_mbps", "must be >= 0")
        _check(self.min_rate_mbps > 0, "min_rate_mbps", "must be > 0")


class HpccState:
    __slots__ = ("w", "wc", "u", "inc_stage", "last_update_seq", "prev")

    def __init__(self, w_init: float) -> None:
        self.w = w_init
        self.wc = w_init
        self.u = 1.0
        self.inc_stage = 0
        self.last_update_seq: int | None = None
        self.prev: Sequence[IntHop] | None = None


class Hpcc(RateControl):
    name = "hpcc"
    signals = Signal.INT | Signal.RTT  # (RTT: for snd_nxt)
    Params = HpccParams

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        p: HpccParams = self.p
        self.t_ns = p.base_rtt_us * 1000.0
        self.counters.update({k: 0 for k in ("int_acks", "window_updates", "mi_md",
                                             "additive_increase")})

    def w_init(self) -> float:
        """B_nic x T, bytes."""
        return self.line_gbps / 8.0 * self.t_ns

    def on_int(self, qp: QpCtx, psn: int, hops: Sequence[IntHop]) -> None:
        """NewAck (Algorithm 1)."""
        self.counters["int_acks"] += 1
        s = qp.ccs
        if s is None:
            s = qp.ccs = HpccState(self.w_init())
        prev = s.prev
        s.prev = hops
        if prev is None or len(prev) != len(hops) or not hops:
            return
        u = self.measure_inflight(s, prev, hops)
        if u is None:
            return
        update = s.last_update_seq is None or psn_diff(psn, s.last_update_seq) > 0
        w = self.compute_wind(s, u, update)
        if update:
            s.last_update_seq = self.snd_nxt(qp)
        self.counters["window_updates"] += 1
        s.w = w
        rate = w * 8.0 / self.t_ns
        lo = self.p.min_rate_mbps / 1000.0
        self.set_rate(qp, rate if rate > lo else lo)
        self.record(qp, u)

    def measure_inflight(self, s: HpccState, prev: Sequence[IntHop],
                         hops: Sequence[IntHop]) -> float | None:
        """U (Algorithm 1, MeasureInflight); None when no hop's timestamp moved."""
        t = self.t_ns
        u = -1.0
        tau = t
        for new, old in zip(hops, prev, strict=True):
            dt = ts_delta(new.ts_ns, old.ts_ns)
            if dt == 0:
                continue
            b = new.rate_gbps / 8.0  # bytes per ns
            tx_rate = bytes_delta(new.tx_bytes, old.tx_bytes) / dt
            u1 = min(new.qlen_bytes, old.qlen_bytes) / (b * t) + tx_rate / b
            if u1 > u:
                u, tau = u1, dt
        if u < 0:
            return None
        if tau > t:
            tau = t
        s.u = (1.0 - tau / t) * s.u + tau / t * u
        return s.u

    def compute_wind(self, s: HpccState, u: float, update_wc: bool) -> float:
        """W (Algorithm 1, ComputeWind)."""
        p: HpccParams = self.p
        wai = p.rai_mbps / 8000.0 * self.t_ns  # Mb/s -> bytes per ns, times T
        if u >= p.eta or s.inc_stage >= p.max_stage:
            self.counters["mi_md"] += 1
            w = s.wc / (u / p.eta) + wai
            if update_wc:
                s.inc_stage = 0
                s.wc = w
        else:
            self.counters["additive_increase"] += 1
            w = s.wc + wai
            if update_wc:
                s.inc_stage += 1
                s.wc = w
        return w
