"""An Ethernet MAC between an RTL design's AXI-Stream ports and a nicsim Link.

It takes and gives beats at the design's clock, one per cycle, as a MAC IP core does, and moves
frames to and from the link at the link's rate.

Transmit: each frame the design sends (tlast; tuser set on its last beat marks it bad and it
is dropped and counted) is serialized at the link's rate like nicsim.nic.port.Port sends one
(store and forward: it starts when the whole frame is in the MAC and the wire is free, and
occupies preamble, the frame padded to 60 bytes, FCS and inter-frame gap) and handed to the
link, whose taps record it as sent and whose fault injection applies.
Receive: each frame the link delivers is driven into the design's receive stream from the time
its last bit arrives, without FCS, back to back.

`strict` (the default) makes it a 100G CMAC as Xilinx PG203 describes its user interface:
- transmit: once a frame's first beat is taken, tvalid must stay high to its last beat; a
  cycle without a beat inside a frame is an underrun, and the frame is aborted (discarded up to
  its tlast, counted in `tx_underrun`). tready is high while the MAC's buffer has room for
  `tx_buffer` bytes more than the wire has yet to send, low otherwise (the design must hold
  its beat, as AXI-Stream says);
- receive: the MAC cannot be held off. Beats go in one per cycle whatever tready says; a beat
  the design did not take is lost (`rx_not_ready` counts them: the design needs a receive FIFO
  that always takes, and drops whole frames when full). A frame that arrives while the MAC
  still has more than `rx_buffer` bytes to drive in (the link is faster than the design's
  port) is dropped and counted in `rx_overflow`.
`pause(p, seed)` adds the backpressure AXI-Stream allows a MAC on top: transmit tready low in
a random cycle in 1/p, and idle cycles between the beats of a received frame at the same rate
(a CMAC's receive stream has them), which the design must take as they come.
Not strict: the design may pause transmit frames (the MAC waits for the rest) and hold off
receive beats (the MAC waits; the delay is counted as `rx_stalled_ns`), with no buffer bounds.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

import cocotb
from cocotb.simtime import get_sim_time
from cocotb.triggers import Event, RisingEdge

from nicsim.cosim.clock import TimeCoupler
from nicsim.fabric.link import Link
from nicsim.wire.packet import ETH_FCS, ETH_IFG, ETH_MIN_FRAME, ETH_PREAMBLE

MAC_BUFFER = 16384  # bytes of each direction's buffer in a strict MAC (two 4 KiB-MTU frames)


class _Stream:
    """The signals of one AXI-Stream port `prefix`_*: tdata, tkeep, tvalid, tready, tlast and
    tuser if the design has them."""

    def __init__(self, dut: Any, prefix: str) -> None:  # noqa: ANN401
        def sig(name: str) -> Any:  # noqa: ANN401
            return getattr(dut, f"{prefix}_{name}", None)

        self.tdata, self.tkeep, self.tvalid = sig("tdata"), sig("tkeep"), sig("tvalid")
        self.tready, self.tlast, self.tuser = sig("tready"), sig("tlast"), sig("tuser")
        self.nbytes = len(self.tdata) // 8
        self.full = (1 << self.nbytes) - 1


def beat_bytes(data: int, keep: int, nbytes: int, full: int) -> bytes:
    """The bytes of one beat whose tkeep is `keep`."""
    raw = data.to_bytes(nbytes, "little")
    if keep == full:
        return raw
    if not keep & (keep + 1):  # the low bytes (a packed last beat)
        return raw[:keep.bit_length()]
    return bytes(b for i, b in enumerate(raw) if keep >> i & 1)


class EthMac:
    """Attaches `tx` (the design's frame output, an AXI-Stream prefix) and, if given, `rx`
    (its frame input) to a nicsim Link (`connect`); see the module for `strict`."""

    def __init__(self, dut, clk, rst, clock: TimeCoupler, tx: str,  # noqa: ANN001
                 rx: str | None = None, *, strict: bool = True, tx_buffer: int = MAC_BUFFER,
                 rx_buffer: int = MAC_BUFFER) -> None:
        self.clock = clock
        self.clk, self.rst = clk, rst
        self.strict = strict
        self.tx = _Stream(dut, tx)
        self.rx = _Stream(dut, rx) if rx else None
        self.link: Link | None = None
        self._end = 0
        self._ns_per_byte = 0.08
        self.free = 0.0
        self._tx_buffer = tx_buffer
        # the time the design's port takes to drive rx_buffer bytes in
        self._rx_buffer_ns = (rx_buffer / self.rx.nbytes * clock.clk_ns) if self.rx else 0.0
        self.counters = {"tx_frames": 0, "tx_bytes": 0, "tx_bad": 0, "tx_underrun": 0,
                         "rx_frames": 0, "rx_bytes": 0, "rx_dropped": 0, "rx_overflow": 0,
                         "rx_not_ready": 0, "rx_stalled_ns": 0}
        self.sent: list[bytes] = []  # every good frame the design sent (keep_sent)
        self.sent_at: list[int] = []  # the RTL time (ps) of each one's first beat
        self.keep_sent = False
        self._rng: random.Random | None = None  # pause's
        self._p = 0.0
        self._rxq: deque[tuple[float, bytes]] = deque()
        self._rx_more = Event()
        clock.hooks.append(self._wake_rx)
        cocotb.start_soon(self._tx_loop())
        if self.rx is not None:
            self.rx.tvalid.value = 0
            cocotb.start_soon(self._rx_loop())

    def connect(self, link: Link) -> int:
        """Take the next free end of `link` (like Port.connect); returns the end index."""
        self.link = link
        self._end = link.attach(self._receive)
        self._ns_per_byte = 8.0 / link.cfg.rate_gbps
        return self._end

    def pause(self, p: float, seed: int) -> None:
        """From now on, random backpressure (see the module) with probability `p` a cycle."""
        self._rng = random.Random(seed)
        self._p = p

    def _paused(self) -> bool:
        return self._rng is not None and self._rng.random() < self._p

    # -- transmit ----------------------------------------------------------------------------

    def _tx_room(self) -> bool:
        """Strict: whether the MAC takes a beat this cycle (its buffer holds what the wire has
        yet to send)."""
        backlog = self.free - self.clock.now()
        return backlog < self._tx_buffer * self._ns_per_byte

    async def _tx_loop(self) -> None:
        s, c = self.tx, self.counters
        edge = RisingEdge(self.clk)
        ready = 1
        s.tready.value = ready
        cur = bytearray()
        started = 0
        aborted = False  # an underrun aborted the frame coming in: discard up to its tlast
        while True:
            await edge
            if self.rst.value == 1:
                cur, aborted = bytearray(), False
                continue
            valid = s.tvalid.value == 1
            if valid and ready:
                last = int(s.tlast.value)
                if not aborted:
                    if not cur:
                        started = get_sim_time("ps")
                    keep = int(s.tkeep.value) if s.tkeep is not None else s.full
                    cur += beat_bytes(int(s.tdata.value), keep, s.nbytes, s.full)
                    if last:
                        bad = s.tuser is not None and int(s.tuser.value)
                        self._sent(bytes(cur), started, bool(bad))
                        cur = bytearray()
                elif last:
                    aborted = False
            elif not valid and cur and self.strict:
                c["tx_underrun"] += 1  # (PG203: a tvalid gap inside a packet)
                cur, aborted = bytearray(), True
            if self.strict:
                r = int(self._tx_room() and not self._paused())
                if r != ready:
                    ready = r
                    s.tready.value = r

    def _sent(self, frame: bytes, started: int, bad: bool) -> None:
        """The design sent a whole frame: onto the wire."""
        c = self.counters
        if bad:
            c["tx_bad"] += 1
            return
        if self.keep_sent:
            self.sent.append(frame)
            self.sent_at.append(started)
        if self.link is None:
            return
        n = len(frame)
        extra = ETH_PREAMBLE + ETH_FCS + ETH_IFG
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
        if self.rx is None:
            self.counters["rx_dropped"] += 1
            return
        env = self.clock.env
        self._rxq.append((env.now if env is not None else 0.0, bytes(frame)))

    def _wake_rx(self) -> None:
        if self._rxq:
            self._rx_more.set()

    async def _rx_loop(self) -> None:
        c = self.counters
        clock = self.clock
        s = self.rx
        assert s is not None
        edge = RisingEdge(self.clk)
        while True:
            if not self._rxq:
                self._rx_more.clear()
                await self._rx_more.wait()
                continue
            t, frame = self._rxq.popleft()
            late = clock.now() - t
            if late > 0:
                if self.strict and late > self._rx_buffer_ns:
                    c["rx_overflow"] += 1  # (no room in the MAC: it came faster than it goes)
                    continue
                c["rx_stalled_ns"] += int(late)
            await clock.until(t)
            c["rx_frames"] += 1
            c["rx_bytes"] += len(frame)
            await self._drive(s, frame, edge)
            s.tvalid.value = 0

    async def _drive(self, s: _Stream, frame: bytes, edge: RisingEdge) -> None:
        """Drive `frame` in, one beat per cycle (strict) or per cycle the design is ready.
        Beats change just after a clock edge: a change at the time of an edge (the frame's
        arrival may fall on one) would race the design's flops."""
        nb = s.nbytes
        await edge
        for i in range(0, len(frame), nb):
            while i and self._paused():  # an idle cycle inside the frame
                s.tvalid.value = 0
                await edge
            chunk = frame[i:i + nb]
            s.tdata.value = int.from_bytes(chunk, "little")
            if s.tkeep is not None:
                s.tkeep.value = (1 << len(chunk)) - 1
            s.tlast.value = int(i + nb >= len(frame))
            if s.tuser is not None:
                s.tuser.value = 0
            s.tvalid.value = 1
            while True:
                await edge
                if s.tready.value == 1:
                    break
                if self.strict:
                    self.counters["rx_not_ready"] += 1  # the beat is lost
                    break
