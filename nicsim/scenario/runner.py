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
from nicsim.scenario.schema import OpKind, OpSpec, Scenario
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
class RunResult:
    scenario: Scenario
    wrs: list[Wr]
    elapsed_ns: float
    counters: dict[str, dict[str, int]]
    pcap: str | None
    verified_bytes: int = 0
    first_bad: Wr | None = None
    timed_out: bool = False
    faults: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors and self.first_bad is None and not self.timed_out and all(
            w.status == 0 for w in self.wrs)


def _ceil_page(n: int) -> int:
    return (n + PAGE - 1) // PAGE * PAGE


def _split(total: int, parts: int) -> list[int]:
    """`total` bytes in `parts` SGEs, as even as possible (some may be empty)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


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

    def _plan(self) -> tuple[list[Wr], int, int]:
        wrs: list[Wr] = []
        loc = rem = 0
        for spec in self.sc.ops:
            for _ in range(spec.repeat):
                w = Wr(len(wrs), spec, loc + spec.local_offset, rem + spec.remote_offset)
                loc += _ceil_page(spec.local_offset + spec.bytes) + PAGE
                rem += _ceil_page(spec.remote_offset + spec.bytes) + PAGE
                wrs.append(w)
        return wrs, loc, rem

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

    def _prepare(self, a: Side, b: Side, w: Wr) -> None:
        s = w.spec
        if s.op in (OpKind.CMP_SWAP, OpKind.FETCH_ADD):
            b.mr.write(struct.pack("<Q", s.initial), 8, w.remote)
            return
        w.src = self.rng.integers(0, 256, s.bytes, dtype=np.uint8).tobytes()
        if s.op is OpKind.READ:
            b.mr.write(w.src, s.bytes, w.remote)
        else:
            a.mr.write(w.src, s.bytes, w.local)

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

    def run(self) -> RunResult:
        sc = self.sc
        wrs, loc, rem = self._plan()
        mem = max(64 << 20, 1 << (4 * max(loc, rem) + (16 << 20)).bit_length())
        world = self._world(mem)
        env = world.env
        nrecv = sum(1 for w in wrs if w.spec.op in _CONSUMES_RECV)
        a = self._endpoint(world, "a", loc, max(64, 2 * sc.depth))
        b = self._endpoint(world, "b", rem, max(64, nrecv + 1))
        self._connect(a, b)
        self._connect(b, a)
        for w in wrs:
            self._prepare(a, b, w)
        t0 = env.now
        deadline = t0 + sc.timeout_us * 1000
        pending = deque(wrs)
        inflight: dict[int, Wr] = {}
        unsignaled: deque[Wr] = deque()
        timed_out = False
        while pending or inflight:
            while pending and len(inflight) < sc.depth:
                w = pending.popleft()
                self._post(a, b, w)
                if w.spec.signaled:
                    inflight[w.index] = w
                else:
                    unsignaled.append(w)
            n, wcs = a.cq.poll(16)
            for wc in wcs:
                w = inflight.pop(wc.wr_id, None)
                if w is None:
                    continue
                w.done_ns, w.status = env.now, wc.status
                # A completion also completes the unsignaled WRs posted before it.
                while unsignaled and unsignaled[0].index < w.index:
                    u = unsignaled.popleft()
                    u.done_ns, u.status = env.now, wc.status
            if env.now > deadline:
                timed_out = True
                break
        # Let the last writes land, then drain receive completions on b.
        a.ctx.host.spend(10_000)
        for w in unsignaled:
            w.done_ns, w.status = env.now, 0
        by_index = {w.index: w for w in wrs}
        while True:
            n, wcs = b.cq.poll(64)
            if not n:
                break
            for wc in wcs:
                w = by_index.get(wc.wr_id)
                if w is not None:
                    w.recv_status, w.recv_len, w.recv_imm = wc.status, wc.byte_len, wc.imm_data
        elapsed = env.now - t0
        result = RunResult(sc, wrs, elapsed, {n: nic.counters() for n, nic in
                                              world.nics.items()}, self.pcap,
                           timed_out=timed_out, faults=self.link.fault_counters())
        self._verify(a, b, result)
        world.close()
        return result

    def _verify(self, a: Side, b: Side, r: RunResult) -> None:
        """Compare destination memory with what each WR was meant to place there."""
        for w in r.wrs:
            s = w.spec
            if w.status != 0:
                # An error completion places no data to check; it is reported (and makes
                # the run fail) on its own.
                w.integrity = "not completed" if w.status < 0 else "error completion"
                continue
            if s.op in (OpKind.CMP_SWAP, OpKind.FETCH_ADD):
                got_old = struct.unpack("<Q", a.mr.read(8, w.local))[0]
                got_new = struct.unpack("<Q", b.mr.read(8, w.remote))[0]
                if s.op is OpKind.FETCH_ADD:
                    want_new = (s.initial + s.swap_add) & (2**64 - 1)
                else:
                    want_new = s.swap_add if s.initial == s.compare else s.initial
                ok = got_old == s.initial and got_new == want_new
                w.integrity = "ok" if ok else (f"atomic: returned {got_old} (want {s.initial}),"
                                               f" remote {got_new} (want {want_new})")
                n = 16
            else:
                dst = a.mr.read(s.bytes, w.local) if s.op is OpKind.READ else \
                    b.mr.read(s.bytes, w.remote)
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
            if w.integrity == "ok":
                r.verified_bytes += n
            elif r.first_bad is None:
                r.first_bad = w


def _offsets(sizes: list[int]) -> list[int]:
    out, o = [], 0
    for n in sizes:
        out.append(o)
        o += n
    return out


def default_pcap(sc: Scenario) -> str | None:
    return sc.pcap.format(name=sc.name) if sc.pcap else None
