"""Host programs that run at the same time: one CPU per program, one simulated clock.

The synchronous facade (nicsim.host.host) runs a host's software as ordinary Python that
moves the world forward whenever it spends CPU time. With one program that is exact. Two
programs on two hosts (perftest's server and client, a ping-pong) must not take turns on one
clock: while host a polls its CQ, host b reposts receives, and neither waits for the other.

`run_together` gives each program a thread of its own and lets exactly one of them run at a
time: a program that spends CPU time or waits for a device write hands control back to the
scheduler, which runs the world's events until the earliest waiting program is due and then
resumes it. Threads are only the way to keep each program's Python stack; there is no
parallelism, and the order (by simulated time, then by the order the programs were given) is
deterministic, so a run with the same seed is bit-for-bit reproducible.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import simpy


class Deadlock(RuntimeError):
    """Every program waits and nothing in the world will ever wake one."""


class _Program:
    def __init__(self, name: str, fn: Callable[[], Any]) -> None:
        self.name = name
        self.fn = fn
        self.go = threading.Semaphore(0)
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False


class Cpus:
    """The scheduler of programs running together (see the module docstring)."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._ready: deque[_Program] = deque()
        self._back = threading.Semaphore(0)  # a program hands control back to the scheduler
        self._local = threading.local()
        self._aborting = False

    # -- called from a program's thread (through Host.spend / Host.poll_wait) ----------------

    def _current(self) -> _Program:
        return self._local.program  # type: ignore[no-any-return]

    def _block_on(self, ev: simpy.Event) -> None:
        me = self._current()
        ev.callbacks.append(lambda _e: self._ready.append(me))
        self._back.release()
        me.go.acquire()
        if self._aborting:
            raise _Aborted

    def sleep(self, ns: float) -> None:
        """The current program's CPU is busy for `ns`."""
        self._block_on(self.env.timeout(ns))

    def wait_write(self, mem: Any, lo: int, hi: int, cost: float, cap_ns: float) -> bool:
        """An empty poll of [lo, hi): sleep until a device write lands there (at least `cost`,
        at most `cap_ns`), as Host.poll_wait does for a program alone. Returns whether a
        write woke it."""
        env = self.env
        start = env.now
        ev = env.event()
        woke = [False]

        def wake() -> None:
            woke[0] = True
            if not ev.triggered:
                ev.succeed()

        entry = mem.watch(lo, hi, wake)
        limit = env.timeout(cap_ns)
        limit.callbacks.append(lambda _e: None if ev.triggered else ev.succeed())
        self._block_on(ev)
        mem.unwatch(entry)
        rest = (start + cost - env.now) if woke[0] else 0.0
        if rest > 0:
            self.sleep(rest)
        return woke[0]

    # -- the scheduler (the caller's thread) ------------------------------------------------

    def run(self, programs: list[tuple[str, Any, Callable[[], Any]]]) -> list[Any]:
        """Run `programs` (name, host, function) together until all return; their results in
        order. A program's exception is raised here once every program has stopped."""
        progs = [_Program(n, fn) for n, _h, fn in programs]
        hosts = [h for _n, h, _fn in programs]
        for h in hosts:
            h.cpu = self
        threads = []
        for p in progs:
            t = threading.Thread(target=self._body, args=(p,), name=f"cpu-{p.name}",
                                 daemon=True)
            threads.append(t)
            t.start()
        self._ready.extend(progs)
        alive = len(progs)
        try:
            while alive:
                if self._ready:
                    p = self._ready.popleft()
                    p.go.release()
                    self._back.acquire()
                    if p.done:
                        alive -= 1
                        if p.error is not None:
                            self._abort(progs)
                            raise p.error
                    continue
                if self.env.peek() == simpy.core.Infinity:
                    waiting = ", ".join(p.name for p in progs if not p.done)
                    self._abort(progs)
                    raise Deadlock(f"{waiting}: waiting, and nothing in the world will wake "
                                   f"them")
                self.env.step()
        finally:
            for h in hosts:
                h.cpu = None
        for t in threads:
            t.join()
        return [p.result for p in progs]

    def _body(self, p: _Program) -> None:
        p.go.acquire()
        self._local.program = p
        try:
            p.result = p.fn()
        except BaseException as e:  # noqa: BLE001 - handed to the scheduler's thread
            p.error = e
        p.done = True
        self._back.release()

    def _abort(self, progs: list[_Program]) -> None:
        """Stop the programs still waiting: each wakes with an exception that ends it."""
        self._aborting = True
        for p in progs:
            if not p.done:
                p.go.release()
                self._back.acquire()


class _Aborted(BaseException):
    """Raised in a program's thread when the run is abandoned."""
