"""The interface between the send engine and a congestion-control algorithm.

The engine knows rates, not algorithms: a QP whose `rate` is None sends as fast as the engine
lets it; otherwise its packets are spaced so that its wire bytes leave at `rate` Gb/s
(nicsim.nic.scheduler.SendEngine.pace). An algorithm sees the events a NIC's congestion
control sees (a CNP, an ACK, a packet sent, its own timers) and sets `qp.rate`, telling the
engine when it changed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import simpy

from nicsim.nic.cc.config import CcConfig
from nicsim.nic.counters import new_counters
from nicsim.nic.qp import QpCtx


class RateControl(ABC):
    """A reaction point: per-QP sending rates from congestion signals."""

    def __init__(self, env: simpy.Environment, cfg: CcConfig, line_gbps: Callable[[], float],
                 rate_changed: Callable[[QpCtx], None]) -> None:
        self.env = env
        self.cfg = cfg
        self._line = line_gbps  # the port's rate, known once it is cabled
        self.rate_changed = rate_changed
        self.counters = new_counters("cnp_received")
        # qpn -> [(time ns, rate Gb/s, alpha)], when cfg.trace is set
        self.series: dict[int, list[tuple[float, float, float]]] = {}

    @property
    def line_gbps(self) -> float:
        return self._line()

    @abstractmethod
    def on_cnp(self, qp: QpCtx) -> None:
        """A CNP for this QP arrived."""

    def on_ack(self, qp: QpCtx, psn: int) -> None:  # noqa: B027 - optional hook
        """An ACK covering `psn` arrived (rate- and window-based schemes that use RTTs)."""

    def on_sent(self, qp: QpCtx, nbytes: int) -> None:  # noqa: B027 - optional hook
        """A rate-limited QP sent a frame of `nbytes` bytes."""

    @abstractmethod
    def forget(self, qp: QpCtx) -> None:
        """The QP was reset or destroyed: drop its state, stop its timers."""

    def record(self, qp: QpCtx, alpha: float) -> None:
        if self.cfg.trace:
            rate = self.line_gbps if qp.rate is None else qp.rate
            self.series.setdefault(qp.qpn, []).append((self.env.now, rate, alpha))
