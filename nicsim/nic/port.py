"""The NIC's Ethernet port: transmit serialization and the receive entry.

Two transmitters. Without PFC the port is a calendar: a frame handed over is given its slot
on the wire at once (after the frames before it), which costs no event. With PFC (the NIC
honours pauses for some priorities, `NicConfig.pfc_classes`) a frame may have to wait for a
pause that has not arrived yet, so the port keeps a FIFO per priority and starts each frame
when the wire is free: strict priority between priorities, a paused priority stops after the
frame in progress (IEEE 802.1Qbb), the others go on. A frame's priority is its DSCP's class
(DSCP >> 3, as the switches classify by default).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import simpy

from nicsim.fabric.link import Link, Tap
from nicsim.fabric.pfc import NUM_PRIORITIES, PfcFrame, PfcWatchdog, quanta_ns
from nicsim.nic.counters import bump, new_counters
from nicsim.sim import Entry, Sim, Tick
from nicsim.wire.packet import ETH_FCS, ETH_IFG, ETH_MIN_FRAME, ETH_PREAMBLE, Unbuilt

_WIRE_EXTRA = ETH_PREAMBLE + ETH_FCS + ETH_IFG  # see nicsim.wire.wire_bytes
_INF = float("inf")


def priority_of(frame: bytes) -> int:
    """The 802.1p priority of a frame we send: its IP DSCP's class (DSCP >> 3)."""
    if frame[14] >> 4 == 4:
        return frame[15] >> 5
    return (frame[14] & 0x0F) >> 1  # IPv6: traffic class spans bytes 14-15


