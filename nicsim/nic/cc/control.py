"""The interface between the NIC and a congestion-control algorithm (a reaction point).

The send engine knows rates, not algorithms: a QP whose `rate` is None sends as fast as the
engine lets it; otherwise its packets are spaced so that its wire bytes leave at `rate` Gb/s
(nicsim.nic.scheduler.SendEngine.pace). An algorithm is told of the signals a NIC's
congestion control gets and sets rates through `set_rate` (or `qp.rate` and
`rate_changed`):

- `on_cnp(qp)` (Signal.CNP): a CNP for the QP came from its peer (RoCEv2 Annex A17.9.3).
- `on_ack(qp, psn, rtt_ns)` (Signal.ACK, or RTT for samples): an ACK, READ response or
  atomic ACK acknowledged everything up to `psn`; `rtt_ns` is the time since the packet
  `psn` was handed to the port, or None (no RTT asked for, or `psn` was sent again: Karn's
  rule).
- `on_nak(qp, psn, syndrome)` (Signal.NAK): a NAK or RNR NAK, its AETH syndrome (IBA
  9.7.5.1).
- `on_int(qp, psn, hops)` (Signal.INT): the ACK for `psn` echoed the INT records switches
  added to the request it answers (nicsim.wire.telemetry), first hop first.
- `on_sent(qp, nbytes)` (Signal.SENT): a rate-limited QP (qp.rate not None) sent a frame.
- `on_timer(qp, kind)`: a timer `start_timer` set came due, and the QP's state is still
  the one that set it.

Signals cost nothing unless the class lists them in `signals`: the NIC looks at the flags
once, when it is built, and a block that would deliver a signal nobody asked for holds None
instead of a hook. RTT samples in particular need a send time per packet; they are kept only
for an algorithm with Signal.RTT.

Timers go through the simulation kernel's public scheduling API (nicsim.sim.Sim.call_at),
never SimPy's queue. An algorithm's parameters are a frozen dataclass `Params` (class
attribute) with defaults; the scenario's `cc:` mapping sets them, and `check()` refuses bad
values with a CcConfigError naming the field (docs/how-to/add-cc.md).
"""

from __future__ import annotations

from abc import ABC
from collections import deque
from collections.abc import Callable, Sequence
from enum import Flag, auto
from typing import Any, ClassVar

from nicsim.nic.cc.config import CcConfig
from nicsim.nic.counters import new_counters
from nicsim.nic.qp import PSN_MASK, QpCtx, psn_diff
from nicsim.sim import Entry, Sim
from nicsim.wire.telemetry import IntHop, echo


class Signal(Flag):
    """The signals an algorithm asks the NIC for (RateControl.signals)."""

    NONE = 0
    CNP = auto()
    ACK = auto()
    RTT = auto()  # ACKs with an RTT sample (implies ACK), and `snd_nxt`
    NAK = auto()
    SENT = auto()
    INT = auto()  # per-hop INT records echoed in ACKs (and this NIC echoes its peers')


