"""Completion and asynchronous events: the device's event queue, its interrupt handler, and
the event files processes read (ib_uverbs' completion event files and async event file).

The NIC writes EQEs into the event queue in host memory and raises an MSI-X interrupt, a
posted write of the EQ's vector word. A process blocked on an event file sleeps until that
word is written (the interrupt wakes the CPU), then the handler takes the EQEs, hands each
completion event to the channel of its CQ and each asynchronous event to the process that
owns the object it names, and re-arms the EQ. The interrupt's CPU cost is spent each time.
"""

from __future__ import annotations

import errno
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from nicsim.driver import sched
from nicsim.driver.kernel.hw.nsnic import NsnicDriver
from nicsim.driver.kernel.hw.objects import HwEq, HwError

from nicsim.hwif import EqeType

# How long a blocked read of an event file waits in simulated time before it gives up (a
# real read blocks forever; a simulated world that has nothing left to do ends it at once).
EVENT_WAIT_NS = 1e9
_WAKE_CAP_NS = 100_000.0
# The kind of object an asynchronous EQE names.
_ASYNC_KIND = {EqeType.CQ_ERR: "cq", EqeType.QP_FATAL: "qp", EqeType.SRQ_LIMIT_REACHED: "srq"}


class EventError(Exception):
    def __init__(self, msg: str, errno_: int) -> None:
        super().__init__(msg)
        self.errno = errno_


@dataclass
class CompChannel:
    """A completion event file (ibv_comp_channel): the CQs whose events it queues."""

    handle: int
    fd: int
    events: deque = field(default_factory=deque)  # CQ objects, one per completion event
    users: int = 0  # CQs that report to it


@dataclass
class AsyncEvent:
    """One asynchronous event as ibv_get_async_event returns it."""

    event_type: int  # ibv_event_type
    obj: object  # the CQ, QP or SRQ object, or the port number


class EventQueue:
    """The device's event queue and its interrupt handler (one per device, made on first use)."""

    def __init__(self, hw: NsnicDriver) -> None:
        self.hw = hw
        self.eq: HwEq | None = None
        self.cqs: dict[int, tuple[object, CompChannel | None, deque]] = {}  # CQN -> owner
        self.objs: dict[tuple[str, int], tuple[object, deque]] = {}  # (kind, n) -> owner
        self.interrupts = 0
        self.lost = 0  # events for objects that are gone

    def start(self) -> None:
        """Create the EQ (EOPNOTSUPP from a device without one)."""
        if self.eq is None:
            try:
                self.eq = self.hw.create_eq()
            except HwError as e:
                raise EventError(str(e), e.errno) from None

    def service(self) -> None:
        """The interrupt handler: dispatch every EQE the device has written."""
        if self.eq is None:
            return
        for e in self.hw.take_eqes(self.eq):
            if e.type == EqeType.COMPLETION:
                owner = self.cqs.get(e.obj)
                if owner is None or owner[1] is None:
                    self.lost += 1
                    continue
                owner[1].events.append(owner[0])
                continue
            kind = _ASYNC_KIND.get(EqeType(e.type))
            if kind == "cq":
                owner = self.cqs.get(e.obj)
                if owner is None:
                    self.lost += 1
                    continue
                owner[2].append(AsyncEvent(e.type, owner[0]))
                continue
            target = self.objs.get((kind, e.obj)) if kind else None
            if target is None:
                self.lost += 1
                continue
            target[1].append(AsyncEvent(e.type, target[0]))

    def wait(self, ready: Callable[[], bool], timeout_ns: float = EVENT_WAIT_NS) -> None:
        """Block until `ready()` (after the handler ran), sleeping on the interrupt.
        ETIMEDOUT when the simulated world can no longer produce one: it is idle, or
        `timeout_ns` of simulated time passed."""
        self.service()
        if ready():
            return
        if self.eq is None:
            raise EventError("no events can arrive: the device's event queue is not set up",
                             errno.ETIMEDOUT)
        host = self.hw.host
        env = host.env
        deadline = env.now + timeout_ns
        msi = self.eq.msi_pa
        waiting = sched.since()
        while True:
            # (a write already posted to the vector word wakes the wait when it lands)
            woke = host.poll_wait(0.0, msi, msi + 4, min(_WAKE_CAP_NS, deadline - env.now))
            if woke:
                self.interrupts += 1
                host.spend(host.costs.interrupt)
            self.service()
            if ready():
                return
            if not woke and env.peek() == float("inf"):
                if sched.wait_for_others(waiting):
                    continue  # another side of the program may still act (nicsim exec)
                raise EventError("no event can arrive: the simulated world has nothing left "
                                 "to do", errno.ETIMEDOUT)
            if env.now >= deadline:
                raise EventError(f"no event in {timeout_ns / 1e9:g} s of simulated time",
                                 errno.ETIMEDOUT)
