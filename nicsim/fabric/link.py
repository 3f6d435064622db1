"""Ethernet links: serialization at the line rate, propagation delay, faults, pcap taps.

Serialization is charged at the sending port (see nicsim.nic.port and nicsim.fabric.switch);
the link carries the frame for its propagation delay and hands it to the port at the far end
when its last bit arrives.

Taps are at the transmitters, like a port mirror: a tap records each frame as it left the
port, before the link's faults, so a frame the link later loses or corrupts is in the capture
as it was sent. The timestamp is the frame's start of frame (the first bit after the preamble
and SFD, where IEEE 1588 timestamps a frame). The record is written when the frame's
fault-free arrival comes round in the link's delivery order, so one file may hold both
directions of a link (same propagation delay both ways) and stay in time order; frames still
in flight are written when the world closes (`flush_taps`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from heapq import heappop, heappush
from typing import Protocol

from nicsim.fabric.faults import FaultConfig, FaultInjector
from nicsim.sim import Entry, Sim
from nicsim.sim.paths import general
from nicsim.wire.packet import ETH_FCS, ETH_MIN_FRAME, Unbuilt


@dataclass(frozen=True)
class LinkConfig:
    rate_gbps: float = 100.0
    prop_ns: float = 50.0  # about 10 m of fibre


class Tap(Protocol):
    """What a link hands each frame to: its bytes and its start time.

    A tap may instead take frames in bulk (the pcap writer: nicsim.fabric.pcap.PcapTap):
    then it has a list `bulk`, which the link appends `(arrival, frame, clock)` to, and
    calls its `flush()` once the list holds `flush_at` entries. `frame` may be an Unbuilt
    (nicsim.wire.packet.Unbuilt: its bytes do not change), and the start of frame is
    `sof(arrival, len(frame), clock)`; a `clock` of None means `arrival` already is the
    start of frame. The tap does the per-frame work when it flushes, not on the path every
    frame takes."""

    def write(self, frame: bytes, t_ns: int) -> None: ...


_DELIVER, _TAP, _BOTH = 1, 2, 3
_SOF_EXTRA = ETH_FCS  # bytes on the wire after the frame (the FCS) before its last bit


def sof(arrival: float, n: int, clock: tuple[float, float] | None) -> int:
    """The start of frame (whole nanoseconds) of an `n`-byte frame whose last bit arrived at
    `arrival` over a link whose clock is (propagation delay, ns per byte)."""
    if clock is None:
        return round(arrival)
    prop, ns_per_byte = clock
    return round(arrival - prop - ((n if n > ETH_MIN_FRAME else ETH_MIN_FRAME) + _SOF_EXTRA)
                 * ns_per_byte)


def _bytes(frame: bytes | Unbuilt) -> bytes:
    """What a tap records of a frame the link carries: its bytes (a NIC receiving it takes it
    as it is, see attach)."""
    return frame.build() if frame.__class__ is Unbuilt else frame  # type: ignore[union-attr]


class Link:
    """A full-duplex point-to-point link between two receivers (ports).

    Delivery without an event per frame. A frame is due at (arrival time, the sequence number
    SimPy would have given its own timeout event): exactly where that event would sit in the
    event order. Each direction keeps its frames in that order and an entry in SimPy's queue
    for the earliest; when the entry fires, the link delivers the frame and goes on delivering
    the next ones, moving the clock to each arrival, as long as each is still the next event
    of the whole simulation and within the time the caller runs the world to (the kernel's
    stream delivery, nicsim.sim.Sim.deliver). Everything happens in the order and at the
    times of one event per frame; the events are saved where frames follow each other with
    nothing in between, which is the middle of every stream.
    """

    def __init__(self, env: Sim, cfg: LinkConfig, name: str = "link",
                 faults: FaultConfig | None = None) -> None:
        self.env = env
        self.cfg = cfg
        self.name = name
        # One injector per direction, with its own random stream.
        self._faults: list[FaultInjector] | None = \
            [FaultInjector(faults, i) for i in range(2)] if faults and faults.active else None
        self.ends: list[Callable[[bytes], None]] = []
        self.taps: list[Tap] = []  # frames sent by either end
        self.end_taps: tuple[list[Tap], list[Tap]] = ([], [])  # frames sent by end 0 / 1
        self._ns_per_byte = 8.0 / cfg.rate_gbps
        self._prop = cfg.prop_ns
        self._clock = (self._prop, self._ns_per_byte)  # for a bulk tap's start times (sof)
        # Per receiving end: frames in flight as (arrival, seq, frame, what), in event order,
        # and the keys of the entries this end has in SimPy's queue. `what` says whether the
        # entry is delivered (_DELIVER), recorded by taps (_TAP) or both.
        self._flight: list[deque[tuple[float, int, bytes, int]]] = [deque(), deque()]
        # A heap each: this end's entries fire in key order, so the one firing is the
        # smallest, and "has an entry at or before key k" is entries[0] <= k.
        self._entries: list[list[tuple[float, int]]] = [[], []]
        self._fire = [partial(self._deliver, 0), partial(self._deliver, 1)]
        self._handle = [partial(self._hand_over, 0), partial(self._hand_over, 1)]
        # Per receiving end: the callback of its direct entries (see attach), or None.
        self._direct: list[Callable[[Entry], None] | None] = [None, None]
        self._takes_unbuilt = [False, False]
        # Per receiving end: whether frames to it take the plain path of `carry` (no faults,
        # no direct entries, an Unbuilt travels as it is), decided when the end attaches.
        self._plain = [False, False]
        # Deliver streams of frames from one entry, and direct entries (nicsim.sim.paths: the
        # general path delivers each frame from an entry of its own).
        self._streams = not general()

    def attach(self, receive: Callable[[bytes], None], direct: bool = False,
               unbuilt: bool = False) -> int:
        """Attach a receiver; returns the end index that the sender passes to `carry`.

        `direct`: frames to this end, when the link has no faults and the direction no
        taps, get an entry each in SimPy's queue that hands them straight to the end's
        receiver (`ends[end]`, looked up per frame), at the frame's place in the event order
        (the place of one event per frame). That skips the bookkeeping of delivering several
        frames per entry, which pays between the ports of one stream (two hosts on a cable)
        but seldom in a fabric, where every port's frames interleave with everything else.
        `unbuilt`: the receiver takes nicsim.wire.packet.Unbuilt packets (a NIC), and a direct
        entry hands them over as they are; every other path builds their frames."""
        if len(self.ends) == 2:
            raise ValueError(f"{self.name} already has two ends")
        ends = self.ends
        ends.append(receive)
        end = len(ends) - 1
        if direct and self._streams:
            self._direct[end] = lambda ev: ends[end](ev.value)
        self._takes_unbuilt[end] = unbuilt
        self._replan()
        return end

    @property
    def faults(self) -> list[FaultInjector] | None:
        """One injector per direction (frames sent by end 0, end 1), or None."""
        return self._faults

    @faults.setter
    def faults(self, injectors: list[FaultInjector] | None) -> None:
        self._faults = injectors
        self._replan()

    def general_path(self, build: bool = False) -> None:
        """Take this link's shortcuts away, for runs that check them against the general
        path: no direct entries (every frame goes through the link's queue) and, with
        `build`, every Unbuilt frame is built before it travels (as to a switch)."""
        self._direct = [None, None]
        if build:
            self._takes_unbuilt = [False, False]
        self._replan()

    def _replan(self) -> None:
        self._plain = [self._faults is None and self._direct[e] is None and self._takes_unbuilt[e]
                       for e in (0, 1)]

    def carry(self, frame: bytes | Unbuilt, from_end: int, t_last_bit_out: float) -> None:
        """Deliver `frame`, whose last bit leaves end `from_end` at `t_last_bit_out`."""
        t = t_last_bit_out + self._prop
        to = 1 - from_end
        if self._plain[to]:  # (the common case of _enqueue, inline: this runs per packet)
            q = self._flight[to]
            seq = self.env.ticket()
            if q and q[-1][0] <= t:
                q.append((t, seq, frame, _BOTH))  # the earliest frame's entry comes first
            else:
                self._enqueue(to, t, frame, seq, _BOTH)
            return
        if frame.__class__ is Unbuilt and (self._faults is not None
                                           or not self._takes_unbuilt[to]):
            # Faults and switches see the bytes (a tap builds its own copy: see _bytes).
            frame = frame.build()
        if self._faults is None:
            direct = self._direct[to]
            if direct is not None and not (self.taps or self.end_taps[from_end]):
                self.env.at(t, Entry(direct, frame))
                return
            self._enqueue(to, t, frame, self.env.ticket(), _BOTH)
            return
        if self.taps or self.end_taps[from_end]:
            self._enqueue(to, t, frame, self.env.ticket(), _TAP)  # as sent
        for f, extra in self._faults[from_end].apply(frame):
            self._enqueue(to, t + extra, f, self.env.ticket(), _DELIVER)

    def _enqueue(self, to: int, t: float, frame: bytes, seq: int, what: int) -> None:
        """`seq` is what a timeout made at carry time would get: the frame's place in the
        event order."""
        q = self._flight[to]
        if not q or q[-1][0] <= t:
            q.append((t, seq, frame, what))
            if len(q) > 1:
                return  # the earliest frame's entry comes first
        else:  # a reordered frame overtakes others
            i = len(q)
            while i and q[i - 1][0] > t:
                i -= 1
            q.insert(i, (t, seq, frame, what))
            if i:
                return
        self._arm(to, t, seq)

    def _arm(self, to: int, t: float, seq: int) -> None:
        key = (t, seq)
        heappush(self._entries[to], key)
        self.env.at_ticket(t, seq, Entry(self._fire[to], key))

    def _deliver(self, to: int, ev: Entry) -> None:
        """Our entry `ev` fired: deliver its frame and those after it that are each the
        next event (see the class)."""
        entries = self._entries[to]
        key = heappop(entries)  # ev.value: the smallest of this end's entries
        q = self._flight[to]
        if not q:
            return
        t, seq = q[0][0], q[0][1]
        if t == key[0] and seq == key[1]:
            # Its own frame (the usual case): no check needed.
            self._hand_over(to, q.popleft())
        if self._streams:
            nxt = self.env.deliver(q, self._handle[to])
        else:
            nxt = (q[0][0], q[0][1]) if q else None
        if nxt is not None and (not entries or entries[0] > nxt):
            self._arm(to, *nxt)

    def _hand_over(self, to: int, item: tuple[float, int, bytes, int]) -> None:
        """A frame's time has come: to the taps of its sender's end, and to the receiver."""
        t, _seq, frame, what = item
        if what & _TAP:
            taps = self.taps
            if self.end_taps[1 - to]:
                taps = taps + self.end_taps[1 - to]
            fb = None
            for tap in taps:
                bulk = getattr(tap, "bulk", None)
                if bulk is not None:
                    bulk.append((t, frame, self._clock))
                    if len(bulk) >= tap.flush_at:
                        tap.flush()
                    continue
                if fb is None:
                    fb = _bytes(frame)
                    tn = sof(t, len(fb), self._clock)
                tap.write(fb, tn)
        if what & _DELIVER:
            self.ends[to](frame)

    def undelivered(self, to: int) -> int:
        """Frames on their way to end `to` that it has not received yet."""
        return sum(1 for e in self._flight[to] if e[3] & _DELIVER)

    def flush_taps(self) -> None:
        """Record the frames still in flight (sent, not yet arrived), in time order; the
        link carries on delivering them, unrecorded."""
        pending = []
        for to in (0, 1):
            taps = self.taps + self.end_taps[1 - to]
            q = self._flight[to]
            if taps:
                pending += [(t, seq, frame, taps) for t, seq, frame, what in q if what & _TAP]
            self._flight[to] = deque((t, seq, f, _DELIVER) for t, seq, f, what in q
                                     if what & _DELIVER)
        for t, _seq, frame, taps in sorted(pending, key=lambda e: e[:2]):
            fb = _bytes(frame)
            tn = sof(t, len(fb), self._clock)
            for tap in taps:
                tap.write(fb, tn)

    def fault_counters(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for inj in self._faults or ():
            for k, v in inj.counters.items():
                out[k] = out.get(k, 0) + v
        return out
