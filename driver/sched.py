"""Who may touch the simulated world now, and when simulated time may pass, when a program
runs several flows of control.

Under `nicsim exec` the simulated world lives in the one Python process of the program. A
program that forks (rdma-core's rdmacm tests fork a passive and an active side that talk
over RDMA CM) would give each child its own copy of the world, and the two copies never
meet. So `nicsim exec` runs fork-context multiprocessing children as threads of the process
that holds the world (nicsim.exec.threads), and this module schedules them: a conservative
discrete-event scheduler whose "processes" are the program's flows of control.

- Exactly one flow runs at a time (it holds the world); the others wait, and each says what
  for:
  - the world (`Host.spend`, `Host.poll_wait`, through `host.cpu`): a wake-up time of its own
    (its CPU is busy until then, or an empty poll's cap) and, for a poll, a range of host
    memory a device write to which wakes it sooner (MONITOR/MWAIT);
  - another flow (`wait_until`: a Barrier, a Queue, an Event, a join): a condition on the
    program's own state, with an optional timeout in simulated seconds;
  - anything another flow does (`wait_for_others`: a wait on a world that is idle, where only
    another flow can start something).
- When the running flow waits, the next one runs: first the flows that are ready (their
  condition holds: in the order they became ready, conditions checked in creation order), and
  only when none is, the world runs, to the earliest wake-up time of a waiting flow or the
  first device write one watches, whichever comes first. Simulated time therefore moves only
  as the world's events and the flows' own wake-up times say: a flow that polls an empty CQ
  spends its poll's time on its own clock and lets the world run only as far as every other
  flow allows.
- A flow that is ready runs before time passes: a side released by a barrier acts at the time
  of its release.

Nothing here reads the wall clock: the order of everything is a function of the program and
the seed, so a run is bit-for-bit repeatable. With one flow of control (the usual case) the
scheduler is not installed and every call here is a no-op: a sequential program's world runs
exactly as it always did. A flow that is alone in the scheduler runs the world with the very
calls `Host.spend` and `Host.poll_wait` make (the same times, the same order of events).

When nothing can ever happen (every flow waits on another or on an idle world, and no flow
has a wake-up time), a flow's wait ends anyway, in creation order, so a program gets an error
instead of hanging: a flow waiting on an idle world is first asked to look again, then its
wait fails (ETIMEDOUT at the caller); otherwise the flow that began waiting on another flow
last finds its condition false (a Barrier breaks, a get from an empty Queue raises Empty, an
Event wait returns False, a join returns with the child alive).
"""

from __future__ import annotations

import atexit
import itertools
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from nicsim.host.host import poll_alone
from nicsim.sim import WakeFlag

INF = float("inf")

# What a waiting flow waits for.
_WORLD, _COND, _OTHERS = "world", "cond", "others"


class Terminated(SystemExit):
    """Raised in a flow that Process.terminate() asked to stop, when it next runs (a thread
    cannot be killed from outside)."""


class Flow:
    """One flow of control: the thread of the program's main line or of a forked child."""

    def __init__(self, seq: int, name: str) -> None:
        self.seq = seq  # creation order: the tie-break of every choice
        self.name = name
        self.go = threading.Semaphore(0)  # released when the flow is given the world
        self.done = False
        self.stop = False  # terminate() asked it to stop
        # The current wait (valid while waiting)
        self.kind: str | None = None
        self.deadline = INF  # simulated time it wakes at
        self.env: Any = None  # the world whose clock `deadline` is on
        self.mem: Any = None  # PhysMem it watches (a poll), or None
        self.entry: tuple | None = None
        self.woke = False  # a device write it watched landed
        self.start = 0.0
        self.cost = 0.0
        self.pred: Callable[[], bool] | None = None
        self.result = False
        self.since = 0  # when it began waiting (the scheduler's count of waits)

    def __repr__(self) -> str:
        return f"<Flow {self.seq} {self.name} {self.kind}>"


