"""Fork-context multiprocessing under `nicsim exec`: children run as threads of the process
that holds the simulated world.

A program that forks two sides of an RDMA conversation (rdma-core's rdmacm tests do:
`mp.get_context('fork').Process` for a passive and an active side, with an `mp.Barrier` and an
`mp.Queue` between them) would give each child a private copy of the world, and the two sides
would never meet. Under `nicsim exec`, `multiprocessing.get_context('fork')` therefore returns
a context whose Process runs its target in a thread of this process, sharing the one world;
its Barrier, Queue, SimpleQueue and Event have threading's interfaces. This is a visible difference
from real processes, and it is meant to be:

- the children share the parent's memory (globals, objects) instead of copies of it;
- a child's exit is what the process would report: `exitcode` 0 on return, the code of
  `sys.exit(code)` (SystemExit), 1 after an uncaught exception (its traceback printed to
  stderr, as multiprocessing does), -15 when `terminate()` stopped it;
- `terminate()` cannot kill a thread: the child stops (SystemExit) where it waits (on the world
  or on another side, which is where a stuck child is), as soon as the world is handed to it;
- only one thread runs at a time (nicsim.driver.sched's scheduler): a child that waits (a
  Barrier, a Queue, an Event, a join, an empty CQ poll, a CM event) lets the others run, and
  simulated time passes only when every side waits, to the earliest time one of them wakes
  (a run is as repeatable as a sequential program's);
- the timeouts of Barrier, Queue, Event and join are in seconds of simulated time, and a wait
  that no other side can end any more ends at once (a Barrier breaks, Queue.get raises
  queue.Empty, Event.wait returns False, join returns with the child still alive) instead of
  hanging.

Other contexts ('spawn', 'forkserver', the default one) are untouched: their children start a
new interpreter, with a world of their own.
"""

from __future__ import annotations

import multiprocessing
import queue
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from nicsim.driver import sched

_real_get_context = multiprocessing.get_context


class Process:
    """multiprocessing.Process's interface, run as a thread of this process."""

    _count = 0

    def __init__(self, group: None = None, target: Callable[..., object] | None = None,
                 name: str | None = None, args: tuple = (), kwargs: dict | None = None,
                 *, daemon: bool | None = None) -> None:
        Process._count += 1
        self.name = name or f"Process-{Process._count}"
        self._target, self._args, self._kwargs = target, args, dict(kwargs or {})
        self.daemon = bool(daemon)
        self.exitcode: int | None = None
        self._thread: threading.Thread | None = None
        self._flow: sched.Flow | None = None
        self._sched: sched.Scheduler | None = None

    def run(self) -> None:
        if self._target is not None:
            self._target(*self._args, **self._kwargs)

    def _main(self) -> None:
        s, flow = self._sched, self._flow
        assert s is not None and flow is not None
        code = 0
        try:
            s.enter(flow)
            try:
                self.run()
            finally:
                sched.exited()  # what the process's exit closes (its devices, its CM IDs)
        except SystemExit as e:
            c = e.code
            code = c if isinstance(c, int) else 0 if c is None else 1
            if not isinstance(c, int) and c is not None:
                print(c, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - a child reports any exception by its exit
            traceback.print_exc()
            code = 1
        finally:
            self.exitcode = code
            s.leave(flow)

    def start(self) -> None:
        if self._thread is not None:
            raise AssertionError("cannot start a process twice")
        self._sched = sched.install()
        self._flow = self._sched.spawn(self.name)
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    @property
    def ident(self) -> int | None:
        return None if self._thread is None else self._thread.native_id

    pid = ident

    def is_alive(self) -> bool:
        return self._flow is not None and not self._flow.done

    def join(self, timeout: float | None = None) -> None:
        if self._thread is None or self._flow is None:
            raise AssertionError("can only join a started process")
        flow = self._flow
        if sched.wait_until(lambda: flow.done, timeout):
            self._thread.join()  # (it has handed the world on: its thread is ending)

    def terminate(self) -> None:
        if self._sched is not None and self._flow is not None:
            self._sched.terminate(self._flow)

    kill = terminate

    def close(self) -> None:
        if self.is_alive():
            raise ValueError("Cannot close a process while it is still running")


class Barrier:
    """threading.Barrier's interface, its waits on the scheduler."""

    def __init__(self, parties: int, action: Callable[[], object] | None = None,
                 timeout: float | None = None) -> None:
        if parties < 1:
            raise ValueError("parties must be > 0")
        self.parties, self._action, self._timeout = parties, action, timeout
        self._count = 0  # parties waiting in this round
        self._round = 0  # rounds completed
        self._resets = 0  # times the waiting parties were sent away (reset, abort)
        self._broken = False

    def wait(self, timeout: float | None = None) -> int:
        if timeout is None:
            timeout = self._timeout
        if self._broken:
            raise threading.BrokenBarrierError
        index = self._count
        self._count += 1
        if self._count == self.parties:
            if self._action is not None:
                try:
                    self._action()
                except BaseException:
                    self.abort()
                    raise
            self._count = 0
            self._round += 1
            return index
        rnd, resets = self._round, self._resets
        sched.wait_until(lambda: self._round != rnd or self._resets != resets, timeout)
        if self._round != rnd:
            return index
        if self._resets == resets:  # timed out, or no other side can come: break it
            self.abort()
        raise threading.BrokenBarrierError

    def reset(self) -> None:
        if self._count:
            self._resets += 1
        self._count, self._broken = 0, False

    def abort(self) -> None:
        self._broken = True
        if self._count:
            self._resets += 1
        self._count = 0

    @property
    def n_waiting(self) -> int:
        return self._count

    @property
    def broken(self) -> bool:
        return self._broken


class Queue(queue.Queue):
    def __init__(self, maxsize: int = 0, **_: object) -> None:
        super().__init__(maxsize)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        while True:
            try:
                return super().get(False)
            except queue.Empty:
                if not block or not sched.wait_until(lambda: self.qsize() > 0, timeout):
                    raise
            # (another side may take it first: wait again)

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        while True:
            try:
                super().put(item, False)
                return
            except queue.Full:
                if not block or not sched.wait_until(lambda: not self.full(), timeout):
                    raise

    def close(self) -> None:
        """(a pipe's end in multiprocessing; nothing to close here)"""

    def join_thread(self) -> None:
        """(multiprocessing's feeder thread; there is none)"""


class SimpleQueue(Queue):
    def empty(self) -> bool:
        return super().empty()


class Event(threading.Event):
    def wait(self, timeout: float | None = None) -> bool:
        return sched.wait_until(self.is_set, timeout)


class ThreadContext:
    """What get_context('fork') returns under nicsim exec."""

    _start_method = "fork"
    Process = Process
    Barrier = Barrier
    Queue = Queue
    JoinableQueue = Queue
    SimpleQueue = SimpleQueue
    Event = Event

    def get_start_method(self, allow_none: bool = False) -> str:
        return self._start_method

    def cpu_count(self) -> int:
        return multiprocessing.cpu_count()

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"nicsim exec runs fork-context children as threads "
                             f"(nicsim.exec.threads); {name} is not provided there")


_CONTEXT = ThreadContext()


def get_context(method: str | None = None) -> Any:
    if method == "fork":
        return _CONTEXT
    return _real_get_context(method)


def install() -> None:
    """Route multiprocessing.get_context('fork') to the thread context (nicsim exec)."""
    multiprocessing.get_context = get_context  # type: ignore[assignment]