class Port:
    def __init__(self, env: Sim, receive: Callable[[bytes], None],
                 pfc_classes: tuple[int, ...] = (),
                 watchdog: PfcWatchdog | None = None) -> None:
        self.env = env
        self._receive = receive
        self.link: Link | None = None
        self._end = 0
        self._ns_per_byte = 0.08
        self._ifg_ns = ETH_IFG * self._ns_per_byte
        self.free = 0.0  # when the transmitter is next idle (queued: projected, no pauses)
        self._c = new_counters("tx_frames", "tx_bytes", "tx_busy_ns", "pfc_received",
                               "pfc_ignored", "pause_ignored", "mac_control_malformed")
        # Frames sent, per frame length: [time on the wire, count]. One count per frame
        # instead of three counters; `counters` adds them up when read.
        self._wire: dict[int, list] = {}
        self._busy_ns = 0.0
        # Wire time of frames decided but not yet over (start, end), kept only while a time
        # series asks how much has been sent by now (wire_ns_done): frames are handed to
        # the port ahead of the wire, and a count taken then runs ahead of it.
        self._ahead: deque[tuple[float, float]] | None = None
        self._done_ns = 0.0  # busy time of the frames over (when _ahead is kept)
        self.pfc = frozenset(pfc_classes)
        self.queued = bool(self.pfc)
        # Queued transmitter (PFC): FIFOs by priority of (frame, ready_at), frames queued,
        # whether a frame is on the wire, pauses (until when), time paused per priority.
        self._q: list[deque[tuple[bytes, float]]] = [deque() for _ in range(NUM_PRIORITIES)]
        self._ctrl: deque[bytes] = deque()  # MAC Control frames: first, never paused
        self.backlog = 0
        self._busy = False
        self._gen = 0
        self.paused_until = [0.0] * NUM_PRIORITIES
        self._pause_mark: list[float | None] = [None] * NUM_PRIORITIES
        self._paused_ns = [0.0] * NUM_PRIORITIES
        # The PFC watchdog (see PfcWatchdog): per priority, watching, stormed (pauses
        # ignored), the last pause heard.
        self._wd = watchdog if watchdog is not None and watchdog.enabled else None
        self._wd_watch = [False] * NUM_PRIORITIES
        self.wd_storm = [False] * NUM_PRIORITIES
        self._wd_last_pause = [0.0] * NUM_PRIORITIES
        self._room: simpy.Event | None = None
        self._room_at = 0
        self._mask = 0  # bit p set: priority p's FIFO has frames
        self._pfc_mask = sum(1 << p for p in self.pfc)
        self._tick = Tick(self._ended)  # the end of the frame on the wire
        # Loopback: a frame to the port's own MAC never reaches the wire; the NIC turns it
        # around after its transmit MAC (as NICs loop local traffic back in their embedded
        # switch), at line rate on a timeline of its own, `loopback_ns` after its last bit.
        # Taps on the port record looped frames as the port's own transmissions.
        self.mac = b""
        # The receive filter's group addresses (nicsim.nic.multicast): a frame sent to one
        # goes out on the link and is also turned around to the device's own members.
        self.mcast_macs: set[bytes] = set()
        self.loopback_ns = 100.0
        self.loop_taps: list[Tap] = []
        self._loop_free = 0.0
        self._looping: list[tuple[bytes, int]] = []  # (frame, start of frame) in flight

    def connect(self, link: Link, direct: bool = False) -> None:
        """`direct`: an entry in SimPy's queue per frame received (Link.attach)."""
        self.link = link
        # Frames go straight to the NIC's receive path, which counts them (rx.packets).
        self._end = link.attach(self._receive, direct, unbuilt=True)
        self._ns_per_byte = 8.0 / link.cfg.rate_gbps
        self._ifg_ns = ETH_IFG * self._ns_per_byte
        for n, rec in self._wire.items():
            rec[0] = self._wire_ns(n)

    def _wire_ns(self, n: int) -> float:
        """A frame of `n` bytes on the wire: preamble, padding to the minimum, FCS, IFG."""
        return (_WIRE_EXTRA + (n if n > ETH_MIN_FRAME else ETH_MIN_FRAME)) * self._ns_per_byte

    def _new_len(self, n: int) -> list:
        rec = self._wire[n] = [self._wire_ns(n), 0]
        return rec

    @property
    def counters(self) -> dict[str, int | float]:
        """The counters, tallies added up: a new dict (writing to it counts nothing)."""
        out = dict(self._c)
        out["tx_frames"] = sum(r[1] for r in self._wire.values())
        out["tx_bytes"] = sum(n * r[1] for n, r in self._wire.items())
        out["tx_busy_ns"] = self._busy_ns
        return out

    def wire_ns_done(self) -> float:
        """The transmitter's busy time up to now (frames with preamble, FCS and gap), the
        frame on the wire counted in part: what has really gone out, which never runs ahead
        of the line rate. Kept from the first call on."""
        now = self.env.now
        q = self._ahead
        if q is None:
            self._ahead = deque()
            self._done_ns = self._busy_ns - max(0.0, self.free - now) if not self.queued \
                else self._busy_ns
            return self._done_ns
        while q and q[0][1] <= now:
            start, end = q.popleft()
            self._done_ns += end - start
        part = now - q[0][0] if q and q[0][0] < now else 0.0
        return self._done_ns + part

    def backlog_ns(self) -> float:
        """Wire time of what is queued and not yet sent (the frame on the wire counted by its
        part still to go): without the idle gaps a schedule may hold. Kept from the first
        call on (see wire_ns_done)."""
        self.wire_ns_done()  # (starts the bookkeeping, retires what is over)
        now = self.env.now
        q = self._ahead
        assert q is not None
        if self.queued:
            # Frames still in the priority queues have not started: their wire time, too.
            waiting = sum(self._wire_ns(len(f)) for pq in self._q for f, _r, _s in pq)
        else:
            waiting = 0.0
        return waiting + sum(end - (start if start > now else now) for start, end in q)

    def count(self, name: str) -> None:
        """Count an event of the port's receive side (MAC control frames the NIC parses)."""
        self._c[name] += 1

    @property
    def rate_gbps(self) -> float:
        return 8.0 / self._ns_per_byte

    def send(self, frame: bytes | Unbuilt, ready_at: float = 0.0,
             on_sent: Callable[[float], None] | None = None) -> float:
        """Queue `frame` for transmission no earlier than `ready_at`; returns its start time
        (queued transmitter: the start it would have if no pause came). `on_sent(t)` is
        called when its last bit has left, at that time t.

        Frames go out in the order they are handed over (one FIFO, or one per priority),
        back to back with the inter-frame gap; `wire_bytes` counts preamble, FCS and IFG.
        """
        if frame.__class__ is Unbuilt:
            # To another station's unicast address (FrameBuilder.deferrable): no loopback, no
            # group. A PFC queue reads the frame's priority from its bytes.
            if self.queued:
                frame = frame.build()
                n = len(frame)
            else:
                n = frame.n  # (no __len__ call)
        elif frame[:6] == self.mac:
            return self._loop(frame, ready_at, on_sent)
        else:
            if frame[0] & 1 and self.mcast_macs and frame[:6] in self.mcast_macs:
                looped = self._loop(frame, ready_at, on_sent if self.link is None else None)
                if self.link is None:
                    return looped  # no link: the local members are the whole group
            n = len(frame)
        if self.link is None:
            raise RuntimeError("port is not connected to a link")
        start = self.env.now
        if start < ready_at:
            start = ready_at
        if start < self.free:
            start = self.free
        rec = self._wire.get(n) or self._new_len(n)
        dur = rec[0]
        self.free = end = start + dur
        if self.queued:
            p = priority_of(frame)
            self._q[p].append((frame, ready_at, on_sent))
            self._mask |= 1 << p
            self.backlog += 1
            if not self._busy:
                self._next()
            return start
        rec[1] += 1
        self._busy_ns += dur
        if self._ahead is not None:
            self._ahead.append((start, end))
        # The last bit leaves before the inter-frame gap that follows it.
        self.link.carry(frame, self._end, end - self._ifg_ns)
        if on_sent is not None:
            self._when_sent(end - self._ifg_ns, on_sent)
        return start

    def send_control(self, frame: bytes) -> None:
        """Transmit a MAC Control frame (a PFC frame this port sends): after the frame in
        progress and ahead of every data frame, never paused (802.1Qbb)."""
        if self.link is None:
            raise RuntimeError("port is not connected to a link")
        bump(self._c, "control_sent")
        if not self.queued:
            self.send(frame)  # the calendar: its slot after the frames handed over before
            return
        self._ctrl.append(frame)
        if not self._busy:
            self._next()

    # -- loopback ---------------------------------------------------------------------------

    def _loop(self, frame: bytes, ready_at: float,
              on_sent: Callable[[float], None] | None = None) -> float:
        """Turn a frame to our own MAC around inside the NIC; returns its start time."""
        env = self.env
        start = max(env.now, ready_at, self._loop_free)
        n = len(frame)
        dur = self._wire_ns(n)
        self._loop_free = start + dur
        c = self._c
        bump(c, "loopback_frames")
        bump(c, "loopback_bytes", n)
        item = (frame, round(start + ETH_PREAMBLE * self._ns_per_byte))  # start of frame
        self._looping.append(item)
        last_bit = start + dur - ETH_IFG * self._ns_per_byte
        env.timeout(last_bit + self.loopback_ns - env.now).callbacks.append(
            lambda _e: self._looped(item))
        if on_sent is not None:
            self._when_sent(last_bit, on_sent)
        return start

    def _looped(self, item: tuple[bytes, int]) -> None:
        self._looping.remove(item)
        frame, sof = item
        for tap in self.loop_taps:
            tap.write(frame, sof)
        self._receive(frame)

    def _when_sent(self, last_bit: float, on_sent: Callable[[float], None]) -> None:
        self.env.call_at(last_bit, lambda _e: on_sent(last_bit))

    def flush_taps(self) -> None:
        """Record looped frames still in flight (the world is closing)."""
        for frame, sof in self._looping:
            for tap in self.loop_taps:
                tap.write(frame, sof)
        self._looping.clear()

    # -- the queued transmitter (PFC) -------------------------------------------------------

    def _next(self, _ev: object = None) -> None:
        """The wire is free: start the next frame that may go, or sleep until one may.

        Timers are bare entries in the event queue (nicsim.sim.Entry, Tick), scheduled
        where `env.timeout` would put them: the same times (computed as a Timeout computes
        them: now + delay) and one sequence number each, drawn at the same point, so the
        order of events is that of one Timeout per timer."""
        env = self.env
        now = env.now
        if self._ctrl:
            self._transmit(self._ctrl.popleft(), now)
            return
        wake = _INF
        pick = -1
        qs = self._q
        pu = self.paused_until
        pfc = self._pfc_mask
        m = self._mask
        while m:  # from the highest priority with frames down
            p = m.bit_length() - 1
            m ^= 1 << p
            if pfc >> p & 1 and pu[p] > now:
                if pu[p] < wake:
                    wake = pu[p]
                continue
            r = qs[p][0][1]
            if r <= now:
                pick = p
                break
            if r < wake:
                wake = r
        self._gen += 1
        if pick < 0:
            self._busy = False
            if wake < _INF:
                env.at(now + (wake - now), Entry(self._woken, self._gen))
            return
        q = qs[pick]
        frame, _ready, on_sent = q.popleft()
        if not q:
            self._mask ^= 1 << pick
        self.backlog -= 1
        last_bit = self._transmit(frame, now)
        if on_sent is not None:
            self._when_sent(last_bit, on_sent)
        if self._room is not None and self.backlog <= self._room_at:
            room, self._room = self._room, None
            room.succeed()

    def _transmit(self, frame: bytes, now: float) -> float:
        """Put `frame` on the wire now; the transmitter is busy until it ends. Returns when
        its last bit leaves."""
        env = self.env
        n = len(frame)
        rec = self._wire.get(n) or self._new_len(n)
        dur = rec[0]
        rec[1] += 1
        self._busy_ns += dur
        self._busy = True
        if self._ahead is not None:
            self._ahead.append((now, now + dur))
        last_bit = now + dur - self._ifg_ns
        self.link.carry(frame, self._end, last_bit)  # type: ignore[union-attr]
        env.at(now + dur, self._tick)
        return last_bit

    def _ended(self, tick: Tick) -> None:
        """The frame on the wire has ended (a Tick: no object per frame)."""
        tick.rearm()
        self._next()

    def _woken(self, ev: Entry) -> None:
        """A frame may have become ready or a pause expired, unless the transmitter has
        looked at its queues since this timer was set."""
        if self._gen == ev.value and not self._busy:
            self._next()

    def room(self, at_most: int) -> simpy.Event:
        """An event that fires when at most `at_most` frames wait to be sent."""
        if self._room is None:
            self._room = self.env.event()
        self._room_at = at_most
        return self._room

    def pause(self, pf: PfcFrame) -> None:
        """A PFC frame arrived: pause (or resume) the priorities it speaks for."""
        c = self._c
        if not self.queued:
            c["pfc_ignored"] += 1  # the NIC honours no priority: it keeps sending
            return
        c["pfc_received"] += 1
        now = self.env.now
        for p, quanta in pf.pauses().items():
            if p not in self.pfc:
                continue
            if quanta:
                self._wd_last_pause[p] = now
            if self.wd_storm[p]:
                bump(c, "pfc_wd_pauses_ignored")  # a stormed priority does not stop
                continue
            self._set_pause(p, now + quanta_ns(quanta, self.rate_gbps) if quanta else now, now)
            if quanta and self._wd is not None and self._q[p] and not self._wd_watch[p]:
                self._wd_arm(p)
        if not self._busy:
            self._next()

    def _set_pause(self, p: int, until: float, now: float) -> None:
        """Priority `p` is paused until `until` (now: resumed), from now on."""
        mark = self._pause_mark[p]
        if mark is not None:
            self._paused_ns[p] += min(now, self.paused_until[p]) - mark
        self.paused_until[p] = until
        self._pause_mark[p] = now if until > now else None

    # -- the PFC watchdog (PfcWatchdog) ------------------------------------------------------

    def _wd_arm(self, p: int) -> None:
        """Priority `p` is paused with frames waiting: look again after the detection time.
        It is stormed if the same frame still waits at its head and `p` is still paused."""
        assert self._wd is not None
        self._wd_watch[p] = True
        head = self._q[p][0]
        self.env.timeout(self._wd.detect_ns).callbacks.append(
            lambda _e: self._wd_check(p, head))

    def _wd_check(self, p: int, head: tuple[bytes, float, object]) -> None:
        self._wd_watch[p] = False
        q = self._q[p]
        now = self.env.now
        if not q or self.paused_until[p] <= now:
            return
        if q[0] is not head:
            self._wd_arm(p)  # frames left meanwhile: a pause, not a storm; watch on
            return
        assert self._wd is not None
        self.wd_storm[p] = True
        bump(self._c, "pfc_wd_storms")
        self._set_pause(p, now, now)
        self._wd_restore_at(p, now + self._wd.restore_ns)
        if not self._busy:
            self._next()

    def _wd_restore_at(self, p: int, at: float) -> None:
        self.env.timeout(at - self.env.now).callbacks.append(lambda _e: self._wd_restore(p))

    def _wd_restore(self, p: int) -> None:
        """The storm is over once no pause has come for the restoration time."""
        assert self._wd is not None
        quiet = self._wd_last_pause[p] + self._wd.restore_ns
        if quiet > self.env.now:
            self._wd_restore_at(p, quiet)
            return
        self.wd_storm[p] = False
        bump(self._c, "pfc_wd_restores")

    def paused_ns(self) -> list[float]:
        """Time each priority has spent paused so far."""
        now = self.env.now
        return [v + (min(now, self.paused_until[p]) - m if (m := self._pause_mark[p])
                     is not None else 0.0) for p, v in enumerate(self._paused_ns)]