class _HostCpu:
    """What `Host.cpu` is while several flows run: CPU time and polls of the flow that makes
    them (Host.spend / Host.poll_wait route here)."""

    def __init__(self, s: Scheduler, env: Any) -> None:
        self.s, self.env = s, env

    def sleep(self, ns: float) -> None:
        """CPU time between waits: the flow keeps the world (as Host.spend alone), so the
        simulated kernel's code, which has no locks, never interleaves with another flow's."""
        env = self.env
        env.advance(env.now + ns)

    def wait_write(self, mem: Any, lo: int, hi: int, cost: float, cap_ns: float) -> bool:
        me = self.s.me()
        env = self.env
        if me is None:  # as Host.poll_wait alone
            return poll_alone(env, mem, lo, hi, cost, cap_ns)
        return self.s.world_wait(me, env, env.now + cap_ns, mem, lo, hi, cost)


class Scheduler:
    """The flows of a program and the one that holds the world (see the module docstring)."""

    def __init__(self) -> None:
        self._seq = itertools.count()
        self._local = threading.local()
        root = Flow(next(self._seq), threading.current_thread().name)
        self._local.flow = root
        self.flows: list[Flow] = [root]  # live flows, in creation order
        self.current: Flow = root
        self.ready: deque[Flow] = deque()
        self.env: Any = None  # the world's clock, once a flow has used it
        self._flag = WakeFlag()
        self._looked: set[int] = set()  # flows asked to look again since the last progress
        self._hosts: list[Any] = []  # hosts whose CPU time goes through here
        self._waits = itertools.count()
        self.switches = 0  # times the world went to another flow

    # -- flows -------------------------------------------------------------------------------

    def me(self) -> Flow | None:
        f = getattr(self._local, "flow", None)
        return f if f is not None and not f.done and f in self.flows else None

    def spawn(self, name: str) -> Flow:
        """A new flow (its thread not started yet): it runs when the current one waits."""
        f = Flow(next(self._seq), name)
        self.flows.append(f)
        self.ready.append(f)
        self.engage()
        return f

    def enter(self, f: Flow) -> None:
        """In the new flow's thread: wait until it is given the world."""
        self._local.flow = f
        f.go.acquire()
        self._resumed(f)

    def leave(self, f: Flow) -> None:
        """In a flow's thread, as it ends (it holds the world): hand the world on."""
        f.done = True
        self.flows.remove(f)
        self._turn_ended(f, idle=False)
        if len(self.flows) == 1:
            uninstall(self)
        self._dispatch(f)

    def terminate(self, f: Flow) -> None:
        """Ask `f` to stop: it raises Terminated as soon as it runs (now, if it waits)."""
        if f.done:
            return
        f.stop = True
        if f.kind is not None and f not in self.ready:
            self._wake(f, False)

    # -- waits -------------------------------------------------------------------------------

    def world_wait(self, me: Flow, env: Any, deadline: float, mem: Any = None, lo: int = 0,
                   hi: int = 0, cost: float = 0.0) -> bool:
        """`me` waits on the world until `deadline`, or (with `mem`) until a device write to
        [lo, hi) lands, then at least until `cost` after now. Returns whether a write woke it."""
        self.env = env
        me.kind, me.deadline, me.env, me.woke = _WORLD, deadline, env, False
        me.start, me.cost = env.now, cost
        if mem is not None:
            me.mem = mem
            me.entry = mem.watch(lo, hi, lambda: self._fired(me))
        self._block(me, idle=False)
        return me.result

    def cond_wait(self, me: Flow, pred: Callable[[], bool], timeout_s: float | None) -> bool:
        """`me` waits until `pred()` (made true by another flow), at most `timeout_s` seconds
        of simulated time. Returns pred()."""
        env = self.world()
        me.kind, me.pred, me.env = _COND, pred, env
        me.deadline = INF if timeout_s is None or env is None else \
            env.now + max(timeout_s, 0.0) * 1e9
        self._block(me, idle=False)
        return pred()

    def others_wait(self, me: Flow, env: Any = None, deadline: float = INF) -> bool:
        """`me` found the world idle: wait until another flow has acted, or until `deadline`
        (a timer of its own). False when none can act (after `me` was asked to look again
        once) or at the deadline."""
        me.kind, me.env, me.deadline = _OTHERS, env, deadline
        self._block(me, idle=True)
        return me.result

    def _fired(self, f: Flow) -> None:
        f.woke = True
        self._flag.woke = True

    # -- handing the world over ---------------------------------------------------------------

    def _block(self, me: Flow, idle: bool) -> None:
        me.since = next(self._waits)
        self._turn_ended(me, idle)
        try:
            self._dispatch(me)
        except BaseException:
            if self.current is me and me.kind is not None:  # the world raised: me runs on
                self._clear(me)
                if me in self.ready:
                    self.ready.remove(me)
            raise

    def _turn_ended(self, me: Flow, idle: bool) -> None:
        """`me` stops running. Unless it only found an idle world, what it did may be what
        the flows waiting on others wait for: they look again."""
        if idle:
            return
        self._looked.clear()
        for f in self.flows:
            if f is not me and f.kind == _OTHERS and f not in self.ready:
                self._wake(f, True)

    def _dispatch(self, me: Flow) -> None:
        """Run the world until some flow can run, and give it the world; `me` (waiting, or
        done) blocks until it is given the world again."""
        self.engage()
        while True:
            nxt = self._pick()
            if nxt is not None:
                break
            if self._step_world():
                continue
            nxt = self._stalled()
            if nxt is None:
                return  # no flow left to run
            break
        self.current = nxt
        if nxt is me:
            self._clear(me)
            self._resumed(me)
            return
        self.switches += 1
        waits = not me.done
        nxt.go.release()
        if waits:
            me.go.acquire()
            self._clear(me)
            self._resumed(me)

    def _pick(self) -> Flow | None:
        for f in self.flows:
            if f.kind == _COND and f not in self.ready and f.pred is not None and f.pred():
                self._wake(f, True)
        return self.ready.popleft() if self.ready else None

    def _wake(self, f: Flow, result: bool) -> None:
        if f.mem is not None:
            f.mem.unwatch(f.entry)
            f.mem = None
        f.result = result
        self.ready.append(f)

    def _step_world(self) -> bool:
        """Run the world to the next wake-up of a waiting flow (the earliest of their times,
        or the first device write one watches). False if no flow has one."""
        waiting = [f for f in self.flows if f.kind is not None and f not in self.ready and (
            f.kind == _WORLD or f.deadline < INF)]
        if not waiting:
            return False
        env = next((f.env for f in waiting if f.env is not None), None)
        if env is None:
            return False
        t = min(f.deadline for f in waiting)
        watchers = [f for f in waiting if f.mem is not None]
        if watchers:
            fired = [f for f in watchers if f.woke]
            if not fired:
                self._flag.woke = False
                env.run_until_woken(t, self._flag)  # (what Host.poll_wait does)
                fired = [f for f in watchers if f.woke]
            if fired:  # each polls on for at least its poll's cost
                for f in fired:
                    f.mem.unwatch(f.entry)
                    f.mem = None
                    f.deadline = max(f.start + f.cost, env.now)
                return True
            if t == INF:
                return False
        due = [f for f in waiting if f.deadline <= t]
        for f in due:
            if f.mem is not None:
                f.mem.unwatch(f.entry)
                f.mem = None
        env.advance(t)
        for f in due:
            self._wake(f, f.woke if f.kind == _WORLD else False)
        return True

    def _stalled(self) -> Flow | None:
        """Nothing can happen: end a wait (see the module docstring), or None if no flow
        waits."""
        others = [f for f in self.flows if f.kind == _OTHERS]
        if others:
            fresh = [f for f in others if f.seq not in self._looked]
            f = fresh[0] if fresh else others[0]
            self._looked.add(f.seq)
            self._wake(f, bool(fresh))
            return self.ready.popleft()
        conds = [f for f in self.flows if f.kind == _COND]
        if conds:  # the latest to wait (a main line joining its children comes last)
            self._wake(max(conds, key=lambda f: f.since), False)
            return self.ready.popleft()
        return None

    def _clear(self, f: Flow) -> None:
        if f.mem is not None:
            f.mem.unwatch(f.entry)
            f.mem = None
        f.kind, f.pred, f.deadline, f.entry = None, None, INF, None

    def _resumed(self, f: Flow) -> None:
        if f.stop:
            f.stop = False
            raise Terminated(-15)

    # -- the world ----------------------------------------------------------------------------

    def world(self) -> Any:
        """The world's clock (a Sim), if the program has one yet."""
        if self.env is None:
            self.engage()
        return self.env

    def engage(self) -> None:
        """Route the CPU time of the program's hosts through the scheduler."""
        if _sched is not self:
            return
        for h in program_hosts():
            if h.cpu is None:
                h.cpu = _HostCpu(self, h.env)
                self._hosts.append(h)
            if self.env is None:
                self.env = h.env

    def disengage(self) -> None:
        for h in self._hosts:
            if isinstance(h.cpu, _HostCpu) and h.cpu.s is self:
                h.cpu = None
        self._hosts.clear()


