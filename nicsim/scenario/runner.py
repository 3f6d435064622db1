"""Run a scenario: its traffic between the hosts of its world, every byte checked.

The application side is an ordinary verbs program (driver.user.verbs), one process per host:
it registers memory, connects a pool of RC QPs for each host pair that has traffic, posts the
work requests of the scenario's sources as they become due, polls completions, and checks
that every byte each WR was meant to place is in destination memory (an oracle read of host
memory, no simulated time). A WR's buffers go back to the host's arena once it is checked,
so memory follows what is in flight, not the length of the run.

A run ends when its traffic is done, when the user's time limit (`stop.time_limit_us`) is
reached, or when nothing has progressed for `stop.stall_us` while work is outstanding (no
completion, no byte placed by any NIC); the result says which. The default stall limit is
longer than the transport needs to give up by itself (retry_cnt + 1 transport timeouts), so
a QP that is still retrying is never cut short.
"""

from __future__ import annotations

import socket
import struct
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, QPCap, RecvWR, SendWR
from nicsim.nic.requester import transport_timeout_ns
from nicsim.scenario import build
from nicsim.scenario.buffers import POOL, Arena, DataPool
from nicsim.scenario.collect import KEEP_WRS, Collector, FlowWriter
from nicsim.scenario.ideal import Ideal, IdealConfig
from nicsim.scenario.plan import (
    KERNEL_MEM,
    MAX_REGISTERED,
    SLOTS,
    Plan,
    cq_size,
    flow_rate_gbps,
    flow_rng,
    plan,
)
from nicsim.scenario.progress import Progress
from nicsim.scenario.schema import ATOMICS, OpKind, Scenario, ScenarioError
from nicsim.scenario.traffic import (
    OUTSTANDING,
    UNKNOWN,
    FlowSource,
    OpsSource,
    PatternSource,
    Source,
    StreamSource,
    Wr,
    WrIds,
)
from nicsim.trace.breakdown import Breakdown
from nicsim.trace.timeseries import Probe, Sampler
from nicsim.workloads.endpoint import Process, connect_qp, open_process, roce_v2_gid
from nicsim.workloads.wait import CqWatch, Waiter
from nicsim.world import World

__all__ = ["KEEP_WRS", "KERNEL_MEM", "MAX_REGISTERED", "SLOTS", "RunResult", "Runner"]

_MTU = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}
_WR_OP = {
    OpKind.WRITE: e.IBV_WR_RDMA_WRITE,
    OpKind.WRITE_IMM: e.IBV_WR_RDMA_WRITE_WITH_IMM,
    OpKind.READ: e.IBV_WR_RDMA_READ,
    OpKind.SEND: e.IBV_WR_SEND,
    OpKind.SEND_IMM: e.IBV_WR_SEND_WITH_IMM,
    OpKind.CMP_SWAP: e.IBV_WR_ATOMIC_CMP_AND_SWP,
    OpKind.FETCH_ADD: e.IBV_WR_ATOMIC_FETCH_AND_ADD,
}
SETTLE_NS = 10_000.0  # a completion, then this long for the peer's last writes to land
RECV_WAITS = 50  # times a check waits SETTLE_NS more for a receive completion
DONE, TIME_LIMIT, NO_PROGRESS = "done", "time limit", "no progress"


@dataclass(eq=False)
class Conn:
    """One RC connection of a host pair's pool: the requester's QP on src, its peer on dst."""

    src: Process
    dst: Process
    k: int
    qp: object
    peer: object
    sq_cap: int
    rq_cap: int
    outstanding: int = 0  # posted, not known to be complete
    unsignaled: deque[Wr] = field(default_factory=deque)
    rq_posted: int = 0  # receives posted on the peer, their completions not polled
    posted: int = 0
    bytes_done: int = 0

    @property
    def name(self) -> str:
        return f"{self.src.host}->{self.dst.host}#{self.k}"


