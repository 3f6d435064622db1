"""An Ethernet MAC between an RTL design's AXI-Stream ports and a nicsim Link.

Transmit: each frame the design sends (tlast; tuser set on its last beat marks it bad and it
is dropped and counted) is serialized at the link's rate like nicsim.nic.port.Port sends one
(store and forward: it starts when the whole frame is in the MAC and the wire is free, and
occupies preamble, the frame padded to 60 bytes, FCS and inter-frame gap) and handed to the
link, whose taps record it as sent and whose fault injection applies. The MAC's queue is not
bounded (the design is never back-pressured): frames leave at line rate.
Receive: each frame the link delivers (at the time its last bit arrives) is driven into the
design's receive stream at that time, back to back, without FCS; the design should take it at
line rate (a real MAC has no way to hold it back: a design that stalls delays later frames here,
counted as `rx_stalled_ns`).
"""

from __future__ import annotations

from collections import deque

import cocotb
from cocotb.triggers import Event
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from nicsim.cosim.clock import TimeCoupler
from nicsim.fabric.link import Link
from nicsim.wire.packet import ETH_FCS, ETH_IFG, ETH_MIN_FRAME, ETH_PREAMBLE


class EthMac:
    """Attaches `tx` (the design's frame output, an AXI-Stream prefix) and, if given, `rx`
    (its frame input) to a nicsim Link (`connect`)."""

    def __init__(self, dut, clk, rst, clock: TimeCoupler, tx: str,  # noqa: ANN001
                 rx: str | None = None) -> None:
        self.clock = clock
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, tx), clk, rst)
        self.src = AxiStreamSource(AxiStreamBus.from_prefix(dut, rx), clk, rst) if rx else None
        self.link: Link | None = None
        self._end = 0
        self._ns_per_byte = 0.08
        self.free = 0.0
        self.counters = {"tx_frames": 0, "tx_bytes": 0, "tx_bad": 0, "rx_frames": 0,
                         "rx_bytes": 0, "rx_dropped": 0, "rx_stalled_ns": 0}
        self.sent: list[bytes] = []  # every good frame the design sent (keep_sent)
        self.sent_at: list[int] = []  # the RTL time (ps) of each one's first beat
        self.keep_sent = False
        self._rxq: deque[tuple[float, bytes]] = deque()
        self._rx_more = Event()
        for m in (self.sink, self.src):
            if m is not None:
                m.log.setLevel("WARNING")
        clock.hooks.append(self._wake_rx)
        cocotb.start_soon(self._tx_loop())
        if self.src is not None:
            cocotb.start_soon(self._rx_loop())

    def connect(self, link: Link) -> int:
        """Take the next free end of `link` (like Port.connect); returns the end index."""
        self.link = link
        self._end = link.attach(self._receive)
        self._ns_per_byte = 8.0 / link.cfg.rate_gbps
        return self._end

    # -- transmit ----------------------------------------------------------------------------

    async def _tx_loop(self) -> None:
        c = self.counters
        extra = ETH_PREAMBLE + ETH_FCS + ETH_IFG
        while True:
            fr = await self.sink.recv()
            user = fr.tuser[-1] if isinstance(fr.tuser, list) else fr.tuser
            if int(user or 0):
                c["tx_bad"] += 1
                continue
            frame = bytes(fr.tdata)
            if self.keep_sent:
                self.sent.append(frame)
                self.sent_at.append(int(fr.sim_time_start))
            if self.link is None:
                continue
            n = len(frame)
            start = max(self.clock.now(), self.free)
            dur = (extra + max(n, ETH_MIN_FRAME)) * self._ns_per_byte
            self.free = start + dur
            c["tx_frames"] += 1
            c["tx_bytes"] += n
            # the last bit leaves before the inter-frame gap (as Port.send)
            t_last = self.clock.sim_time_for(start + dur - ETH_IFG * self._ns_per_byte
                                             + self.link.cfg.prop_ns) - self.link.cfg.prop_ns
            self.link.carry(frame, self._end, t_last)

    # -- receive -----------------------------------------------------------------------------

    def _receive(self, frame: bytes) -> None:
        """SimPy side: the link delivers a frame (its last bit is here now)."""
        c = self.counters
        if self.src is None:
            c["rx_dropped"] += 1
            return
        env = self.clock.env
        self._rxq.append((env.now if env is not None else 0.0, bytes(frame)))

    def _wake_rx(self) -> None:
        if self._rxq:
            self._rx_more.set()

    async def _rx_loop(self) -> None:
        c = self.counters
        clock = self.clock
        src = self.src
        assert src is not None
        while True:
            if not self._rxq:
                self._rx_more.clear()
                await self._rx_more.wait()
                continue
            t, frame = self._rxq.popleft()
            late = clock.now() - t
            if late > 0:
                c["rx_stalled_ns"] += int(late)
            await clock.until(t)
            c["rx_frames"] += 1
            c["rx_bytes"] += len(frame)
            await src.send(AxiStreamFrame(frame))