def _no_hosts() -> list[Any]:
    return []


# The hosts the program's devices live on: set by nicsim.driver.user.process, which knows the
# program (this module sits below user space and cannot ask it).
program_hosts: Callable[[], list[Any]] = _no_hosts
_sched: Scheduler | None = None
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


def install() -> Scheduler:
    """Start scheduling flows (the calling thread is the first, and holds the world)."""
    global _sched
    if _sched is None:
        _sched = Scheduler()
    return _sched


def uninstall(s: Scheduler) -> None:
    """One flow is left: it runs alone again, as a sequential program (a flow still waiting in
    `s` finishes that wait there)."""
    global _sched
    s.disengage()
    if _sched is s:
        _sched = None


def scheduler() -> Scheduler | None:
    return _sched


def idle() -> bool:
    """(Kept for callers: a wait on the world no longer needs to let the others run first, as
    the wait itself does. Always False: go on and wait.)"""
    return False


def others() -> bool:
    """Whether another flow of control may still act on the world (so a wait on an idle world
    may yet end)."""
    return _sched is not None and len(_sched.flows) > 1


def since() -> float:
    """(Kept for callers of wait_for_others; nothing here reads the wall clock.)"""
    return 0.0


def wait_for_others(started: float = 0.0) -> bool:
    """The world is idle and the caller's wait found nothing. With other flows that may still
    act, wait until one has acted and return True, so the caller looks again; False when
    there is no other flow, or when no flow can act any more (the caller was asked to look
    again once since the last thing any flow did)."""
    s = _sched
    me = s.me() if s is not None else None
    if s is None or me is None or len(s.flows) <= 1:
        return False
    return s.others_wait(me)


def wait_until(pred: Callable[[], bool], timeout: float | None = None) -> bool:
    """Block the calling flow until `pred()` holds (another flow makes it true), at most
    `timeout` seconds of simulated time; returns pred(). Without other flows, or when no flow
    can make it true any more, returns pred() at once."""
    if pred():
        return True
    s = _sched
    me = s.me() if s is not None else None
    if s is None or me is None:
        return False
    return s.cond_wait(me, pred, timeout)


def advance_to(host: Any, t: float) -> None:
    """The caller found the world idle and waits for a timer of its own at `t` (a CM
    timeout): `host.env.advance(t)` for a sequential program. With several flows, it waits
    until `t` or until another flow has acted (which may have given it what it waits for: a
    MAD another flow took off QP1), whichever is first; the caller looks again either way."""
    cpu = host.cpu
    if isinstance(cpu, _HostCpu):
        me = cpu.s.me()
        if me is not None:
            cpu.s.others_wait(me, host.env, t)
            return
    host.env.advance(t)
