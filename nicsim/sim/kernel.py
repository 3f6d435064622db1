"""The simulation kernel: the only code that knows how SimPy keeps time and its event queue.

Everything in nicsim runs on one `Sim`, a SimPy Environment: processes and `timeout` work
as in SimPy. What the model adds, for speed, is here and only here:

- **Entries** (`Entry`, `Tick`): bare items in the event queue with a callback, at an exact
  time, without a SimPy event object each. `at(t, entry)` schedules one where a `Timeout`
  made now would sit in the event order; `ticket()` draws that place ahead (a link draws it
  when a frame leaves, and schedules the frame when it is the next of its direction).
- **Streams** (`deliver`): a run of items, each of which stands for an event of its own, is
  delivered in one go while each is the next event of the whole simulation, moving the clock
  to each: the same order and times as an event per item, without the events.
- **Running** (`advance`, `run_events`, `horizon`): the synchronous facade runs the world up
  to a time, or until a flag is set, without an `env.step()` call per event; `horizon` is how
  far a caller runs the world, which streams must not pass.

SimPy is pinned to a tested range (pyproject.toml); a test checks that no other module reads
or writes SimPy's internals (`_now`, `_queue`, `_eid`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Protocol

import simpy
from simpy.core import StopSimulation
from simpy.events import EventPriority

NORMAL = 1  # simpy.events.NORMAL: the priority of a Timeout, and of every entry here
NO_HORIZON = (float("-inf"), False)


class Entry:
    """A bare entry in the event queue: `callback(entry)` runs at its time; `value` is the
    caller's (what Environment.step needs of an event, and nothing more)."""

    __slots__ = ("callbacks", "_ok", "value")

    def __init__(self, callback: Callable[[Entry], None], value: object = None) -> None:
        self.callbacks = [callback]
        self._ok = True
        self.value = value


class Tick:
    """A reusable entry, for timers that carry nothing of their own (the end of a frame on a
    port's wire): one object may stand in the queue any number of times. The kernel takes
    its callbacks when it fires; the callback must call `rearm()` first thing."""

    __slots__ = ("callbacks", "_saved")
    _ok = True

    def __init__(self, callback: Callable[[Tick], None]) -> None:
        self.callbacks = self._saved = (callback,)

    def rearm(self) -> None:
        self.callbacks = self._saved


class Woken(Protocol):
    woke: bool


class WakeFlag:
    """A Woken that a watch callback sets (run_until_woken stops at it)."""

    __slots__ = ("woke",)

    def __init__(self) -> None:
        self.woke = False


class Sim(simpy.Environment):
    """A SimPy Environment with the kernel's services (see the module docstring)."""

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        self.horizon: tuple[float, bool] = NO_HORIZON

    # -- scheduling ---------------------------------------------------------------------------

    def ticket(self) -> int:
        """The place in the event order an event made now takes (its sequence number)."""
        return next(self._eid)

    def at(self, t: float, entry: Entry | Tick) -> None:
        """Schedule `entry` at time `t`, where a Timeout made now for `t` would sit."""
        heappush(self._queue, (t, NORMAL, next(self._eid), entry))

    def at_ticket(self, t: float, ticket: int, entry: Entry | Tick) -> None:
        """Schedule `entry` at `t` in the place `ticket` (from `ticket()`) reserved."""
        heappush(self._queue, (t, NORMAL, ticket, entry))

    def call_at(self, t: float, callback: Callable[[Entry], None],
                value: object = None) -> Entry:
        """`callback(entry)` at time `t`; returns the entry (its `value` is `value`)."""
        e = Entry(callback, value)
        heappush(self._queue, (t, NORMAL, next(self._eid), e))
        return e

    def events_created(self) -> int:
        """How many events and entries have been scheduled so far (the tickets drawn)."""
        return int(repr(self._eid)[6:-1])  # "count(N)": itertools.count keeps no public value

    # -- streams ------------------------------------------------------------------------------

    def deliver(self, q: deque, handle: Callable[[tuple], None]) -> tuple[float, int] | None:
        """Deliver the items of `q` ((time, ticket, ...) in event order) that are each the
        next event of the simulation, within the horizon: move the clock to each, take it off
        `q` and hand it to `handle`. Returns the (time, ticket) of the first item left, whose
        entry the caller arms, or None when `q` is empty."""
        heap = self._queue
        horizon, inclusive = self.horizon
        while q:
            item = q[0]
            t, seq = item[0], item[1]
            if heap:
                h = heap[0]
                if h[0] < t or h[0] == t and (h[1] < NORMAL or h[1] == NORMAL and h[2] < seq):
                    return t, seq
            if t > horizon or (t == horizon and not inclusive):
                return t, seq
            self._now = t
            q.popleft()
            handle(item)
        return None

    # -- running ------------------------------------------------------------------------------

    def run_events(self, t: float, inclusive: bool, stop: Woken | None = None) -> None:
        """Process the events due before `t` (and at `t` if `inclusive`), in order, until
        `stop.woke` is set: what a loop of env.step() does (the same events in the same
        order; a failed event nobody defused raises; StopSimulation leaves the rest of the
        event's callbacks for later), without a call to step and peek per event."""
        q = self._queue
        while q:
            ev_t = q[0][0]
            if ev_t > t or ev_t == t and not inclusive or stop is not None and stop.woke:
                return
            self._now, _, _, event = heappop(q)
            callbacks, event.callbacks = event.callbacks, None
            try:
                for callback in callbacks:
                    callback(event)
            except StopSimulation:
                event.callbacks = callbacks[callbacks.index(callback) + 1:]
                self.schedule(event, EventPriority(-1))
                raise
            if not event._ok and not hasattr(event, "_defused"):
                exc = type(event._value)(*event._value.args)
                exc.__cause__ = event._value
                raise exc

    def advance(self, t: float) -> None:
        """Run the world until time `t` (what env.run(until=t) does, without its per-call
        cost: the facade calls this several times per verbs call). Streams deliver up to the
        horizon: before `t`, then at `t` too once the end of the run is itself an event."""
        saved = self.horizon
        self.horizon = (t, False)
        try:
            self.run_events(t, False)
            if self._now < t:
                ev = self.timeout(t - self._now)
                self.horizon = (t, True)
                step = self.step
                while not ev.processed:
                    step()
        finally:
            self.horizon = saved

    def run_until_woken(self, deadline: float, stop: Woken) -> None:
        """Run the world until `stop.woke` is set or `deadline` has come (events at the
        deadline included); the clock stays at the last event run."""
        saved = self.horizon
        self.horizon = (deadline, True)
        try:
            self.run_events(deadline, True, stop)
        finally:
            self.horizon = saved
