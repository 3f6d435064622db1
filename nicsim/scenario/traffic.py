"""The traffic of a scenario as sources of work requests.

Each section of a scenario becomes sources that hand the runner WRs when they are due:

- `ops`: one closed loop over every op line in order, `depth` WRs outstanding;
- `streams`: perftest-like closed loops, one per QP, `depth` outstanding each, a completion
  every `signal_every` WRs and always on the last (so the last WR's fate is known);
- `patterns`: rounds of messages between hosts, one round after the other (or every
  `every_us`);
- `flows`: open-loop Poisson arrivals of CDF-sized messages.

A WR's start is when it became due (the arrival of a flow, the start of a pattern round) or,
for a closed loop, when it is posted: FCT and latency count from there, so time a WR spends
waiting for a free QP slot is in its completion time, as it would be for an application.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from nicsim.scenario.schema import OpKind, OpSpec, PatternKind, PatternSpec, StreamSpec
from nicsim.workloads import patterns
from nicsim.workloads.cdf import Cdf
from nicsim.workloads.flows import poisson_flows

NOT_POSTED = -3
UNKNOWN = -2  # unsignaled, and no later completion on its QP said how it ended
OUTSTANDING = -1  # posted, not completed when the run stopped
INF = math.inf


@dataclass(frozen=True, slots=True)
class Msg:
    """What the WRs of one line, stream or flow source do (all but the size)."""

    op: OpKind
    sges: int = 1
    recv_sges: int = 1
    local_offset: int = 0
    remote_offset: int = 0
    imm: int = 0
    compare: int = 0
    swap_add: int = 1
    initial: int = 0
    inline: bool = False

    @staticmethod
    def of_op(o: OpSpec) -> Msg:
        return Msg(o.op, o.sges, o.recv_sges, o.local_offset, o.remote_offset, o.imm,
                   o.compare, o.swap_add, o.initial)


@dataclass(slots=True, eq=False)
class Wr:
    """One work request of the run, from due to checked."""

    index: int  # the wr_id
    group: int  # which line/stream/pattern/flows entry (RunResult.groups)
    msg: Msg
    nbytes: int
    src: str
    dst: str
    signaled: bool
    source: Source
    qp: int | None = None  # QP of the pair's pool; None: the least loaded
    start_ns: float | None = None  # None: when posted
    post_ns: float = 0.0
    done_ns: float = 0.0
    status: int = NOT_POSTED
    conn: object = None  # the Conn it was posted on
    local: int = -1  # offset in the source host's arena
    remote: int = -1  # offset in the destination host's arena
    data_off: int = 0
    recv_status: int | None = None
    recv_len: int = 0
    recv_imm: int = 0
    integrity: str = ""
    checks: int = 0  # times its check was put off waiting for the receive completion
    seq: int = 0  # order of posting on its QP

    @property
    def latency_ns(self) -> float | None:
        """From due to completion; None when it did not complete (or nobody knows when)."""
        if self.status < 0:
            return None
        return self.done_ns - (self.start_ns if self.start_ns is not None else self.post_ns)

    @property
    def consumes_recv(self) -> bool:
        return self.msg.op in (OpKind.SEND, OpKind.SEND_IMM, OpKind.WRITE_IMM)


class Source:
    """Hands out WRs when they are due; told when each of its WRs completes."""

    finished = False

    def due(self) -> float:
        """The simulated time this source next has something to hand out without being told
        of a completion first (INF: nothing until then)."""
        return INF

    def take(self, now: float) -> list[Wr]:
        raise NotImplementedError

    def completed(self, w: Wr) -> None:
        """A WR of this source completed (with any status, or was given up at the end)."""

    def total(self) -> int | None:
        """How many WRs it will hand out, if known."""
        return None

    def end_ns(self) -> float | None:
        """When it stops handing out WRs, if it is bound by time."""
        return None


@dataclass(eq=False)
class WrIds:
    """WR indices, shared by the sources of a run."""

    n: int = 0

    def next(self) -> int:
        self.n += 1
        return self.n - 1


class OpsSource(Source):
    """Every op line in order, each `repeat` times, `depth` WRs outstanding."""

    def __init__(self, ops: list[OpSpec], groups: list[int], depth: int, hosts: list[str],
                 ids: WrIds) -> None:
        self.depth = depth
        self.ids = ids
        self.outstanding = 0
        self._n = sum(o.repeat for o in ops)
        self._it = self._gen(ops, groups, hosts)
        self._next: Wr | None = next(self._it, None)
        self.finished = self._next is None

    def _gen(self, ops: list[OpSpec], groups: list[int], hosts: list[str]) -> Iterator[Wr]:
        for o, g in zip(ops, groups, strict=True):
            msg = Msg.of_op(o)
            src, dst = o.src or hosts[0], o.dst or hosts[1]
            for _ in range(o.repeat):
                yield Wr(-1, g, msg, o.bytes, src, dst, o.signaled, self, o.qp)

    def due(self) -> float:
        return 0.0 if self._next is not None and self.outstanding < self.depth else INF

    def take(self, now: float) -> list[Wr]:
        out = []
        while self._next is not None and self.outstanding < self.depth:
            w = self._next
            w.index = self.ids.next()
            out.append(w)
            self.outstanding += 1
            self._next = next(self._it, None)
        self.finished = self._next is None
        return out

    def completed(self, w: Wr) -> None:
        self.outstanding -= 1

    def total(self) -> int:
        return self._n


@dataclass(eq=False)
class _Loop:
    k: int  # the QP of the pool
    posted: int = 0
    done: int = 0
    last_signaled: bool = True
    finished: bool = False


class StreamSource(Source):
    def __init__(self, s: StreamSpec, group: int, hosts: list[str], ids: WrIds) -> None:
        self.s = s
        self.group = group
        self.ids = ids
        self.src, self.dst = s.src or hosts[0], s.dst or hosts[1]
        self.msg = Msg(s.op, inline=s.inline)
        self.start = s.start_us * 1000.0
        self.end = self.start + s.duration_us * 1000.0 if s.duration_us is not None else None
        self.loops = [_Loop(k) for k in range(s.qps)]

    def due(self) -> float:
        # A loop with room posts (at the end of a duration, its last, signaled WR); a full
        # one waits for a completion.
        if self.finished or not any(lp.posted - lp.done < self.s.depth and not lp.finished
                                    for lp in self.loops):
            return INF
        return self.start

    def take(self, now: float) -> list[Wr]:
        out: list[Wr] = []
        if now < self.start:
            return out
        s = self.s
        for lp in self.loops:
            while not lp.finished and lp.posted - lp.done < s.depth:
                if self.end is not None:
                    last = now >= self.end
                    if last and lp.last_signaled and lp.posted:
                        lp.finished = True  # its last WR was signaled: nothing more to say
                        break
                else:
                    last = lp.posted + 1 == s.count
                signaled = last or (lp.posted + 1) % s.signal_every == 0
                out.append(Wr(self.ids.next(), self.group, self.msg, s.bytes, self.src,
                              self.dst, signaled, self, lp.k))
                lp.posted += 1
                lp.last_signaled = signaled
                if last:
                    lp.finished = True
        self.finished = all(lp.finished for lp in self.loops)
        return out

    def completed(self, w: Wr) -> None:
        self.loops[w.qp or 0].done += 1

    def total(self) -> int | None:
        return self.s.count * self.s.qps if self.s.count is not None else None

    def end_ns(self) -> float | None:
        return self.end


class PatternSource(Source):
    def __init__(self, p: PatternSpec, group: int, hosts: list[str], rng: np.random.Generator,
                 ids: WrIds) -> None:
        self.p = p
        self.group = group
        self.hosts = p.hosts or hosts
        self.rng = rng
        self.ids = ids
        self.msg = Msg(p.op)
        self.dst = p.dst or self.hosts[0]
        self.start = p.start_us * 1000.0
        self.round = 0
        self.next_at: float | None = self.start  # None: when the current round completes
        self.open = 0  # WRs of the current round not completed

    def pairs(self) -> list[tuple[str, str]]:
        p = self.p
        if p.kind is PatternKind.INCAST:
            return patterns.incast(self.hosts, self.dst, p.fan_in, self.rng)
        if p.kind is PatternKind.PERMUTATION:
            return patterns.permutation(self.hosts, self.rng)
        return patterns.all_to_all(self.hosts)

    def due(self) -> float:
        if self.finished:
            return INF
        return self.next_at if self.next_at is not None else INF

    def take(self, now: float) -> list[Wr]:
        out: list[Wr] = []
        p = self.p
        while self.next_at is not None and self.next_at <= now and self.round < p.rounds:
            t = self.next_at
            pairs = self.pairs()
            for s, d in pairs:
                out.append(Wr(self.ids.next(), self.group, self.msg, p.bytes, s, d, True, self,
                              None, start_ns=t))
            self.open += len(pairs)
            self.round += 1
            self.next_at = t + p.every_us * 1000.0 if p.every_us is not None else None
        if self.round >= p.rounds:
            self.finished = True
        return out

    def completed(self, w: Wr) -> None:
        self.open -= 1
        if self.open == 0 and self.p.every_us is None and self.round < self.p.rounds:
            self.next_at = w.done_ns  # the next round starts when this one is done

    def per_round(self) -> int:
        p, n = self.p, len(self.hosts)
        if p.kind is PatternKind.INCAST:
            k = sum(1 for h in self.hosts if h != self.dst)
            return min(k, p.fan_in) if p.fan_in else k
        return n if p.kind is PatternKind.PERMUTATION else n * (n - 1)

    def total(self) -> int:
        return self.p.rounds * self.per_round()


@dataclass(eq=False)
class FlowSource(Source):
    group: int
    cdf: Cdf
    hosts: list[str]
    load: float
    rate_gbps: float
    op: OpKind
    rng: np.random.Generator
    ids: WrIds
    start: float
    dst: str | None = None
    count: int | None = None
    duration_ns: float | None = None
    # qp_per_flow: each pair's first QP of this entry's own (Plan.flow_base); None: a pool's
    qp_base: dict[tuple[str, str], int] | None = None
    _it: Iterator = field(init=False)
    _next: object = field(init=False)

    def __post_init__(self) -> None:
        self.msg = Msg(self.op)
        self._taken: dict[tuple[str, str], int] = {}  # flows so far per pair (qp_per_flow)
        self._it = poisson_flows(self.cdf, self.hosts, self.load, self.rate_gbps, self.rng,
                                 self.dst, self.count, self.duration_ns)
        self._next = next(self._it, None)
        self.finished = self._next is None

    def due(self) -> float:
        return self.start + self._next.t_ns if self._next is not None else INF

    def take(self, now: float) -> list[Wr]:
        out = []
        while self._next is not None and self.start + self._next.t_ns <= now:
            f = self._next
            qp = None
            if self.qp_base is not None:
                k = self._taken.get((f.src, f.dst), 0)
                self._taken[(f.src, f.dst)] = k + 1
                qp = self.qp_base[(f.src, f.dst)] + k
            out.append(Wr(self.ids.next(), self.group, self.msg, f.size, f.src, f.dst, True,
                          self, qp, start_ns=self.start + f.t_ns))
            self._next = next(self._it, None)
        self.finished = self._next is None
        return out

    def total(self) -> int | None:
        return self.count

    def end_ns(self) -> float | None:
        return self.start + self.duration_ns if self.duration_ns is not None else None
