"""Run a scenario: two hosts, one RC QP pair, the scenario's work requests from host a to b.

The application side is an ordinary verbs program (driver.user.verbs): it registers memory,
connects the QPs, posts WRs keeping `depth` outstanding, polls completions, and at the end
checks that every byte each WR was meant to place is in destination memory.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from driver.user import enums as e
from driver.user.verbs import (
    SGE,
    QPCap,
    RecvWR,
    SendWR,
)
from nicsim.fabric.faults import FaultConfig
from nicsim.fabric.link import LinkConfig
from nicsim.host.pcie import PcieConfig
from nicsim.nic.config import NicConfig
from nicsim.scenario.endpoint import Side, connect, make_side
from nicsim.scenario.schema import OpKind, OpSpec, Scenario, ScenarioError
from nicsim.world import World

PAGE = 4096
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
_CONSUMES_RECV = (OpKind.SEND, OpKind.SEND_IMM, OpKind.WRITE_IMM)


@dataclass
class Wr:
    """One work request of the run and what it must leave in memory."""

    index: int
    spec: OpSpec
    local: int  # offset in a's MR
    remote: int  # offset in b's MR
    src: bytes = b""
    post_ns: float = 0.0
    done_ns: float = 0.0
    status: int = -1
    recv_status: int | None = None
    recv_len: int = 0
    recv_imm: int = 0
    integrity: str = ""

    @property
    def latency_ns(self) -> float:
        return self.done_ns - self.post_ns


@dataclass
class OpStats:
    """What the WRs of one op line did, summarised as they complete."""

    spec: OpSpec
    count: int = 0
    lat_min: float = float("inf")
    lat_max: float = 0.0
    lat_sum: float = 0.0
    statuses: dict[int, int] = field(default_factory=dict)

    def add(self, w: Wr) -> None:
        self.count += 1
        self.statuses[w.status] = self.statuses.get(w.status, 0) + 1
        if w.status >= 0:
            lat = w.latency_ns
            self.lat_min, self.lat_max = min(self.lat_min, lat), max(self.lat_max, lat)
            self.lat_sum += lat


@dataclass
class RunResult:
    scenario: Scenario
    wrs: list[Wr]  # every WR, for runs of up to KEEP_WRS; [] beyond (see `stats`)
    elapsed_ns: float
    counters: dict[str, dict[str, int]]
    pcap: str | None
    verified_bytes: int = 0
    first_bad: Wr | None = None
    timed_out: bool = False
    faults: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    stats: list[OpStats] = field(default_factory=list)
    total_wrs: int = 0
    error_wrs: list[Wr] = field(default_factory=list)  # the first ERRORS_KEPT of them
    error_count: int = 0
    payload_bytes: int = 0  # of WRs that completed successfully

    @property
    def ok(self) -> bool:
        return not self.errors and self.first_bad is None and not self.timed_out and \
            not self.error_count


KEEP_WRS = 10_000  # runs with more WRs keep per-op summaries instead of every WR
ERRORS_KEPT = 100
SETTLE_NS = 10_000.0  # a completion, then this long for the last writes to land: then check
SLOTS = 256  # buffers per op line beyond `depth`: a repeated op reuses them in turn
MAX_REGISTERED = 4 << 30  # what the NIC's 2^20 MTT entries of 4 KiB pages map


def _ceil_page(n: int) -> int:
    return (n + PAGE - 1) // PAGE * PAGE


def _split(total: int, parts: int) -> list[int]:
    """`total` bytes in `parts` SGEs, as even as possible (some may be empty)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


@dataclass
class _Line:
    """The buffers of one op line: `slots` regions of each MR, reused in turn by its repeats
    once the WR that used a region before is checked."""

    spec: OpSpec
    index: int
    slots: int
    local: int  # offset of slot 0 in a's MR
    remote: int
    local_stride: int
    remote_stride: int
    busy: list[Wr | None] = field(default_factory=list)