@dataclass
class RunResult:
    scenario: Scenario
    groups: list  # GroupStats, one per ops line, stream, pattern and flows entry
    wrs: list[Wr]  # every WR, for runs of up to KEEP_WRS; [] beyond
    elapsed_ns: float
    counters: dict[str, dict[str, int]]
    pcap: str | None
    collector: Collector
    stop_reason: str = DONE
    stop_detail: str = ""
    faults: dict[str, int] = field(default_factory=dict)
    total_wrs: int = 0
    buffer_waits: int = 0
    qps: int = 0
    wall_s: float = 0.0
    events: int = 0
    out: Path | None = None
    files: list[str] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)  # what the time series sampled
    pcaps: list[str] = field(default_factory=list)  # the captures written (one per tap)
    switches: dict[str, dict[str, int]] = field(default_factory=dict)  # counters by switch
    breakdown: dict | None = None  # --breakdown: stages of the first host's WRs to the second

    @property
    def verified_bytes(self) -> int:
        return self.collector.verified_bytes

    @property
    def first_bad(self) -> Wr | None:
        return self.collector.first_bad

    @property
    def error_count(self) -> int:
        return self.collector.errors

    @property
    def error_wrs(self) -> list[Wr]:
        return self.collector.error_wrs

    @property
    def timed_out(self) -> bool:
        return self.stop_reason == TIME_LIMIT

    @property
    def ok(self) -> bool:
        c = self.collector
        return self.stop_reason == DONE and c.first_bad is None and not c.errors and \
            not c.outstanding and not c.unknown


