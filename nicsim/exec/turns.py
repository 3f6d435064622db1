"""When simulated time may pass for the C programs of one world (nicsim.exec.cserver).

Each connected program is, at any moment, in one of four phases (`Phase`):

- running: it is between verbs calls, or in one that does not wait. Its next call is due at
  the world's time now (its CPU time between calls is charged per call, by the host's CPU
  costs), so the world must not run ahead of it;
- waiting: it is in an empty poll of a CQ or a wait for a completion event. Time may pass
  for it, up to its poll's cap, or until the device writes what it polls (plus the poll's
  cost: MONITOR/MWAIT, as nicsim.host.Host.poll_wait);
- blocked: it has made no call for a while and sleeps in the kernel (perftest's TCP exchange,
  a sleep): time may pass without it;
- spinning: it has made no call for a while and burns CPU: it polls its own memory (perftest's
  `ib_write_lat` spins on the buffer's last byte). Time may pass, and stops at the first
  device write into its host's memory, which may be what it waits for.

The world runs only while no program is running: a program whose poll finds nothing does not
let simulated time pass while its peer is between two calls (it waits, in real time, for the
peer's next call or wait), so two programs measure each other's latency as one program
would measure a loop-back. This is the conservative rule of parallel discrete-event
simulation, with the programs as the logical processes; a program's quiet phases (blocked,
spinning) are told from the real machine (/proc and the program's CPU clock), which is the one
place the machine's load can reach the results: a program descheduled for longer than the
spin threshold is taken for spinning. `Turns` is what `Host.cpu` is for every host of the
world (Host.spend and Host.poll_wait call `sleep` and `wait_write`).

One request touches the world at a time, in the order they came (`world`, a ticket lock).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import Any

from nicsim.host.host import poll_alone
from nicsim.sim import WakeFlag

INF = float("inf")
# A program that has made no call for this much of its own CPU time is spinning.
SPIN_CPU_NS = 1_000_000
# How often a serving thread looks at a program that makes no call (seconds, real time).
QUIET_SLICE_S = 0.0005
# Simulated time the world runs per step while only spinning programs wait on it.
SPIN_STEP_NS = 100_000.0
# How long (real time) a wait held back by a program spinning on its clock sleeps before it
# looks again.
CLOCK_WAIT_S = 0.0002
# A spinning program whose clock has not moved for this long (real time) spins on its memory.
CLOCK_STILL_S = 0.005


class Phase(Enum):
    RUNNING = "running"
    WAITING = "waiting"
    BLOCKED = "blocked"
    SPINNING = "spinning"


@dataclass(eq=False)
class Turn:
    """One program's standing."""

    pid: int
    mems: list[Any]  # its hosts' memories: a device write there wakes it when it spins
    phase: Phase = Phase.RUNNING
    changes: int = 0  # phase changes so far (its serving thread sees a wake it did not make)
    due: float = INF  # waiting: when its wait ends (its cap, or a write it saw + its cost)
    start: float = 0.0
    cost: float = 0.0
    woke: bool = False  # waiting: a device write it watched landed
    ready: bool = False  # waiting: its wait is over (it is running again)
    woken: bool = False  # spinning: a device write woke it (its clock is to be told)
    clock: Callable[[], int | None] = lambda: None  # its own clock (clocks.c), if it has one
    spun_from: int | None = None  # spinning: its clock when last looked at
    clock_moved: float = -INF  # spinning: when (real time) its clock was last seen to move
    watches: list[tuple[Any, tuple]] = field(default_factory=list)  # spinning: its watches