class Runner:
    def __init__(self, sc: Scenario, pcap: str | None = None) -> None:
        self.sc = sc
        self.pcap = pcap
        self.rng = np.random.default_rng(sc.seed)

    def _world(self, mem: int) -> World:
        sc = self.sc
        nic = NicConfig(pcie=PcieConfig(sc.pcie.gen, sc.pcie.lanes, sc.pcie.mps, sc.pcie.mrrs,
                                        latency_ns=sc.pcie.latency_ns),
                        **sc.nic.model_dump())
        f = sc.link.faults
        w = World.two_hosts(sc.seed, LinkConfig(sc.link.rate_gbps, sc.link.prop_ns), self.pcap,
                            nic, FaultConfig(f.loss, f.corrupt, f.duplicate, f.reorder,
                                             f.reorder_ns, sc.seed), mem)
        self.link = w.links[0]
        return w

    def _plan(self) -> tuple[list[_Line], int, int]:
        """Lay out the buffers: every op line gets its own regions, one per repeat up to
        depth + SLOTS of them, so memory does not grow with the number of repeats."""
        lines: list[_Line] = []
        loc = rem = 0
        for i, spec in enumerate(self.sc.ops):
            slots = min(spec.repeat, self.sc.depth + SLOTS)
            ls = _ceil_page(spec.local_offset + spec.bytes) + PAGE
            rs = _ceil_page(spec.remote_offset + spec.bytes) + PAGE
            lines.append(_Line(spec, i, slots, loc, rem, ls, rs, [None] * slots))
            loc += ls * slots
            rem += rs * slots
        return lines, loc, rem

    def _wrs(self, lines: list[_Line]):  # noqa: ANN202
        """Every WR of the run, in order, with the slot it uses."""
        n = 0
        for line in lines:
            s = line.spec
            for k in range(s.repeat):
                slot = k % line.slots
                yield line, slot, Wr(n, s, line.local + slot * line.local_stride +
                                     s.local_offset,
                                     line.remote + slot * line.remote_stride + s.remote_offset)
                n += 1

    def _prepare(self, a: Side, b: Side, w: Wr) -> None:
        """Put the WR's source data (or the atomic's initial value) in place. The runner
        does it as an observer, at no simulated CPU cost: it is the test, not the program."""
        s = w.spec
        if s.op in (OpKind.CMP_SWAP, OpKind.FETCH_ADD):
            b.ctx.aspace.write(b.mr.buf + w.remote, struct.pack("<Q", s.initial))
            return
        w.src = self.rng.integers(0, 256, s.bytes, dtype=np.uint8).tobytes()
        side, off = (b, w.remote) if s.op is OpKind.READ else (a, w.local)
        side.ctx.aspace.write(side.mr.buf + off, w.src)

    def _post(self, a: Side, b: Side, w: Wr) -> None:
        s = w.spec
        if s.op in _CONSUMES_RECV:
            sg = [] if s.op is OpKind.WRITE_IMM else [
                SGE(b.mr.buf + w.remote + off, n, b.mr.lkey)
                for off, n in zip(_offsets(_split(s.bytes, s.recv_sges)),
                                  _split(s.bytes, s.recv_sges), strict=True)]
            b.qp.post_recv(RecvWR(wr_id=w.index, num_sge=len(sg), sg=sg))
        sizes = _split(s.bytes, s.sges)
        sg = [SGE(a.mr.buf + w.local + off, n, a.mr.lkey)
              for off, n in zip(_offsets(sizes), sizes, strict=True)]
        wr = SendWR(wr_id=w.index, opcode=_WR_OP[s.op], num_sge=len(sg), sg=sg, imm_data=s.imm,
                    send_flags=e.IBV_SEND_SIGNALED if s.signaled else 0)
        if s.op in (OpKind.CMP_SWAP, OpKind.FETCH_ADD):
            wr.set_wr_atomic(b.mr.rkey, b.mr.buf + w.remote, s.compare if s.op is
                             OpKind.CMP_SWAP else s.swap_add, s.swap_add)
        else:
            wr.set_wr_rdma(b.mr.rkey, b.mr.buf + w.remote)
        w.post_ns = a.ctx.host.env.now
        a.qp.post_send(wr)

    def memory(self) -> int:
        """The simulated memory of each host, after checking that the scenario's buffers fit
        the host and the NIC's translation tables. Raises ScenarioError naming the field."""
        sc = self.sc
        lines, loc, rem = self._plan()
        need = max(loc, rem)
        used = 0
        for line in lines:
            used += max(line.local_stride, line.remote_stride) * line.slots
            if used > MAX_REGISTERED:
                raise ScenarioError(
                    f"ops[{line.index}]: the ops so far need {used >> 20:,} MiB of registered "
                    f"memory per host (bytes x min(repeat, depth + {SLOTS}) buffers); the NIC "
                    f"maps at most {MAX_REGISTERED >> 20:,} MiB (2^20 MTT entries of 4 KiB)")
        if sc.host.mem_mib:
            have = sc.host.mem_mib << 20
            if need + (16 << 20) > have:
                raise ScenarioError(
                    f"host.mem_mib: {sc.host.mem_mib:,} MiB is less than the "
                    f"{(need + (16 << 20) + (1 << 20) - 1) >> 20:,} MiB the ops need "
                    f"(their buffers and 16 MiB for the kernel and queues)")
            return have
        return max(64 << 20, 1 << (need + (16 << 20)).bit_length())

    def run(self) -> RunResult:
        sc = self.sc
        mem = self.memory()
        lines, loc, rem = self._plan()
        world = self._world(mem)
        env = world.env
        nrecv = min(sum(line.slots for line in lines if line.spec.op in _CONSUMES_RECV),
                    sc.depth + 1)
        a = self._endpoint(world, "a", loc, max(64, 2 * sc.depth))
        b = self._endpoint(world, "b", rem, max(64, sc.qp.max_recv_wr, nrecv + 1))
        self._connect(a, b)
        self._connect(b, a)
        total = sum(line.spec.repeat for line in lines)
        result = RunResult(sc, [], 0.0, {}, self.pcap, stats=[OpStats(x.spec) for x in lines],
                           total_wrs=total)
        keep = total <= KEEP_WRS
        # Small runs put every WR's data in place before the clock starts; a run that reuses
        # buffers does it when a buffer comes free.
        upfront = all(line.slots == line.spec.repeat for line in lines)
        todo = self._wrs(lines)
        if upfront:
            items = list(todo)
            for _line, _slot, w in items:
                self._prepare(a, b, w)
            todo = iter(items)
        nxt = next(todo, None)
        t0 = env.now
        deadline = t0 + sc.timeout_us * 1000
        inflight: dict[int, Wr] = {}
        unsignaled: deque[Wr] = deque()
        done: deque[Wr] = deque()  # completed, waiting SETTLE_NS to be checked
        by_index: dict[int, Wr] = {}  # waiting for their receive completion on b
        timed_out = False
        recv_room = max(1, b.cq._p.size - sc.depth - 1)
        while nxt is not None or inflight or unsignaled:
            blocked = False
            while nxt is not None and len(inflight) + len(unsignaled) < sc.depth:
                line, slot, w = nxt
                prev = line.busy[slot]
                if prev is not None and not prev.integrity:
                    blocked = True  # its buffer's last WR is not checked yet
                    break
                line.busy[slot] = w
                if not upfront:
                    self._prepare(a, b, w)
                self._post(a, b, w)
                if keep:
                    result.wrs.append(w)
                if w.spec.op in _CONSUMES_RECV:
                    by_index[w.index] = w
                if w.spec.signaled:
                    inflight[w.index] = w
                else:
                    unsignaled.append(w)
                nxt = next(todo, None)
            wcs: list = []
            if inflight or unsignaled:
                _, wcs = a.cq.poll(16)
            else:
                a.ctx.host.spend(SETTLE_NS)  # only checks hold the next WR back
            for wc in wcs:
                w = inflight.pop(wc.wr_id, None)
                if w is None:
                    continue
                w.done_ns, w.status = env.now, wc.status
                done.append(w)
                # A completion also completes the unsignaled WRs posted before it.
                while unsignaled and unsignaled[0].index < w.index:
                    u = unsignaled.popleft()
                    u.done_ns, u.status = env.now, wc.status
                    done.append(u)
            if len(by_index) >= recv_room or blocked and done and done[0].index in by_index:
                self._drain_recv(b, by_index)  # before b's CQ could overrun, or when needed
            while done and done[0].done_ns + SETTLE_NS <= env.now and \
                    done[0].index not in by_index:
                self._check(a, b, done.popleft(), result)
            if env.now > deadline:
                timed_out = True
                break
        # Let the last writes land, then check what is left.
        a.ctx.host.spend(SETTLE_NS)
        for u in unsignaled:
            # Nothing completed after it: show what is known (issue: an unsignaled WR that
            # never completed is not a success).
            u.done_ns, u.status = env.now, (0 if not inflight and not timed_out else -1)
            done.append(u)
        self._drain_recv(b, by_index)
        for w in list(done) + list(inflight.values()):
            self._check(a, b, w, result)
        result.elapsed_ns = env.now - t0
        result.counters = {n: nic.counters() for n, nic in world.nics.items()}
        result.timed_out = timed_out
        result.faults = self.link.fault_counters()
        world.close()
        return result

    @staticmethod
    def _drain_recv(b: Side, by_index: dict[int, Wr]) -> None:
        while by_index:
            n, wcs = b.cq.poll(64)
            if not n:
                return
            for wc in wcs:
                w = by_index.pop(wc.wr_id, None)
                if w is not None:
                    w.recv_status, w.recv_len, w.recv_imm = wc.status, wc.byte_len, wc.imm_data

    def _check(self, a: Side, b: Side, w: Wr, r: RunResult) -> None:
        """Compare destination memory with what the WR was meant to place there (an oracle
        read: no simulated time), and fold the WR into the summaries."""
        s = w.spec
        r.stats[_line_of(self.sc, s)].add(w)
        if w.status != 0:
            # An error completion places no data to check; it is reported (and makes the
            # run fail) on its own.
            w.integrity = "not completed" if w.status < 0 else "error completion"
            r.error_count += 1
            if len(r.error_wrs) < ERRORS_KEPT:
                r.error_wrs.append(w)
            w.src = b""
            return
        r.payload_bytes += s.bytes
        ra, rb = a.ctx.aspace.read, b.ctx.aspace.read
        if s.op in (OpKind.CMP_SWAP, OpKind.FETCH_ADD):
            got_old = struct.unpack("<Q", ra(a.mr.buf + w.local, 8))[0]
            got_new = struct.unpack("<Q", rb(b.mr.buf + w.remote, 8))[0]
            if s.op is OpKind.FETCH_ADD:
                want_new = (s.initial + s.swap_add) & (2**64 - 1)
            else:
                want_new = s.swap_add if s.initial == s.compare else s.initial
            ok = got_old == s.initial and got_new == want_new
            w.integrity = "ok" if ok else (f"atomic: returned {got_old} (want {s.initial}),"
                                           f" remote {got_new} (want {want_new})")
            n = 16
        else:
            dst = ra(a.mr.buf + w.local, s.bytes) if s.op is OpKind.READ else \
                rb(b.mr.buf + w.remote, s.bytes)
            ok = dst == w.src
            if ok and s.op in _CONSUMES_RECV:
                ok = w.recv_status == 0 and w.recv_len == s.bytes and (
                    s.op is OpKind.SEND or w.recv_imm == s.imm)
                if not ok:
                    w.integrity = (f"receive completion: status {w.recv_status}, byte_len "
                                   f"{w.recv_len}, imm {w.recv_imm}")
            if not ok and not w.integrity:
                i = next(i for i in range(s.bytes) if dst[i] != w.src[i])
                w.integrity = f"byte {i}: 0x{dst[i]:02x}, want 0x{w.src[i]:02x}"
            elif ok:
                w.integrity = "ok"
            n = s.bytes
        w.src = b""
        if w.integrity == "ok":
            r.verified_bytes += n
        elif r.first_bad is None:
            r.first_bad = w

    def _endpoint(self, w: World, host: str, mr_len: int, cq_size: int) -> Side:
        q = self.sc.qp
        return make_side(w, host, mr_len, QPCap(q.max_send_wr, q.max_recv_wr, q.max_send_sge,
                                                q.max_recv_sge, q.max_inline_data),
                         cqe=cq_size)

    def _connect(self, x: Side, y: Side) -> None:
        q = self.sc.qp
        connect(x, y, _MTU[q.path_mtu], timeout=q.timeout, retry_cnt=q.retry_cnt,
                rnr_retry=q.rnr_retry, min_rnr_timer=q.min_rnr_timer,
                max_rd_atomic=q.max_rd_atomic)


def _line_of(sc: Scenario, spec: OpSpec) -> int:
    return next(i for i, s in enumerate(sc.ops) if s is spec)


def _offsets(sizes: list[int]) -> list[int]:
    out, o = [], 0
    for n in sizes:
        out.append(o)
        o += n
    return out


def default_pcap(sc: Scenario) -> str | None:
    return sc.pcap.format(name=sc.name) if sc.pcap else None
