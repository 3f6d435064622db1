"""Who may touch the simulated world now, when a program runs several flows of control.

Under `nicsim exec` the simulated world lives in the one Python process of the program. A
program that forks (rdma-core's rdmacm tests fork a passive and an active side that talk
over RDMA CM) would give each child its own copy of the world, and the two copies never
meet. So `nicsim exec` runs fork-context multiprocessing children as threads of the process
that holds the world (nicsim.exec.threads), and this module keeps them from stepping on each
other: a thread runs only while it holds the world lock, like a GIL for the simulation. The
lock passes between threads in FIFO order at the points where a real program would block:

- `unlocked()`: around a wait on another flow of control (a Barrier, a Queue, a join),
- `idle()`: in a wait on the world itself (an empty CQ poll, a CM or CQ event wait): if
  another thread is ready to run, it runs first, and simulated time only passes when every
  thread is waiting.

Without threads (the usual case) every call here is a no-op, and nothing changes for a
sequential program: its world runs exactly as before.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Terminated(SystemExit):
    """Raised in a thread that Process.terminate() asked to stop, at its next world-lock
    hand-over (a thread cannot be killed from outside)."""


class WorldLock:
    """A re-entrant lock handed over first-come first-served."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._owner: int | None = threading.get_ident()  # the thread that installed it
        self._depth = 1
        self._waiting: deque[int] = deque()
        self.stop: set[int] = set()  # threads asked to terminate
        self.threads = 1  # flows of control that may still act (the installing one)
        self.round: set[int] = set()  # threads that found nothing since time last passed
        self.grants = 0  # times the lock was taken by a thread that did not hold it

    def _check_stop(self, me: int) -> None:
        if me in self.stop:
            self.stop.discard(me)
            raise Terminated(-15)

    def acquire(self) -> None:
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return
            self.grants += 1
            if self._owner is None and not self._waiting:
                self._owner, self._depth = me, 1
                return
            self._waiting.append(me)
            while self._owner != me:
                self._cond.wait(0.5)
                if self._owner != me and me in self.stop:
                    self._waiting.remove(me)
                    self._check_stop(me)
            self._depth = 1

    def _hand_over(self) -> None:
        self._owner = self._waiting.popleft() if self._waiting else None
        self._depth = 0
        self._cond.notify_all()

    def release(self) -> None:
        with self._cond:
            if self._owner != threading.get_ident():
                return
            self._depth -= 1
            if self._depth == 0:
                self._hand_over()

    def release_all(self) -> int:
        """Give the lock up entirely; returns the depth to restore."""
        with self._cond:
            if self._owner != threading.get_ident():
                return 0
            depth = self._depth
            self._hand_over()
            return depth

    def restore(self, depth: int) -> None:
        if depth:
            self.acquire()
            self._depth = depth
        self._check_stop(threading.get_ident())

    def contended(self) -> bool:
        return bool(self._waiting)

    def yield_(self) -> bool:
        """Let the threads waiting for the lock run first; returns whether any did."""
        if not self._waiting or self._owner != threading.get_ident():
            return False
        self.restore(self.release_all())
        return True


_lock: WorldLock | None = None
_at_exit: dict[int, list[Callable[[], None]]] = {}


def at_exit(fn: Callable[[], None]) -> None:
    """Run `fn` when the calling flow of control ends (what a process's exit closes: its
    device files, its CM IDs). The program's main thread runs them at interpreter exit."""
    me = threading.get_ident()
    if me == threading.main_thread().ident:
        atexit.register(fn)
    else:
        _at_exit.setdefault(me, []).append(fn)


def exited() -> None:
    """The calling thread ends: run what it registered, newest first."""
    for fn in reversed(_at_exit.pop(threading.get_ident(), [])):
        fn()


def install() -> WorldLock:
    """Start coordinating threads (the calling thread holds the world)."""
    global _lock
    if _lock is None:
        _lock = WorldLock()
    return _lock


def lock() -> WorldLock | None:
    return _lock


def idle() -> bool:
    """A wait on the world found nothing: let the other threads run first. Returns whether
    they did (the caller then looks again before letting simulated time pass). A round ends
    when a thread comes back to idle() having already let the others run in it: every thread
    has looked and found nothing, so this one lets simulated time pass (False), and no two
    waiters hand the world to each other forever."""
    if _lock is None:
        return False
    me = threading.get_ident()
    if me in _lock.round:
        _lock.round.clear()
        return False
    _lock.round.add(me)
    if _lock.yield_():
        return True
    _lock.round.clear()
    return False


QUIET_S = 0.2  # wall-clock time with no other side taking the world, before time may jump


def quiet() -> bool:
    """Before simulated time jumps ahead (to a timer of an idle world): whether every other
    side of the program has left the world alone for QUIET_S of wall-clock time, the world
    free meanwhile. A side just released by a barrier is not yet back on the world, and must
    act before time passes under it; False as soon as one takes the world (look again)."""
    lk = _lock
    if lk is None or lk.threads <= 1:
        return True
    seen = lk.grants
    end = time.monotonic() + QUIET_S
    while time.monotonic() < end:
        with unlocked():
            time.sleep(0.001)
        if lk.grants != seen + 1:  # (+1: this thread's own restore)
            return False
        seen = lk.grants
    return True


def others() -> bool:
    """Whether another flow of control may still act on the world (so a wait on an idle world
    may yet end)."""
    return _lock is not None and _lock.threads > 1


# How long (wall-clock seconds) a wait on an idle world waits for another side of the program
# before it gives up: a real deadlock ends in an error, not a hang.
IDLE_LIMIT_S = 20.0


def since() -> float:
    """The start of a wait, for wait_for_others."""
    return time.monotonic()


def wait_for_others(started: float) -> bool:
    """The world is idle and the caller's wait found nothing. With other sides of the program
    that may still act, let them (a ready one runs now; otherwise sleep a little with the
    world free) and return True, so the caller looks again; False when there is no other side,
    or after IDLE_LIMIT_S of wall-clock time since `started`."""
    if _lock is None or _lock.threads <= 1 or time.monotonic() - started > IDLE_LIMIT_S:
        return False
    if not _lock.yield_():
        with unlocked():
            time.sleep(0.002)
    return True


@contextmanager
def unlocked() -> Iterator[None]:
    """Around a block on another thread: the world is free for the others meanwhile."""
    if _lock is None:
        yield
        return
    depth = _lock.release_all()
    try:
        yield
    finally:
        _lock.restore(depth)