class Runner:
    def __init__(self, sc: Scenario, pcap: str | None = None, out: Path | None = None,
                 progress: Progress | None = None, base: Path | None = None,
                 breakdown: bool = False,
                 world_factory: Callable[[Scenario, str | None, int], World] | None = None
                 ) -> None:
        self.sc = sc
        # what builds the world (build.build_world; co-simulation puts an RTL NIC in it)
        self.world_factory = world_factory or build.build_world
        self.breakdown = breakdown
        self.pcap = pcap
        self.out = out
        self.progress = progress
        self.base = base  # where relative paths in the scenario (CDF files) start
        self._plan: Plan | None = None
        ss = np.random.SeedSequence(sc.seed)
        self._data_rng, self._traffic_seq = (np.random.default_rng(s) for s in ss.spawn(2))

    def plan(self) -> Plan:
        """Check the scenario against its world and size everything (ScenarioError)."""
        if self._plan is None:
            self._plan = plan(self.sc, self.base)
        return self._plan

    def memory(self) -> int:
        """The simulated memory of each host (after checking that the traffic fits)."""
        return self.plan().mem_size

    # -- setup ------------------------------------------------------------------------------

    def _setup(self, world: World, pl: Plan) -> None:
        sc = self.sc
        q = sc.qp
        self.world = world
        self.env = world.env
        self.waiter = Waiter(world.env)
        used = sorted({h for pair in pl.pools for h in pair}, key=pl.hosts.index)
        self.procs: dict[str, Process] = {}
        self.arenas: dict[str, Arena] = {}
        self.watches: dict[str, tuple[CqWatch, CqWatch]] = {}
        for h in used:
            size = max(pl.arena[h], 4096)
            p = open_process(world, h, size, cq_size(sc, pl, h))
            self.procs[h] = p
            self.arenas[h] = Arena(size)
            self.watches[h] = (CqWatch(p.scq, self.waiter), CqWatch(p.rcq, None))
        cap = QPCap(q.max_send_wr, q.max_recv_wr, q.max_send_sge, q.max_recv_sge,
                    q.max_inline_data)
        self.pools: dict[tuple[str, str], list[Conn]] = {}
        self.shared = pl.shared  # of each pool, the QPs open to any traffic (Plan)
        self.recv_conn: dict[tuple[str, int], Conn] = {}
        for (s, d), n in pl.pools.items():
            conns = []
            for k in range(n):
                a, b = self.procs[s], self.procs[d]
                qa, qb = a.qp(cap), b.qp(cap)
                for x, y, py in ((qa, qb, b), (qb, qa, a)):
                    connect_qp(x, y.qp_num, roce_v2_gid(py.ctx)[1], _MTU[q.path_mtu],
                               timeout=q.timeout, retry_cnt=q.retry_cnt, rnr_retry=q.rnr_retry,
                               min_rnr_timer=q.min_rnr_timer, max_rd_atomic=q.max_rd_atomic,
                               traffic_class=q.dscp << 2)
                c = Conn(a, b, k, qa, qb, q.max_send_wr, q.max_recv_wr)
                conns.append(c)
                self.recv_conn[(d, qb.qp_num)] = c
            self.pools[(s, d)] = conns
        self.recv_pending = dict.fromkeys(self.procs, 0)
        self.recv_room = {h: p.rcq._p.size // 2 for h, p in self.procs.items()}
        self.data = DataPool(self._data_rng)
        self.ideal = Ideal(IdealConfig(q.path_mtu, build.nic_config(sc).pcie,
                                       build.nic_config(sc), build.cpu_costs(sc), q.max_send_sge,
                                       q.max_inline_data, q.max_recv_sge))
        self._ideal_cache: dict[tuple, float] = {}
        self._paths: dict[tuple[str, str], list] = {}

    def _sources(self, pl: Plan, t0: float) -> list[Source]:
        sc = self.sc
        ids = WrIds()
        seeds = iter(self._traffic_seq.bit_generator.seed_seq.spawn(  # type: ignore[union-attr]
            len(sc.patterns) + len(sc.flows)))
        out: list[Source] = []
        g = 0
        if sc.ops:
            out.append(OpsSource(sc.ops, list(range(len(sc.ops))), sc.depth, pl.hosts, ids))
            g = len(sc.ops)
        for s in sc.streams:
            out.append(StreamSource(s, g, pl.hosts, ids))
            g += 1
        for p in sc.patterns:
            out.append(PatternSource(p, g, pl.hosts, np.random.default_rng(next(seeds)), ids))
            g += 1
        for i, f in enumerate(sc.flows):
            hosts = f.hosts or pl.hosts
            seed = next(seeds)  # (drawn either way: the other entries' streams stay put)
            rng = flow_rng(sc.seed, i) if f.qp_per_flow else np.random.default_rng(seed)
            out.append(FlowSource(g, pl.cdfs[i], hosts, f.load, flow_rate_gbps(sc, hosts),
                                  f.op, rng, ids, f.start_us * 1000.0, f.dst, f.count,
                                  f.duration_us * 1000.0 if f.duration_us is not None
                                  else None, qp_base=pl.flow_base.get(i)))
            g += 1
        # Sources count time from the start of the traffic.
        for s in out:
            _shift(s, t0)
        return out

    def _probes(self, sampler: Sampler) -> None:
        conns = [c for cs in self.pools.values() for c in cs]
        # Goodput as the payload each connection's two QPs took in from the wire (WRITE and
        # SEND payload at the peer, READ responses at the requester), as it arrives: completions
        # come in bursts (a coalesced ACK completes many WRs at once) that no wire carries.
        # An RTL NIC (nicsim run --rtl) has no model QP to ask: its connections count what the
        # model end took in.
        nics = self.world.nics
        ends = [(c.name, [(nics[h], q) for h, q in ((c.src.host, c.qp.qp_num),  # type: ignore
                                                    (c.dst.host, c.peer.qp_num))  # type: ignore
                          if h in nics]) for c in conns]
        last: dict[str, int] = {}

        def taken_in() -> dict[str, int]:
            for name, sides in ends:
                qps = [n.qps.get(q) for n, q in sides]
                if None not in qps:  # (else its QPs are gone: it stays)
                    last[name] = sum(qp.payload_in for qp in qps)  # type: ignore[union-attr]
            return {name: last.get(name, 0) for name, _ in ends}

        sampler.register(Probe(
            "qp_goodput", "qp", "goodput_gbps", taken_in, "rate", 8e-9,
            "Goodput per QP (payload taken in from the wire)"))
        sampler.register(Probe(
            "port_throughput", "host", "tx_gbps",
            lambda: {h: n.port.wire_ns_done() * n.port.rate_gbps / 8 for h, n in nics.items()},
            "rate", 8e-9, "Transmit throughput per host (the wire's occupancy: frames with "
            "preamble, FCS and gap)"))

        def backlog() -> dict[str, float]:
            return {h: n.port.backlog_ns() * n.port.rate_gbps / 8 for h, n in nics.items()}

        sampler.register(Probe("port_backlog", "host", "backlog_bytes", backlog, "level", 1.0,
                               "NIC transmit backlog (bytes queued for the wire, with "
                               "preamble, FCS and gap)"))
        for p in getattr(self.world, "probes", []):
            sampler.register(p)

    # -- run --------------------------------------------------------------------------------

    def run(self) -> RunResult:
        sc = self.sc
        pl = self.plan()
        wall0 = time.perf_counter()
        world = self.world_factory(sc, self.pcap, pl.mem_size)
        self._setup(world, pl)
        try:
            tracer = self._tracer(world) if self.breakdown else None
        except ScenarioError:
            world.close()
            raise
        env = world.env
        self.t0 = t0 = env.now
        build.start_pfc_storms(sc, world, t0)
        self.sources = self._sources(pl, t0)
        known = [s.total() for s in self.sources]
        self.total_known = sum(x for x in known if x is not None) if all(
            x is not None for x in known) else None
        ends = [s.end_ns() for s in self.sources]
        limit = sc.stop.time_limit_us * 1000.0 if sc.stop.time_limit_us else None
        self.end_hint = (t0 + limit) if limit else (
            max(x for x in ends if x is not None) if any(x is not None for x in ends) else None)
        keep = self.total_known is None or self.total_known <= KEEP_WRS
        flows = FlowWriter(self.out / "flows.csv") if self.out is not None else None
        self.col = Collector(pl.groups, t0, flows, keep)
        self.sampler: Sampler | None = None
        if self.out is not None:
            self.sampler = Sampler(env, sc.sample_us * 1000.0, self.out / "timeseries")
            self._probes(self.sampler)
            self.sampler.start()
        self.outstanding: dict[int, Wr] = {}
        self.signaled_out = 0
        self.backlog: dict[tuple[str, str, int | None], deque[Wr]] = {}
        self.checks: deque[Wr] = deque()
        self.awaiting_recv: dict[int, Wr] = {}
        self.buffer_waits = 0
        self.completions = 0
        try:
            reason, detail = self._loop(limit)
            self.stop_ns = env.now
            self._finish()
        finally:
            if flows is not None:
                flows.close()
            if self.sampler is not None:
                self.sampler.close()
            if self.progress is not None:
                self.progress.close()
            for ws in self.watches.values():
                for w in ws:
                    w.close()
            world.close()
        # A run that ends its traffic ends at its last completion (no idle tail); one that
        # is stopped ends where it was stopped.
        end = self.last_ns if reason == DONE else self.stop_ns
        return RunResult(
            sc, self.col.groups, self.col.kept, end - t0,
            {n: nic.counters() for n, nic in world.nics.items()}, self.pcap, self.col, reason,
            detail, _faults(world), self.col.total, self.buffer_waits, pl.qps,
            time.perf_counter() - wall0, env.events_created(), self.out,
            probes=self.sampler.probes if self.sampler is not None else [],
            pcaps=[str(t.path) for t in world.taps],  # type: ignore[attr-defined]
            switches={n: sw.counters() for n, sw in world.switches.items()},
            breakdown=tracer.summary() if tracer is not None else None)

    def _tracer(self, world: World) -> Breakdown:
        """Stamps of every WR the first host sends to the second (nicsim.trace.breakdown);
        only a two-host scenario has one cable for it to tap."""
        hosts = list(world.hosts)
        if len(hosts) != 2 or world.switches:
            raise ScenarioError("--breakdown: needs the two-host topology (back_to_back); "
                                f"this world has {len(hosts)} hosts")
        a, b = hosts
        tracer = Breakdown(world, a, b)
        for c in self.pools.get((a, b), []):
            tracer.watch_qp(c.qp._p)
        if a in self.procs:
            tracer.watch_cq(self.procs[a].scq._p)
        return tracer

    def _stall_ns(self) -> float:
        sc = self.sc
        if sc.stop.stall_us is not None:
            return sc.stop.stall_us * 1000.0
        tmo = transport_timeout_ns(sc.qp.timeout)
        # Past the point where the transport gives up by itself (retry_cnt + 1 timeouts).
        return max(1e6, 2 * (sc.qp.retry_cnt + 1) * tmo) if tmo else 1e9

    def _progress_mark(self) -> int:
        """Completions seen and bytes placed or delivered by any NIC: what moving forward is."""
        n = self.completions
        for nic in self.world.nics.values():
            c = nic.counters()
            n += c.get("responder.bytes_placed", 0) + c.get("completer.read_response_packets",
                                                           0) + c.get("cq.cqes", 0)
        return n

    def _loop(self, limit: float | None) -> tuple[str, str]:
        env = self.env
        t0 = self.t0
        stall = self._stall_ns()
        mark, last_progress = self._progress_mark(), env.now
        check_every = stall / 16
        next_check = env.now + check_every
        watches = [pair[0] for pair in self.watches.values()]
        sources = self.sources
        progress = self.progress
        spins = 0
        while True:
            now = env.now
            moved = False
            for s in sources:
                if not s.finished and s.due() <= now:
                    for w in s.take(now):
                        self.backlog.setdefault((w.src, w.dst, w.qp), deque()).append(w)
                        moved = True
            if self.backlog:
                moved |= self._post_backlog()
            moved |= self._poll_sends()
            if self.checks and self.checks[0].done_ns + SETTLE_NS <= env.now:
                self._run_checks()
            if progress is not None and progress.enabled:
                progress.update(env.now - t0, None if self.end_hint is None else
                                self.end_hint - t0, env.events_created(), self.col.total,
                                self.total_known)
            if not self.signaled_out and not self.backlog and all(s.finished for s in sources):
                if not self.checks:
                    return DONE, ""
            elif not self.outstanding and not self.backlog:
                last_progress = env.now  # nothing in flight: waiting for arrivals is no stall
            if limit is not None and env.now - t0 >= limit:
                return TIME_LIMIT, f"stop.time_limit_us {self.sc.stop.time_limit_us:g} reached"
            if env.now >= next_check:
                m = self._progress_mark()
                if m != mark:
                    mark, last_progress = m, env.now
                elif env.now - last_progress >= stall:
                    return NO_PROGRESS, (f"nothing progressed for {stall / 1000:g} us with "
                                         f"{len(self.outstanding)} WRs outstanding")
                next_check = env.now + check_every
            if moved:
                continue
            deadline = min(next_check, last_progress + stall)
            for s in sources:
                if not s.finished:
                    deadline = min(deadline, s.due())
            if self.checks:
                deadline = min(deadline, self.checks[0].done_ns + SETTLE_NS)
            if limit is not None:
                deadline = min(deadline, t0 + limit)
            self.waiter.woke = False
            if any(w.ready() for w in watches):
                continue
            if deadline <= env.now:
                # Something claims to be due now yet nothing moved: a bug, not a reason to
                # spin forever.
                spins += 1
                if spins > 1000:
                    raise RuntimeError(f"runner stuck at {env.now} ns: nothing moves")
            else:
                spins = 0
            self.waiter.wait(max(deadline, env.now))

    # -- posting ----------------------------------------------------------------------------

    def _post_backlog(self) -> bool:
        moved = False
        for key in list(self.backlog):
            q = self.backlog[key]
            while q and self._post(q[0]):
                q.popleft()
                moved = True
            if not q:
                del self.backlog[key]
        return moved

    def _post(self, w: Wr) -> bool:
        """Post `w` if its QP has room and its buffers can be had; False to try later."""
        conns = self.pools[(w.src, w.dst)]
        c = conns[w.qp] if w.qp is not None else \
            min(conns[:self.shared[(w.src, w.dst)]], key=lambda x: x.outstanding)
        if c.outstanding >= c.sq_cap:
            return False
        recv = w.consumes_recv
        if recv and c.rq_posted >= c.rq_cap:
            self._poll_recv(w.dst)
            if c.rq_posted >= c.rq_cap:
                return False
        m = w.msg
        n = 8 if m.op in ATOMICS else w.nbytes
        la, ra = self.arenas[w.src], self.arenas[w.dst]
        lo = la.alloc(m.local_offset + n)
        ro = ra.alloc(m.remote_offset + n) if lo is not None else None
        if ro is None:
            if lo is not None:
                la.release(lo, m.local_offset + n)
            self.buffer_waits += 1
            self._settle_for_buffers()
            return False
        w.local, w.remote, w.conn = lo + m.local_offset, ro + m.remote_offset, c
        a, b = c.src, c.dst
        self._prepare(w, a, b)
        if recv:
            sg = [] if m.op is OpKind.WRITE_IMM else [
                SGE(b.mr.buf + w.remote + off, k, b.mr.lkey)
                for off, k in _pieces(w.nbytes, m.recv_sges)]
            c.peer.post_recv(RecvWR(wr_id=w.index, num_sge=len(sg), sg=sg))  # type: ignore
            c.rq_posted += 1
            self.recv_pending[w.dst] += 1
            self.awaiting_recv[w.index] = w
        sg = [SGE(a.mr.buf + w.local + off, k, a.mr.lkey) for off, k in _pieces(n, m.sges)]
        flags = e.IBV_SEND_SIGNALED if w.signaled else 0
        if m.inline:
            flags |= e.IBV_SEND_INLINE
        # The scenario's imm is the ImmDt's value on the wire: ibv_send_wr holds it as htonl.
        wr = SendWR(wr_id=w.index, opcode=_WR_OP[m.op], num_sge=len(sg), sg=sg,
                    imm_data=socket.htonl(m.imm), send_flags=flags)
        if m.op in ATOMICS:
            wr.set_wr_atomic(b.mr.rkey, b.mr.buf + w.remote, m.compare if m.op is
                             OpKind.CMP_SWAP else m.swap_add, m.swap_add)
        else:
            wr.set_wr_rdma(b.mr.rkey, b.mr.buf + w.remote)
        w.post_ns = self.env.now
        if w.start_ns is None:
            w.start_ns = w.post_ns
        w.seq = c.posted
        c.posted += 1
        c.qp.post_send(wr)  # type: ignore[attr-defined]
        w.status = OUTSTANDING
        self.outstanding[w.index] = w
        c.outstanding += 1
        if w.signaled:
            self.signaled_out += 1
        else:
            c.unsignaled.append(w)
        return True

    def _settle_for_buffers(self) -> None:
        """No buffer free: checks waiting to run free them (their settle time permitting)."""
        if self.checks and self.checks[0].done_ns + SETTLE_NS <= self.env.now:
            self._run_checks()

    def _prepare(self, w: Wr, a: Process, b: Process) -> None:
        """Put the WR's source data (or the atomic's initial value) in place, as an observer
        at no simulated CPU cost: it is the test, not the program."""
        m = w.msg
        if m.op in ATOMICS:
            b.ctx.aspace.write(b.mr.buf + w.remote, struct.pack("<Q", m.initial))
            return
        w.data_off = int(self._data_rng.integers(0, POOL))
        data = self.data.data(w.data_off, w.nbytes)
        if m.op is OpKind.READ:
            b.ctx.aspace.write(b.mr.buf + w.remote, data)
        else:
            a.ctx.aspace.write(a.mr.buf + w.local, data)

    # -- completions ------------------------------------------------------------------------

    def _poll_sends(self) -> bool:
        got = False
        for h, (sw, rw) in self.watches.items():
            if sw.ready():
                _, wcs = self.procs[h].scq.poll(1024)
                for wc in wcs:
                    self._send_done(wc.wr_id, wc.status)
                got = True
            # Receive completions are polled when a check needs one, or before the CQ could
            # fill (polling costs the host CPU time: no more often than that).
            if self.recv_pending[h] > self.recv_room[h] and rw.ready():
                self._poll_recv(h)
        return got

    def _poll_recv(self, h: str) -> None:
        sw, rw = self.watches[h]
        p = self.procs[h]
        while rw.ready():
            _, wcs = p.rcq.poll(1024)
            for wc in wcs:
                c = self.recv_conn.get((h, wc.qp_num))
                if c is not None:
                    c.rq_posted -= 1
                    self.recv_pending[h] -= 1
                w = self.awaiting_recv.pop(wc.wr_id, None)
                if w is not None:
                    w.recv_status, w.recv_len = wc.status, wc.byte_len
                    w.recv_imm = socket.ntohl(wc.imm_data)  # (a __be32, as it came)

    def _send_done(self, wr_id: int, status: int) -> None:
        w = self.outstanding.get(wr_id)
        if w is None:
            return
        c: Conn = w.conn  # type: ignore[assignment]
        # Completions come in order: the unsignaled WRs posted before this one on its QP are
        # complete, and succeeded (a failed one would have completed with its own error).
        while c.unsignaled and c.unsignaled[0].seq < w.seq:
            self._complete(c.unsignaled.popleft(), 0)
        if c.unsignaled and c.unsignaled[0] is w:
            c.unsignaled.popleft()
        self._complete(w, status)

    def _complete(self, w: Wr, status: int) -> None:
        del self.outstanding[w.index]
        if w.signaled:
            self.signaled_out -= 1
        w.status = status
        w.done_ns = self.env.now
        c: Conn = w.conn  # type: ignore[assignment]
        c.outstanding -= 1
        if status == 0 and w.msg.op not in ATOMICS:
            c.bytes_done += w.nbytes
        self.completions += 1
        self.last_ns = w.done_ns
        w.source.completed(w)
        self.checks.append(w)

    # -- checks -----------------------------------------------------------------------------

    def _run_checks(self) -> None:
        now = self.env.now
        q = self.checks
        while q and q[0].done_ns + SETTLE_NS <= now:
            w = q[0]
            if w.consumes_recv and w.status == 0 and w.index in self.awaiting_recv:
                self._poll_recv(w.dst)
                if w.index in self.awaiting_recv and w.checks < RECV_WAITS:
                    w.checks += 1
                    w.done_ns += SETTLE_NS  # look again later (the order of q is kept:
                    q.rotate(-1)  # it goes behind the others)
                    if q[0] is w:
                        break
                    continue
            q.popleft()
            self._check(w)

    def _check(self, w: Wr) -> None:
        """Compare destination memory with what the WR was meant to place there (an oracle
        read: no simulated time); give its buffers back; account for it."""
        m = w.msg
        c: Conn | None = w.conn  # type: ignore[assignment]
        if w.status != 0:
            w.integrity = {OUTSTANDING: "not completed", UNKNOWN: "status unknown"}.get(
                w.status, "error completion: nothing to check")
        elif c is not None:
            a, b = c.src, c.dst
            ra, rb = a.ctx.aspace.read, b.ctx.aspace.read
            if m.op in ATOMICS:
                got_old = struct.unpack("<Q", ra(a.mr.buf + w.local, 8))[0]
                got_new = struct.unpack("<Q", rb(b.mr.buf + w.remote, 8))[0]
                if m.op is OpKind.FETCH_ADD:
                    want_new = (m.initial + m.swap_add) & (2**64 - 1)
                else:
                    want_new = m.swap_add if m.initial == m.compare else m.initial
                ok = got_old == m.initial and got_new == want_new
                w.integrity = "ok" if ok else (f"atomic: returned {got_old} (want {m.initial}),"
                                               f" remote {got_new} (want {want_new})")
                n = 16
            else:
                n = w.nbytes
                dst = ra(a.mr.buf + w.local, n) if m.op is OpKind.READ else \
                    rb(b.mr.buf + w.remote, n)
                want = self.data.data(w.data_off, n)
                ok = dst == want
                if ok and w.consumes_recv:
                    ok = w.recv_status == 0 and w.recv_len == n and (
                        m.op is OpKind.SEND or w.recv_imm == m.imm)
                    if not ok:
                        w.integrity = ("no receive completion" if w.recv_status is None else
                                       f"receive completion: status {w.recv_status}, byte_len "
                                       f"{w.recv_len}, imm {w.recv_imm}")
                if not ok and not w.integrity:
                    i = next(i for i in range(n) if dst[i] != want[i])
                    w.integrity = f"byte {i}: 0x{dst[i]:02x}, want 0x{want[i]:02x}"
                elif ok:
                    w.integrity = "ok"
            if w.integrity == "ok":
                self.col.verified_bytes += n
        self.awaiting_recv.pop(w.index, None)
        if c is not None and w.local >= 0:
            n = 8 if m.op in ATOMICS else w.nbytes
            self.arenas[w.src].release(w.local - m.local_offset, m.local_offset + n)
            self.arenas[w.dst].release(w.remote - m.remote_offset, m.remote_offset + n)
        self.col.add(w, self._ideal(w), c.qp.qp_num if c is not None else 0)  # type: ignore

    def _ideal(self, w: Wr) -> float:
        key = (w.msg.op, w.nbytes, w.src, w.dst, w.msg.inline)
        v = self._ideal_cache.get(key)
        if v is None:
            if len(self._ideal_cache) > 100_000:
                self._ideal_cache.clear()
            fwd = self._path(w.src, w.dst)
            back = self._path(w.dst, w.src)
            v = self._ideal_cache[key] = self.ideal.ns(w.msg.op, w.nbytes, fwd, back,
                                                       w.msg.inline)
        return v

    def _path(self, s: str, d: str) -> list:
        p = self._paths.get((s, d))
        if p is None:
            p = self._paths[(s, d)] = build.path(self.sc, s, d)
        return p

    def _finish(self) -> None:
        """The end of the run: let the last writes land, check what completed, and account
        for what did not (outstanding, or unsignaled with nothing after it)."""
        self.last_ns = getattr(self, "last_ns", self.t0)
        self.procs[next(iter(self.procs))].ctx.host.spend(SETTLE_NS)
        self._poll_sends()
        for h in self.procs:
            self._poll_recv(h)
        for c in (c for cs in self.pools.values() for c in cs):
            while c.unsignaled:
                u = c.unsignaled.popleft()
                del self.outstanding[u.index]
                c.outstanding -= 1
                u.status = UNKNOWN
                self.checks.append(u)
        while self.checks:
            self._check(self.checks.popleft())
        for w in sorted(self.outstanding.values(), key=lambda x: x.index):
            self._check(w)  # status OUTSTANDING: not completed
        for q in self.backlog.values():
            for w in q:
                w.status = OUTSTANDING
                self._check(w)


def _pieces(total: int, parts: int) -> list[tuple[int, int]]:
    """`total` bytes in `parts` SGEs, as even as possible: (offset, length) of each."""
    base, extra = divmod(total, parts)
    out, o = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        out.append((o, n))
        o += n
    return out


def _shift(s: Source, t0: float) -> None:
    """Move a source's clock from 'since the traffic started' to simulated time."""
    if isinstance(s, StreamSource):
        s.start += t0
        if s.end is not None:
            s.end += t0
    elif isinstance(s, PatternSource):
        s.start += t0
        s.next_at = s.start
    elif isinstance(s, FlowSource):
        s.start += t0


def _faults(world: World) -> dict[str, int]:
    out: dict[str, int] = {}
    for link in world.links:
        for k, v in link.fault_counters().items():
            out[k] = out.get(k, 0) + v
    return out


def default_pcap(sc: Scenario) -> str | None:
    return sc.pcap_path()
