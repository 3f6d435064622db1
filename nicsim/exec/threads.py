"""Fork-context multiprocessing under `nicsim exec`: children run as threads of the process
that holds the simulated world.

A program that forks two sides of an RDMA conversation (rdma-core's rdmacm tests do:
`mp.get_context('fork').Process` for a passive and an active side, with an `mp.Barrier` and an
`mp.Queue` between them) would give each child a private copy of the world, and the two sides
would never meet. Under `nicsim exec`, `multiprocessing.get_context('fork')` therefore returns
a context whose Process runs its target in a thread of this process, sharing the one world;
its Barrier, Queue, SimpleQueue and Event are the threading ones. This is a visible difference
from real processes, and it is meant to be:

- the children share the parent's memory (globals, objects) instead of copies of it;
- a child's exit is what the process would report: `exitcode` 0 on return, the code of
  `sys.exit(code)` (SystemExit), 1 after an uncaught exception (its traceback printed to
  stderr, as multiprocessing does), -15 when `terminate()` stopped it;
- `terminate()` cannot kill a thread: the child stops (SystemExit) the next time it waits on
  the world or on another side, which is where a stuck child is;
- only one thread runs at a time (nicsim.driver.sched's world lock): a child that
  waits (a Barrier, a Queue, an empty CQ poll, a CM event) lets the others run, and simulated
  time passes only when every side waits on the world.

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

    def run(self) -> None:
        if self._target is not None:
            self._target(*self._args, **self._kwargs)

    def _main(self) -> None:
        lock = sched.lock()
        assert lock is not None
        code = 0
        try:
            lock.acquire()
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
            lock.threads -= 1
            lock.release_all()

    def start(self) -> None:
        if self._thread is not None:
            raise AssertionError("cannot start a process twice")
        lock = sched.install()
        lock.threads += 1
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    @property
    def ident(self) -> int | None:
        return None if self._thread is None else self._thread.native_id

    pid = ident

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is None:
            raise AssertionError("can only join a started process")
        with sched.unlocked():
            self._thread.join(timeout)

    def terminate(self) -> None:
        lock = sched.lock()
        t = self._thread
        if lock is not None and t is not None and t.is_alive() and t.ident is not None:
            lock.stop.add(t.ident)

    kill = terminate

    def close(self) -> None:
        if self.is_alive():
            raise ValueError("Cannot close a process while it is still running")


class Barrier(threading.Barrier):
    def wait(self, timeout: float | None = None) -> int:
        with sched.unlocked():
            return super().wait(timeout)


class Queue(queue.Queue):
    def __init__(self, maxsize: int = 0, **_: object) -> None:
        super().__init__(maxsize)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        with sched.unlocked():
            return super().get(block, timeout)

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        with sched.unlocked():
            super().put(item, block, timeout)

    def close(self) -> None:
        """(a pipe's end in multiprocessing; nothing to close here)"""

    def join_thread(self) -> None:
        """(multiprocessing's feeder thread; there is none)"""


class SimpleQueue(Queue):
    def empty(self) -> bool:
        return super().empty()


class Event(threading.Event):
    def wait(self, timeout: float | None = None) -> bool:
        with sched.unlocked():
            return super().wait(timeout)


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