class Turns:
    """The phases of a world's programs, the lock on the world, and the stepping of time
    (see the module docstring). `before_step` and `after_step` run around every step of
    the world: programs' memory a peer may read is brought in, and what the device wrote is
    copied out to them (nicsim.exec.cmem), so a spinning program sees its data."""

    def __init__(self, before_step: Callable[[], None], after_step: Callable[[], None],
                 resume: Callable[[Turn], None]) -> None:
        self._cv = threading.Condition()
        self._next = self._serving = 0  # the world lock's tickets
        self._local = threading.local()
        self.turns: list[Turn] = []
        self.env: Any = None
        self._before, self._after = before_step, after_step
        # A program whose wait let others' requests run gets the world back: its request
        # goes on as its own (the driver's current process).
        self._resume = resume
        self._flag = WakeFlag()
        self._generation = 0  # bumped at every change of phase
        self._closed = False
        self._stepper: threading.Thread | None = None
        self._stepping = False  # in a step (what runs around it spends its CPU time as is)

    # -- the world lock ------------------------------------------------------------------------

    @contextmanager
    def world(self) -> Iterator[None]:
        """Hold the world (requests in their order of arrival)."""
        with self._cv:
            self._take()
        try:
            yield
        finally:
            with self._cv:
                self._give()

    def _take(self) -> None:
        ticket = self._next
        self._next += 1
        while ticket != self._serving:
            self._cv.wait()

    def _give(self) -> None:
        self._serving += 1
        self._cv.notify_all()

    def _wait(self, until: Callable[[], bool], timeout_s: float | None = None) -> None:
        """(Holding the world) let go of it until `until()` (or `timeout_s` of real time),
        then take it again."""
        with self._cv:
            self._give()
            self._cv.wait_for(until, timeout_s)
            self._take()

    def _changed(self) -> None:
        """(Under the condition) a phase changed: wake whoever waits on one."""
        self._generation += 1
        self._cv.notify_all()

    def _set(self, t: Turn, phase: Phase) -> None:
        """(Under the condition) `t` is in `phase` from now on."""
        t.phase = phase
        t.changes += 1
        self._changed()

    # -- programs --------------------------------------------------------------------------------

    def attach(self, env: Any, hosts: list[Any]) -> None:
        """Time of `hosts` (the world's, on clock `env`) passes here from now on."""
        self.env = env
        for h in hosts:
            h.cpu = self
        if self._stepper is None:
            self._stepper = threading.Thread(target=self._spin_steps, daemon=True,
                                             name="nicsim-verbs-turns")
            self._stepper.start()

    def join(self, pid: int, mems: list[Any]) -> Turn:
        t = Turn(pid, mems)
        with self._cv:
            self.turns.append(t)
            self._changed()
        return t

    def leave(self, t: Turn) -> None:
        """(Holding the world) the program is gone."""
        self._unwatch(t)
        with self._cv:
            if t in self.turns:
                self.turns.remove(t)
            self._changed()

    def serve(self, t: Turn | None) -> None:
        """The calling thread serves `t`'s requests (its waits are `t`'s)."""
        self._local.turn = t

    def called(self, t: Turn) -> None:
        """`t`'s program made a call: it runs (the world waits for it from now on)."""
        with self._cv:
            if t.phase is not Phase.RUNNING:
                self._set(t, Phase.RUNNING)

    def settle(self, t: Turn) -> None:
        """(Holding the world, at the start of `t`'s request) a spinning program's watches
        go."""
        self._unwatch(t)

    def quiet(self, t: Turn, spinning: bool, calling: Callable[[], bool]) -> None:
        """`t`'s program has made no call for a while: it sleeps in the kernel, or spins;
        unless `calling()` says its next call has come meanwhile (a program waiting for the
        answer to a call sleeps too)."""
        if not spinning:
            with self.world():
                if t.phase in (Phase.RUNNING, Phase.SPINNING) and not calling():
                    self._unwatch(t)
                    with self._cv:
                        self._set(t, Phase.BLOCKED)
            return
        with self.world():
            if t.phase not in (Phase.RUNNING, Phase.BLOCKED) or t not in self.turns \
                    or calling():
                return
            for mem in t.mems:
                t.watches.append((mem, mem.watch(0, mem.size, partial(self._spinner_wrote, t))))
            t.spun_from, t.clock_moved = t.clock(), -INF
            with self._cv:
                self._set(t, Phase.SPINNING)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._changed()

    # -- Host.cpu --------------------------------------------------------------------------------

    def sleep(self, ns: float) -> None:
        """CPU time of the program whose request this thread serves: a wait of `ns` (its
        CPU is busy until then), so a program whose wait ends meanwhile runs in between, at
        its own time, as two CPUs would."""
        me = self._me()
        if me is None or self._stepping:  # (the interrupt handler after a step: its own)
            self.env.advance(self.env.now + ns)
        else:
            self._wait_world(me, self.env.now + ns)

    def wait_write(self, mem: Any, lo: int, hi: int, cost: float, cap_ns: float) -> bool:
        """An empty poll of [lo, hi) by the program whose request this thread serves (the
        caller holds the world): time passes for it when no program is running."""
        me = self._me()
        env = self.env
        if me is None:
            return poll_alone(env, mem, lo, hi, cost, cap_ns)
        entry = mem.watch(lo, hi, partial(self._waiter_wrote, me))
        try:
            self._wait_world(me, env.now + cap_ns, cost)
        finally:
            mem.unwatch(entry)
        return me.woke

    def _me(self) -> Turn | None:
        """The program whose request this thread serves, or None (a wait outside any
        program's request: the world's set-up)."""
        me: Turn | None = getattr(self._local, "turn", None)
        return me if me is not None and me in self.turns else None

    def _wait_world(self, me: Turn, due: float, cost: float = 0.0) -> None:
        """(Holding the world) `me` waits until `due`, or until a write it watches lands
        (then at least `cost` after it began): the world runs only while no program runs."""
        env = self.env
        me.start, me.cost, me.due = env.now, cost, due
        me.woke = me.ready = False
        with self._cv:
            self._set(me, Phase.WAITING)
        try:
            while not me.ready:
                if self._running():
                    self._wait(lambda: me.ready or not self._running())
                    self._resume(me)
                    continue
                if not self._can_step():
                    # A program spinning on its clock is behind: time waits for it.
                    self._wait(lambda: False, CLOCK_WAIT_S)
                    self._resume(me)
                    continue
                self._step()
        finally:
            with self._cv:
                me.ready = False
                self._set(me, Phase.RUNNING)

    # -- stepping --------------------------------------------------------------------------------

    def _running(self) -> bool:
        return any(t.phase is Phase.RUNNING for t in self.turns)

    def _clock_bound(self) -> float:
        """How far the world may run for the programs spinning on their own clock (perftest's
        get_cpu_mhz samples gettimeofday for seconds): to the earliest of their clocks, so
        that none of them finds, at its next call, that the world ran past the time it had
        read (its clock is its own while it spins: clocks.c). A program spinning on its
        memory reads no clock and bounds nothing."""
        bound = INF
        real = time.monotonic()
        for t in self.turns:
            if t.phase is not Phase.SPINNING:
                continue
            c = t.clock()
            if c is None:
                continue
            if c != t.spun_from:  # it read its clock since we last looked: it is timing
                t.spun_from, t.clock_moved = c, real
            # Only while its clock keeps moving (a program that read its clock once and
            # then spins on its memory must not hold the world for ever).
            if real - t.clock_moved < CLOCK_STILL_S:
                bound = min(bound, float(c))
        return bound

    def _can_step(self) -> bool:
        """Whether a step would end a wait or move the clock (no spinning clock holds it)."""
        now = self.env.now
        if any(t.phase is Phase.WAITING and not t.ready and t.due <= now for t in self.turns):
            return True
        return self._clock_bound() > now

    def _step(self) -> bool:
        """(Holding the world, no program running) run the world to the end of the earliest
        wait, or to the first device write a waiting or spinning program watches. False if
        there was nothing to run for (no program waits or spins)."""
        env = self.env
        waiting = [t for t in self.turns if t.phase is Phase.WAITING and not t.ready]
        spinning = any(t.phase is Phase.SPINNING for t in self.turns)
        if not waiting and not spinning:
            return False
        end = min(t.due for t in waiting) if waiting else env.now + SPIN_STEP_NS
        end = min(end, max(self._clock_bound(), env.now))
        self._stepping = True
        try:
            self._before()
            self._flag.woke = False
            env.run_until_woken(end, self._flag)
            if not self._flag.woke and env.now < end:
                env.advance(end)
            self._after()
        finally:
            self._stepping = False
        now = env.now
        with self._cv:
            for t in waiting:
                if t.due <= now:
                    t.ready = True
                    self._set(t, Phase.RUNNING)  # (the world waits for it from now on)
            self._changed()
        return True

    def _waiter_wrote(self, t: Turn) -> None:
        if t.phase is Phase.WAITING and not t.woke:
            t.woke = True
            t.due = max(t.start + t.cost, self.env.now)
            self._flag.woke = True

    def _spinner_wrote(self, t: Turn) -> None:
        if t.phase is Phase.SPINNING:
            with self._cv:
                t.woken = True
                self._set(t, Phase.RUNNING)  # it may have seen what it spins for
            self._flag.woke = True

    def _unwatch(self, t: Turn) -> None:
        for mem, entry in t.watches:
            mem.unwatch(entry)
        t.watches.clear()

    def _spin_steps(self) -> None:
        """Time for spinning programs when no program runs or waits (two programs that each
        spin on their memory for the other's WRITE): a step at a time, until one runs; while
        the world has nothing to do, until a phase changes."""
        seen = -1
        while True:
            with self._cv:
                # (a wait with a timeout: a spinning clock moves on without a phase change)
                while not self._closed and not (
                        self._generation != seen and not self._running()
                        and any(t.phase is Phase.SPINNING for t in self.turns)
                        and not any(t.phase is Phase.WAITING for t in self.turns)):
                    if not self._cv.wait(CLOCK_WAIT_S * 5):
                        seen = -1
                if self._closed:
                    return
                seen = self._generation
            with self.world():
                if self.env is None or self._running() or any(
                        t.phase is Phase.WAITING for t in self.turns):
                    continue
                idle = self.env.peek() == INF
                stepped = self._can_step() and self._step()
                with self._cv:
                    # The world moved: step again unless someone runs; it had nothing to
                    # do: wait for a phase to change.
                    seen = -1 if stepped and not idle else self._generation


def program_cpu_ns(pid: int) -> int | None:
    """The CPU time a process has used (all its threads), or None if it is gone."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2)  # its CPUCLOCK_SCHED clock
    except OSError:
        return None


def program_asleep(pid: int) -> bool:
    """Whether every thread of the process sleeps in the kernel (or the process is gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The state follows the command's closing parenthesis (the name may hold spaces).
        if stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] == b"R":
            return False
    return True
