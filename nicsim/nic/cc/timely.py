"""TIMELY (Mittal et al., "TIMELY: RTT-based Congestion Control for the Datacenter", SIGCOMM
2015): a rate from RTT samples and their gradient.

Per RTT sample new_rtt (one per completion event: here, per ACK that answers a packet whose
send time the NIC kept, every `ack_coalesce` packets or each message's last), Algorithm 1
(section 4):

    new_rtt_diff = new_rtt - prev_rtt;  prev_rtt = new_rtt
    rtt_diff = (1 - alpha) rtt_diff + alpha new_rtt_diff            (EWMA of the difference)
    normalized_gradient = rtt_diff / minRTT
    if new_rtt < T_low:   rate = rate + delta                                  (additive)
    elif new_rtt > T_high: rate = rate (1 - beta (1 - T_high / new_rtt))  (multiplicative)
    elif normalized_gradient <= 0: rate = rate + N delta,
        N = 5 after five completions in a row with a non-positive gradient (HAI), else 1
    else: rate = rate (1 - beta normalized_gradient)

The first sample of a QP only sets prev_rtt. The rate starts at the line rate and stays in
[min_rate, line rate]. Counting for HAI: each sample with gradient <= 0 that reaches the
gradient branch counts one, any decrease resets the count (the T_low branch leaves it).

Defaults: delta 10 Mb/s, T_low 50 us, T_high 500 us and beta 0.8 are the values usually run
for TIMELY on 10-40 Gb/s fabrics (HPCC's ns-3 TIMELY among them); alpha 0.875, minRTT 20 us
likewise. They are parameters: set them for your fabric (a 100 Gb/s star's base RTT is a few
microseconds).
"""

from __future__ import annotations

from dataclasses import dataclass

from nicsim.nic.cc.config import _check
from nicsim.nic.cc.control import RateControl, Signal
from nicsim.nic.qp import QpCtx


@dataclass(frozen=True)
class TimelyParams:
    alpha: float = 0.875  # EWMA weight of the RTT difference
    beta: float = 0.8  # multiplicative decrement factor
    delta_mbps: float = 10.0  # additive increment step
    t_low_us: float = 50.0
    t_high_us: float = 500.0
    min_rtt_us: float = 20.0  # normalizes the gradient
    hai_thresh: int = 5  # completions with gradient <= 0 before hyper-active increase
    hai_n: int = 5  # N in HAI mode
    min_rate_mbps: float = 100.0

    def check(self) -> None:
        _check(0 < self.alpha <= 1, "alpha", "must be in (0, 1]")
        _check(0 < self.beta <= 1, "beta", "must be in (0, 1]")
        _check(self.delta_mbps >= 0, "delta_mbps", "must be >= 0")
        _check(0 <= self.t_low_us <= self.t_high_us, "t_low_us",
               "must be >= 0 and at most t_high_us")
        _check(self.min_rtt_us > 0, "min_rtt_us", "must be > 0")
        _check(self.hai_thresh >= 1, "hai_thresh", "must be >= 1")
        _check(self.hai_n >= 1, "hai_n", "must be >= 1")
        _check(self.min_rate_mbps > 0, "min_rate_mbps", "must be > 0")


class TimelyState:
    __slots__ = ("rate", "prev_rtt", "rtt_diff", "neg")

    def __init__(self, rate: float, rtt: float) -> None:
        self.rate = rate
        self.prev_rtt = rtt
        self.rtt_diff = 0.0
        self.neg = 0


class Timely(RateControl):
    name = "timely"
    signals = Signal.RTT
    Params = TimelyParams

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        p: TimelyParams = self.p
        self.delta = p.delta_mbps / 1000.0
        self.t_low = p.t_low_us * 1000.0
        self.t_high = p.t_high_us * 1000.0
        self.min_rtt = p.min_rtt_us * 1000.0
        self.min_rate = p.min_rate_mbps / 1000.0
        self.counters.update({k: 0 for k in ("rtt_samples", "additive_increase",
                                             "hai_increase", "gradient_decrease",
                                             "high_decrease", "low_increase")})

    def on_ack(self, qp: QpCtx, psn: int, rtt_ns: float | None) -> None:
        if rtt_ns is None:
            return
        self.counters["rtt_samples"] += 1
        s = qp.ccs
        if s is None:
            qp.ccs = TimelyState(self.line_gbps, rtt_ns)
            return
        self.set_rate(qp, self.update(s, rtt_ns))
        self.record(qp, s.rtt_diff)

    def update(self, s: TimelyState, new_rtt: float) -> float:
        """Algorithm 1 for one sample; the new rate, Gb/s."""
        p: TimelyParams = self.p
        c = self.counters
        new_rtt_diff = new_rtt - s.prev_rtt
        s.prev_rtt = new_rtt
        s.rtt_diff = (1.0 - p.alpha) * s.rtt_diff + p.alpha * new_rtt_diff
        gradient = s.rtt_diff / self.min_rtt
        rate = s.rate
        if new_rtt < self.t_low:
            c["low_increase"] += 1
            rate += self.delta
        elif new_rtt > self.t_high:
            c["high_decrease"] += 1
            rate *= 1.0 - p.beta * (1.0 - self.t_high / new_rtt)
            s.neg = 0
        elif gradient <= 0:
            s.neg += 1
            n = p.hai_n if s.neg >= p.hai_thresh else 1
            c["hai_increase" if n > 1 else "additive_increase"] += 1
            rate += n * self.delta
        else:
            c["gradient_decrease"] += 1
            rate *= 1.0 - p.beta * gradient
            s.neg = 0
        line = self.line_gbps
        s.rate = min(line, max(self.min_rate, rate))
        return s.rate