class RateControl(ABC):  # noqa: B024 - every hook is optional; the class is the plug-in base
    """A reaction point: per-QP sending rates from congestion signals.

    Subclasses set `name` (the `cc.algorithm` a scenario names), `signals`, and `Params`
    (a frozen dataclass of their parameters, None: none), and override the hooks they use.
    Per-QP state goes in `qp.ccs` (None until the algorithm first acts on the QP); `forget`
    drops it when the QP is reset or destroyed.
    """

    name: ClassVar[str] = ""
    signals: ClassVar[Signal] = Signal.CNP
    Params: ClassVar[type | None] = None

    def __init__(self, env: Sim, cfg: CcConfig, line_gbps: Callable[[], float],
                 rate_changed: Callable[[QpCtx], None]) -> None:
        self.env = env
        self.cfg = cfg
        self.p: Any = cfg.params
        self._line = line_gbps  # the port's rate, known once it is cabled
        self.rate_changed = rate_changed
        self.counters = new_counters("cnp_received")
        # qpn -> [(time ns, rate Gb/s, the algorithm's state value)], when cfg.trace is set
        self.series: dict[int, list[tuple[float, float, float]]] = {}
        # Per QP number: (PSN, time handed to the port) of packets not yet acknowledged, for
        # RTT samples (only with Signal.RTT).
        self._sent: dict[int, deque[tuple[int, float]]] = {}
        # Per QP number: the PSN after the last one sent (Signal.RTT).
        self._snd_nxt: dict[int, int] = {}
        # Per QP number: the INT trailer of the last request that came in (Signal.INT), which
        # the next ACK echoes.
        self._echo: dict[int, bytes] = {}

    @property
    def line_gbps(self) -> float:
        return self._line()

    # -- hooks (override the ones the algorithm uses, and list them in `signals`) ----------

    def on_cnp(self, qp: QpCtx) -> None:  # noqa: B027 - optional hook
        """A CNP for this QP arrived from its peer."""

    def on_ack(self, qp: QpCtx, psn: int, rtt_ns: float | None) -> None:  # noqa: B027
        """Everything up to `psn` is acknowledged; `rtt_ns` its RTT sample, if any."""

    def on_nak(self, qp: QpCtx, psn: int, syndrome: int) -> None:  # noqa: B027
        """A NAK (syndrome 0x60..0x7F) or RNR NAK (0x20..0x3F) for `psn` arrived."""

    def on_int(self, qp: QpCtx, psn: int, hops: Sequence[IntHop]) -> None:  # noqa: B027
        """The ACK for `psn` echoed these INT records, first hop first."""

    def on_sent(self, qp: QpCtx, nbytes: int) -> None:  # noqa: B027 - optional hook
        """A rate-limited QP sent a frame of `nbytes` bytes."""

    def on_timer(self, qp: QpCtx, kind: int) -> None:  # noqa: B027 - optional hook
        """A timer `start_timer(qp, ..., kind)` set came due."""

    def forget(self, qp: QpCtx) -> None:
        """The QP was reset or destroyed: drop its state (its timers lapse), line rate."""
        qp.ccs = None
        qp.rate = None
        self._sent.pop(qp.qpn, None)
        self._snd_nxt.pop(qp.qpn, None)
        self._echo.pop(qp.qpn, None)

    # -- services for algorithms -----------------------------------------------------------

    def start_timer(self, qp: QpCtx, delay_ns: float, kind: int = 0) -> None:
        """`on_timer(qp, kind)` in `delay_ns`, unless the QP's state (qp.ccs) has changed
        by then (forgotten or replaced): a timer belongs to the state that set it."""
        self.env.call_at(self.env.now + delay_ns, self._timer_due, (qp, qp.ccs, kind))

    def _timer_due(self, e: Entry) -> None:
        qp, state, kind = e.value  # type: ignore[misc]
        if qp.ccs is state:
            self.on_timer(qp, kind)

    def snd_nxt(self, qp: QpCtx) -> int:
        """The PSN after the last packet the QP sent (TCP's snd_nxt; needs Signal.RTT; the
        next PSN the requester will assign, which may run a message or more ahead, without
        it)."""
        return self._snd_nxt.get(qp.qpn, qp.sq_psn)

    def set_rate(self, qp: QpCtx, gbps: float | None) -> None:
        """Pace the QP at `gbps` (None: unlimited, line rate), telling the send engine."""
        if gbps is not None:
            line = self.line_gbps
            if gbps > line:
                gbps = line
        if gbps != qp.rate:
            qp.rate = gbps
            self.rate_changed(qp)

    def record(self, qp: QpCtx, value: float) -> None:
        """Keep the QP's rate and `value` (alpha, U, ...) in `series` (cc.trace)."""
        if self.cfg.trace:
            rate = self.line_gbps if qp.rate is None else qp.rate
            self.series.setdefault(qp.qpn, []).append((self.env.now, rate, value))

    # -- what the NIC calls (not overridden) ------------------------------------------------

    def sent_psn(self, qp: QpCtx, psn: int, t: float) -> None:
        """The requester handed packet `psn` to the port at `t` (Signal.RTT only). A PSN
        that is not past the last one kept is a resend: the samples of everything kept are
        dropped (Karn's rule: an ACK after a resend does not say which copy it answers)."""
        q = self._sent.get(qp.qpn)
        if q is None:
            q = self._sent[qp.qpn] = deque()
        elif q and psn_diff(psn, q[-1][0]) <= 0:
            q.clear()
        q.append((psn, t))
        self._snd_nxt[qp.qpn] = (psn + 1) & PSN_MASK

    def acked(self, qp: QpCtx, psn: int) -> None:
        """The completer saw everything up to `psn` acknowledged (Signal.ACK or RTT)."""
        rtt = None
        q = self._sent.get(qp.qpn)
        if q:
            t = None
            while q and psn_diff(q[0][0], psn) <= 0:
                p, t = q.popleft()
            if t is not None and p == psn:
                rtt = self.env.now - t
        self.on_ack(qp, psn, rtt)

    def int_request(self, qp: QpCtx, trailer: bytes) -> None:
        """A request for `qp` arrived with an INT trailer: the next ACK echoes it."""
        self._echo[qp.qpn] = trailer

    def echo_int(self, qp: QpCtx, frame: Any) -> Any:
        """The ACK frame for `qp` with the INT of the request it answers echoed."""
        trailer = self._echo.pop(qp.qpn, None)
        if trailer is None:
            return frame
        if not isinstance(frame, bytes):
            frame = frame.build()  # an Unbuilt: a path without switches has no INT anyway
        return frame + echo(trailer)
