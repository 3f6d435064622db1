"""DCTCP's control law on RoCE (Alizadeh et al., "Data Center TCP (DCTCP)", SIGCOMM 2010,
section 3.1; the sender's rules as RFC 8257 section 3.3 words them), as a rate: the fraction
of marked packets per window sets how hard to cut.

Switches mark ECN by a threshold on the queue (RED with Kmin = Kmax is DCTCP's K); the
receiving NIC's notification point sends a CNP per CE-marked packet (the `dctcp` preset sets
cnp.interval_us 0, so each CNP stands for one mark: RoCE's ECN-echo). A window of data runs
from the PSN next to send when it began until an ACK covers it (TCP's "one window of data,
roughly one RTT"):

    the first mark of a window: rate = rate (1 - alpha / 2)   (the cwnd cut of section 3.1,
                                                          at most once per window)
    at the end of each window:  F = marked / acknowledged packets (at most 1),
                                alpha = (1 - g) alpha + g F                  (equation (1)),
                                and without marks rate = rate + R_AI  (TCP's one segment
                                                          per RTT, as a rate)

g = 1/16 as in the paper (section 3.4 gives the bound it satisfies). The rate starts at the
line rate and stays in [min_rate, line rate]; alpha starts at alpha_init (1: the first marks
halve the rate, as RFC 8257 section 3.3 starts, DCTCP.Alpha = 1).
"""

from __future__ import annotations

from dataclasses import dataclass

from nicsim.nic.cc.config import _check
from nicsim.nic.cc.control import RateControl, Signal
from nicsim.nic.qp import PSN_MASK, QpCtx, psn_diff


@dataclass(frozen=True)
class DctcpParams:
    g: float = 1 / 16
    alpha_init: float = 1.0
    rai_mbps: float = 1000.0  # additive increase per window without marks (chosen here)
    min_rate_mbps: float = 100.0

    def check(self) -> None:
        _check(0 < self.g <= 1, "g", "must be in (0, 1]")
        _check(0 <= self.alpha_init <= 1, "alpha_init", "must be in [0, 1]")
        _check(self.rai_mbps >= 0, "rai_mbps", "must be >= 0")
        _check(self.min_rate_mbps > 0, "min_rate_mbps", "must be > 0")


class DctcpState:
    __slots__ = ("rate", "alpha", "acked", "marked", "last_psn", "window_end", "cut")

    def __init__(self, rate: float, alpha: float) -> None:
        self.rate = rate
        self.alpha = alpha
        self.acked = 0
        self.marked = 0
        self.last_psn: int | None = None
        self.window_end: int | None = None  # the last PSN of the window
        self.cut = False  # this window's cut is made


class Dctcp(RateControl):
    name = "dctcp"
    signals = Signal.CNP | Signal.RTT  # (RTT: ACKs, and snd_nxt for the windows)
    Params = DctcpParams

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        p: DctcpParams = self.p
        self.rai = p.rai_mbps / 1000.0
        self.min_rate = p.min_rate_mbps / 1000.0
        self.counters.update({k: 0 for k in ("windows", "rate_cuts", "additive_increase")})

    def _state(self, qp: QpCtx) -> DctcpState:
        s = qp.ccs
        if s is None:
            s = qp.ccs = DctcpState(self.line_gbps, self.p.alpha_init)
        return s

    def on_cnp(self, qp: QpCtx) -> None:
        self.counters["cnp_received"] += 1
        s = self._state(qp)
        s.marked += 1
        if not s.cut:
            s.cut = True
            self.counters["rate_cuts"] += 1
            s.rate = max(self.min_rate, s.rate * (1.0 - s.alpha / 2.0))
            self.set_rate(qp, s.rate)
            self.record(qp, s.alpha)

    def on_ack(self, qp: QpCtx, psn: int, rtt_ns: float | None) -> None:
        s = self._state(qp)
        if s.last_psn is None:
            s.last_psn = psn
            s.window_end = (self.snd_nxt(qp) - 1) & PSN_MASK
            return
        d = psn_diff(psn, s.last_psn)
        if d > 0:
            s.acked += d
            s.last_psn = psn
        if psn_diff(psn, s.window_end) >= 0:  # type: ignore[arg-type]
            self.window(qp, s)
            s.window_end = (self.snd_nxt(qp) - 1) & PSN_MASK

    def window(self, qp: QpCtx, s: DctcpState) -> None:
        """One window ended: alpha (equation (1)); the increase if it had no marks."""
        p: DctcpParams = self.p
        self.counters["windows"] += 1
        f = min(1.0, s.marked / s.acked) if s.acked else (1.0 if s.marked else 0.0)
        s.alpha = (1.0 - p.g) * s.alpha + p.g * f
        if not s.marked:
            self.counters["additive_increase"] += 1
            s.rate = min(self.line_gbps, s.rate + self.rai)
            self.set_rate(qp, s.rate)
        s.acked = s.marked = 0
        s.cut = False
        self.record(qp, s.alpha)
