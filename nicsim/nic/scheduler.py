"""Doorbells and the send scheduler: which QP's work goes to the wire next.

One SimPy process per NIC serves, in order of priority, READ responses the responder has
queued (a responder must not be starved by local requests), then QPs with something to send,
round-robin: a QP sends `quantum` packets per turn while others wait, whole messages when it
is alone (see Requester.turn). Transmission is read-ahead: the engine may have up to
`tx_readahead` packets decided (their payload DMA reads issued) before the first of them is on
the wire, which is how a NIC hides PCIe read latency behind the link.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Generator
from heapq import heappop, heappush

import simpy

from nicsim.nic.counters import new_counters
from nicsim.nic.engines import Units
from nicsim.nic.interfaces import Turns
from nicsim.nic.port import Port
from nicsim.nic.qp import QpCtx
from nicsim.nic.wqe_fetch import SendWqe, WqeFetch
from nicsim.sim import Entry, Sim
from nicsim.wire.packet import ETH_FCS, ETH_IFG, ETH_MIN_FRAME, ETH_PREAMBLE

_WIRE_EXTRA = ETH_PREAMBLE + ETH_FCS + ETH_IFG


class SendEngine:
    def __init__(self, env: Sim, port: Port, readahead: int,
                 quantum: int = 1, jitter: float = 0.0, seed: int = 0) -> None:
        self.env = env
        self.port = port
        self.k = readahead
        self.quantum = quantum
        self.ready: deque[QpCtx] = deque()
        self.jobs: deque[Callable[[], Generator[simpy.Event, None, None]]] = deque()
        self._inflight: deque[float] = deque()
        self._half = max(1, readahead // 2)
        self._wake: simpy.Event | None = None
        self.requester: Turns
        self.fetch: WqeFetch
        self.counters = new_counters("doorbells", "doorbell_bad_target", "schedules", "jobs",
                                     "bf_as_doorbell", "bf_bad_write", "wqe_waits")
        # The send engines (QP schedulers, nicsim.nic.engines), two pipelined stages each:
        # a WQE started occupies a WQE stage for `wqe_cost` ns (scheduler pick and WQE
        # parse), a packet a header stage for `pkt_cost` (header build). A QP's items take
        # their turns in order (QpCtx.eng_free, hdr_free), so one QP gets one engine's rate.
        # Nic sets them from its config.
        self.units = Units(1)
        self.hdr_units = Units(1)
        self.wqe_cost = 0.0
        self.pkt_cost = 0.0
        # The rate limiter spaces packets within +-jitter of the exact gap (mean preserving):
        # see nicsim.nic.cc.config.CcConfig.pacing_jitter.
        self.jitter = jitter
        self._rng = random.Random(seed)
        # Pacing holds per QP number (see hold): a heap of (time, sequence number, hold
        # generation, QP), and the sequence numbers of those with an entry in SimPy's queue.
        self._holds: dict[int, tuple[list[tuple[float, int, int, QpCtx]], set[int]]] = {}

    def start(self, requester: Turns, fetch: WqeFetch) -> None:
        self.requester = requester
        self.fetch = fetch
        self.env.process(self._run())

    def kick(self, qp: QpCtx) -> None:
        """A doorbell (or leftover work) makes the QP eligible."""
        if not qp.scheduled:
            qp.scheduled = True
            self.ready.append(qp)
            self._poke()

    def add_job(self, job: Callable[[], Generator[simpy.Event, None, None]]) -> None:
        """Queue a transmit job (a READ response) ahead of requester work."""
        self.jobs.append(job)
        self._poke()

    def _poke(self) -> None:
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def emit(self, frame: bytes, ready_at: float,
             on_sent: Callable[[float], None] | None = None) -> float:
        """Hand a frame to the port (`on_sent`: as Port.send's). Returns a time the caller
        must wait until (0: no wait) so that at most `k` packets are decided ahead of the wire.

        When the window is full the engine waits for the older half of it to start, then
        decides the next half: reads are issued in bursts, and the lookahead stays between
        k/2 and k packets."""
        q = self._inflight
        q.append(self.port.send(frame, ready_at, on_sent))
        if len(q) >= self.k:
            for _ in range(self._half - 1):
                q.popleft()
            return q.popleft()
        return 0.0

    def window(self, wait: float) -> Generator[simpy.Event, None, None]:
        """Wait as `emit` said; a queued (PFC) port may hold frames longer than planned
        (a pause), so also wait until it has room for the next half window."""
        env = self.env
        if wait > env.now:
            yield env.timeout(wait - env.now)
        port = self.port
        while port.queued and port.backlog > self._half:
            yield port.room(self._half)

    # -- pacing: a rate-limited QP (nicsim.nic.cc) --------------------------------------------

    def paced(self, qp: QpCtx, frame_len: int) -> None:
        """A QP with a rate let a frame go: the next may go once this one's wire bytes
        (preamble, FCS and gap included) have left at qp.rate."""
        now = self.env.now
        start = qp.next_tx if qp.next_tx > now else now
        w = (frame_len if frame_len > ETH_MIN_FRAME else ETH_MIN_FRAME) + _WIRE_EXTRA
        qp.last_tx, qp.last_len = start, w
        gap = w * 8.0 / qp.rate  # type: ignore[operator]
        if self.jitter:
            gap *= 1.0 + self.jitter * (2.0 * self._rng.random() - 1.0)
        qp.next_tx = start + gap

    def hold(self, qp: QpCtx) -> None:
        """`qp` may not send before qp.next_tx: give it a turn then.

        The timer has the key `env.timeout(qp.next_tx - now)` would have: the same time,
        computed the same way, and one sequence number drawn here. A rate change holds the
        QP anew and voids the timer before, which would wait in SimPy's queue until its time
        (hundreds of them in a congested fabric, making every event dearer): so a QP's
        timers wait in a heap of their own, and only the earliest has an entry in SimPy's
        queue (a bare one, nicsim.sim.Entry); each is pushed with its own key when
        the one before it comes due, so every timer fires, and is checked, where its
        Timeout would."""
        qp.held = True
        qp.pace_gen += 1
        env = self.env
        now = env.now
        t, seq = now + (qp.next_tx - now), env.ticket()
        h = self._holds.get(qp.qpn)
        if h is None:
            h = self._holds[qp.qpn] = ([], set())
        pend, queued = h
        heappush(pend, (t, seq, qp.pace_gen, qp))
        if pend[0][1] == seq:  # the QP's earliest timer: it needs its entry now
            queued.add(seq)
            env.at_ticket(t, seq, Entry(self._unhold, h))

    def due(self, qp: QpCtx, wqe: SendWqe) -> float:
        """The earliest a send engine can start `wqe` of `qp`."""
        t = wqe.ready
        if qp.eng_free > t:
            t = qp.eng_free
        e = self.units.earliest()
        return e if e > t else t

    def wake_at(self, qp: QpCtx, at: float) -> None:
        """Give `qp` a turn at `at` (its next WQE is in the NIC then); an entry in SimPy's
        queue as in `hold`."""
        self.counters["wqe_waits"] += 1
        env = self.env
        env.at(at, Entry(self._woken, qp))

    def _woken(self, ev: Entry) -> None:
        self.kick(ev.value)  # type: ignore[arg-type]

    def _unhold(self, ev: Entry) -> None:
        pend, queued = ev.value  # type: ignore[misc]
        # The entry that came due is the QP's earliest timer (the earliest always has one).
        _t, seq, gen, qp = heappop(pend)
        queued.discard(seq)
        if pend and pend[0][1] not in queued:
            t, seq = pend[0][0], pend[0][1]
            queued.add(seq)
            self.env.at_ticket(t, seq, Entry(self._unhold, ev.value))
        if qp.pace_gen == gen and qp.held:
            qp.held = False
            self.kick(qp)

    def rate_changed(self, qp: QpCtx) -> None:
        """The QP's rate changed: its next packet is due by the new rate."""
        if qp.rate is None:
            qp.next_tx = qp.last_tx
        else:
            qp.next_tx = qp.last_tx + qp.last_len * 8.0 / qp.rate
        if qp.held:
            if qp.next_tx <= self.env.now:
                qp.held = False
                qp.pace_gen += 1
                self.kick(qp)
            else:
                self.hold(qp)

    def _run(self) -> Generator[simpy.Event, None, None]:
        env = self.env
        quantum = self.quantum
        while True:
            if self.jobs:
                self.counters["jobs"] += 1
                yield from self.jobs.popleft()()
                continue
            if not self.ready:
                self._wake = env.event()
                yield self._wake
                self._wake = None
                continue
            qp = self.ready.popleft()
            qp.scheduled = False
            more = yield from self.requester.turn(qp, quantum)
            if more:
                self.kick(qp)
