"""A congestion-control algorithm of your own (docs/how-to/add-cc.md): AIMD on CNPs.

A CNP cuts the QP's rate by `beta`; a timer every `period_us` adds `step_mbps` back until the
QP is at line rate again. It also keeps the smallest RTT each QP has seen, to show the ACK
hook. Run it with examples/custom-cc.yaml (`cc: {module: ./my_cc.py, beta: 0.5}`).
"""

from dataclasses import dataclass

from nicsim.nic.cc import RateControl, Signal


@dataclass(frozen=True)
class Params:
    beta: float = 0.5  # a CNP leaves rate x (1 - beta)
    step_mbps: float = 2000.0  # added every period
    period_us: float = 20.0


class Aimd(RateControl):
    name = "aimd"
    signals = Signal.CNP | Signal.RTT  # CNPs, and ACKs with RTT samples
    Params = Params

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.min_rtt: dict[int, float] = {}  # per QP number, ns

    def on_cnp(self, qp) -> None:
        self.counters["cnp_received"] += 1
        rate = self.line_gbps if qp.rate is None else qp.rate
        if qp.ccs is None:  # the first cut: the QP gets a state and a timer
            qp.ccs = "limited"
            self.start_timer(qp, self.p.period_us * 1000)
        self.set_rate(qp, max(0.1, rate * (1 - self.p.beta)))

    def on_timer(self, qp, kind: int) -> None:
        rate = qp.rate + self.p.step_mbps / 1000
        if rate >= self.line_gbps:
            self.forget(qp)  # back at line rate: unlimited, no more timers
            self.rate_changed(qp)
            return
        self.set_rate(qp, rate)
        self.start_timer(qp, self.p.period_us * 1000)

    def on_ack(self, qp, psn: int, rtt_ns: float | None) -> None:
        if rtt_ns is not None:
            self.min_rtt[qp.qpn] = min(rtt_ns, self.min_rtt.get(qp.qpn, rtt_ns))
