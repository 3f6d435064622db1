"""The NIC's Ethernet port: transmit serialization (a calendar) and the receive entry."""

from __future__ import annotations

from collections.abc import Callable

import simpy

from nicsim.fabric.link import Link
from nicsim.wire.packet import ETH_FCS, ETH_IFG, ETH_MIN_FRAME, ETH_PREAMBLE

_WIRE_EXTRA = ETH_PREAMBLE + ETH_FCS + ETH_IFG  # see nicsim.wire.wire_bytes


class Port:
    def __init__(self, env: simpy.Environment, receive: Callable[[bytes], None]) -> None:
        self.env = env
        self._receive = receive
        self.link: Link | None = None
        self._end = 0
        self._ns_per_byte = 0.08
        self.free = 0.0  # when the transmitter is next idle
        self.counters = {"tx_frames": 0, "tx_bytes": 0, "tx_busy_ns": 0}

    def connect(self, link: Link) -> None:
        self.link = link
        # Frames go straight to the NIC's receive path, which counts them (rx.packets).
        self._end = link.attach(self._receive)
        self._ns_per_byte = 8.0 / link.cfg.rate_gbps

    @property
    def rate_gbps(self) -> float:
        return 8.0 / self._ns_per_byte

    def send(self, frame: bytes, ready_at: float = 0.0) -> float:
        """Queue `frame` for transmission no earlier than `ready_at`; returns its start time.

        Frames go out in the order they are handed over (one FIFO), back to back with the
        inter-frame gap; `wire_bytes` counts preamble, FCS and IFG.
        """
        if self.link is None:
            raise RuntimeError("port is not connected to a link")
        start = self.env._now  # the attribute behind the `now` property: this runs per packet
        if start < ready_at:
            start = ready_at
        if start < self.free:
            start = self.free
        n = len(frame)
        dur = (_WIRE_EXTRA + (n if n > ETH_MIN_FRAME else ETH_MIN_FRAME)) * self._ns_per_byte
        self.free = end = start + dur
        c = self.counters
        c["tx_frames"] += 1
        c["tx_bytes"] += n
        c["tx_busy_ns"] += dur
        # The last bit leaves before the inter-frame gap that follows it.
        self.link.carry(frame, self._end, end - ETH_IFG * self._ns_per_byte)
        return start
