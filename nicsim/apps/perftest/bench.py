"""perftest's two ends in one simulated world, built and driven through the verbs API.

The server is host b and the client host a, one cable between them, the hardware of the
profile. Each end does what perftest's does (run_iter_bw, run_iter_bw_server,
run_iter_lat_write, run_iter_lat_send, run_iter_lat in perftest_resources.c): the client
posts, polls and takes its timestamps; the server answers where the test needs it (receives
for SEND, the ping-pong of the latency tests). In a bidirectional run (-b) the server posts
as the client does (run_iter_bw on both ends, run_iter_bi for SEND), each end towards the
other. When both ends are busy they run together, each on its own CPU (nicsim.host.cpus).
Each end keeps its own timestamps, as each perftest process does: the client's make the
client's table and the server's the server's. Time stamps are the simulated clock in ns: the
numbers come from the model, nothing is measured on the machine running it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from nicsim.apps.perftest.params import (
    CQE_POLL_BATCH,
    Conn,
    Params,
    PerftestError,
    TestKind,
    Verb,
)
from nicsim.apps.perftest.report import Dest, Setup
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import (
    AH,
    CQ,
    MR,
    PD,
    QP,
    SGE,
    AHAttr,
    Context,
    GlobalRoute,
    QPAttr,
    QPCap,
    QPInitAttr,
    RecvWR,
    SendWR,
)
from nicsim.host.cpus import Cpus
from nicsim.trace.breakdown import Breakdown
from nicsim.workloads.endpoint import roce_v2_gid
from nicsim.workloads.wait import CqWatch
from nicsim.world import World

DEVICE = "nsnic0"
QKEY = 0x11111111  # perftest's DEF_QKEY
GRH = 40  # a UD receive buffer starts with the GRH (IBA 11.4.1.2)
_ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
           | e.IBV_ACCESS_REMOTE_ATOMIC)
_MTU_ENUM = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}
_OPCODE = {Verb.WRITE: e.IBV_WR_RDMA_WRITE, Verb.READ: e.IBV_WR_RDMA_READ,
           Verb.SEND: e.IBV_WR_SEND}


@dataclass
class Window:
    """A duration run's clock (perftest's catch_alarm states on the simulated clock): warm-up
    until `sample`, counted until `stop`, then the margin until `end`."""

    sample: float
    stop: float
    end: float
    iters: int = 0  # completions (or exchanges) counted between sample and stop

    @staticmethod
    def start(now: float, duration: int, margin: int) -> Window:
        return Window(now + margin * 1e9, now + (duration - margin) * 1e9, now + duration * 1e9)

    def sampling(self, now: float) -> bool:
        return self.sample <= now < self.stop


@dataclass
class Timing:
    """What one end timed for one size: its post times and the times its completions were
    polled (ns), or a duration run's window and what it counted."""

    posted: np.ndarray | None = None
    completed: np.ndarray | None = None
    window: Window | None = None


@dataclass
class End:
    """One end (perftest's pingpong_context): its CQs, QPs and one buffer per QP, each with
    a send half and a receive half (`slot` bytes apart)."""

    ctx: Context
    pd: PD
    scq: CQ
    rcq: CQ
    qps: list[QP]
    mr: MR
    slot: int
    psns: list[int]
    ahs: list[AH | None]

    @property
    def host(self) -> Any:
        return self.ctx.host

    def buf(self, q: int) -> int:
        return self.mr.buf + 2 * q * self.slot

    def rbuf(self, q: int) -> int:
        return self.buf(q) + self.slot


_QP_TYPE = {Conn.RC: e.IBV_QPT_RC, Conn.UC: e.IBV_QPT_UC, Conn.UD: e.IBV_QPT_UD}


def _slot(p: Params) -> int:
    biggest = max(p.sizes) + (GRH if p.conn is Conn.UD else 0)
    return max(64, -(-biggest // 4096) * 4096)


def _end(w: World, host: str, p: Params, inline: int, rng: random.Random) -> End:
    ctx = Context(DEVICE, host=w.hosts[host])
    pd = PD(ctx)
    scq = CQ(ctx, max(p.tx_depth * p.num_qps, 2))
    rcq = CQ(ctx, max(p.rx_depth * p.num_qps, 2))
    qtype = _QP_TYPE[p.conn]
    rx = p.rx_depth if p.verb is Verb.SEND else 1
    qps = []
    for _ in range(p.num_qps):
        attr = QPAttr(qkey=QKEY) if p.conn is Conn.UD else None
        qps.append(QP(pd, QPInitAttr(qp_type=qtype, scq=scq, rcq=rcq,
                                     cap=QPCap(p.tx_depth, rx, 1, 1, inline), sq_sig_all=0),
                      attr))
    slot = _slot(p)
    mr = MR(pd, 2 * slot * p.num_qps, _ACCESS)
    return End(ctx, pd, scq, rcq, qps, mr, slot, [rng.getrandbits(24) for _ in qps],
               [None] * p.num_qps)


def _connect(x: End, y: End, p: Params, mtu: int, out_reads: int, gid_index: int) -> None:
    gid = y.ctx.query_gid(1, gid_index)
    for q, qp in enumerate(x.qps):
        route = GlobalRoute(dgid=gid, sgid_index=gid_index)
        if p.conn is Conn.UD:
            x.ahs[q] = AH(x.pd, attr=AHAttr(route))
            continue
        attr = QPAttr(qp_access_flags=_ACCESS, path_mtu=mtu, dest_qp_num=y.qps[q].qp_num,
                      rq_psn=y.psns[q], sq_psn=x.psns[q], max_rd_atomic=out_reads,
                      max_dest_rd_atomic=out_reads, timeout=14, retry_cnt=7, rnr_retry=7,
                      min_rnr_timer=12, ah_attr=AHAttr(route))
        qp.to_init(attr)
        qp.to_rtr(attr)
        qp.to_rts(attr)


class Bench:
    """The world, both ends and the values perftest's header reports."""

    def __init__(self, p: Params, world: World, inline_default: int) -> None:
        self.p = p
        self.w = world
        rng = random.Random(p.seed)
        ctx = Context(DEVICE, host=world.hosts["a"])
        port = ctx.query_port()
        dev = ctx.query_device()
        mtu = port.active_mtu
        self.mtu_warning: list[str] = []
        if p.mtu:
            if p.mtu not in _MTU_ENUM:
                self.mtu_warning = [f" Invalid MTU - {p.mtu} ",
                                    " Please choose mtu from {256,512,1024,2048,4096}",
                                    f" Will run with the port active mtu - {mtu}"]
            else:
                mtu = min(_MTU_ENUM[p.mtu], mtu)
        # No -x: perftest's get_best_gid_index, the IPv4-mapped GID of the best RoCE version.
        gid_index = roce_v2_gid(ctx)[0] if p.gid_index is None else p.gid_index
        if ctx.query_gid(1, gid_index).raw == bytes(16):
            raise PerftestError(f" Failed to query GID index {gid_index}: {DEVICE} has no "
                                f"such GID (nicsim exec -- cat /sys/class/infiniband/"
                                f"{DEVICE}/ports/1/gids/N lists them)")
        ctx.close()
        inline = inline_default if p.inline < 0 else p.inline
        out_reads = 1
        if p.verb in (Verb.READ, Verb.ATOMIC):
            out_reads = dev.max_qp_rd_atom if p.out_reads <= 0 else min(p.out_reads,
                                                                         dev.max_qp_rd_atom)
        if p.conn is Conn.UD:
            p.size_cap = 128 << mtu  # perftest: "Max msg size in UD is MTU"
        self.setup = Setup(DEVICE, mtu, inline, out_reads, gid_index)
        try:
            self.client = _end(world, "a", p, inline, rng)
            self.server = _end(world, "b", p, inline, rng)
        except Exception as ex:  # noqa: BLE001 - the verbs' error, worded as perftest's
            raise PerftestError(f" Couldn't create IB resources ({ex})") from None
        _connect(self.client, self.server, p, mtu, out_reads, gid_index)
        _connect(self.server, self.client, p, mtu, out_reads, gid_index)
        self.window: Window | None = None  # set at the start of a duration run
        self.server_window: Window | None = None  # the server's (its own count)
        self.tracer: Breakdown | None = None
        if p.breakdown:
            self.tracer = Breakdown(world)
            for qp in self.client.qps:
                self.tracer.watch_qp(qp._p)
            self.tracer.watch_cq(self.client.scq._p)

    # -- address lines ------------------------------------------------------------------------

    def dest(self, end: End, q: int) -> Dest:
        gid = bytes.fromhex(end.ctx.query_gid(1, self.setup.gid_index).gid.replace(":", ""))
        # READ and atomic targets are the receive half; WRITE lands in the peer's too.
        return Dest(0, end.qps[q].qp_num, end.psns[q], end.mr.rkey, end.rbuf(q),
                    self.setup.out_reads, gid)

    # -- work requests --------------------------------------------------------------------------

    def _wr(self, src: End, dst: End, q: int, size: int) -> SendWR:
        p = self.p
        if p.verb is Verb.ATOMIC:
            op = (e.IBV_WR_ATOMIC_FETCH_AND_ADD if p.atomic_type.value == "FETCH_AND_ADD"
                  else e.IBV_WR_ATOMIC_CMP_AND_SWP)
            wr = SendWR(wr_id=q, opcode=op, num_sge=1, sg=[SGE(src.buf(q), 8, src.mr.lkey)])
            wr.set_wr_atomic(dst.mr.rkey, dst.rbuf(q), 1, 0)
            return wr
        wr = SendWR(wr_id=q, opcode=_OPCODE[p.verb], num_sge=1,
                    sg=[SGE(src.buf(q), size, src.mr.lkey)])
        if p.verb in (Verb.WRITE, Verb.READ):
            wr.set_wr_rdma(dst.mr.rkey, dst.rbuf(q))
        if p.conn is Conn.UD:
            wr.set_wr_ud(src.ahs[q], dst.qps[q].qp_num, QKEY)
        return wr

    def _inline(self, size: int) -> int:
        return e.IBV_SEND_INLINE if size <= self.setup.inline and self.p.verb in (
            Verb.WRITE, Verb.SEND) else 0

    def _post_recvs(self, end: End, size: int, n: int, q: int) -> None:
        extra = GRH if self.p.conn is Conn.UD else 0
        wr = RecvWR(wr_id=q, num_sge=1, sg=[SGE(end.rbuf(q), size + extra, end.mr.lkey)])
        for _ in range(n):
            end.qps[q].post_recv(wr)

    # -- bandwidth ------------------------------------------------------------------------------

    def run_bw(self, size: int) -> tuple[Timing, Timing | None]:
        """One size of a bandwidth test: what the client timed, and what the server did (None
        where it only waits: a unidirectional WRITE, READ or atomic test)."""
        p = self.p
        c, s = self.client, self.server
        duplex_send = p.duplex and p.verb is Verb.SEND
        if p.verb is Verb.SEND:
            for end in (c, s) if p.duplex else (s,):
                for q in range(p.num_qps):
                    self._post_recvs(end, size, p.rx_depth, q)
        elif not p.duplex:
            return self._bw_sender(c, s, size, self.window), None
        cpus = Cpus(self.w.env)
        if p.duplex:
            # Each end posts towards the other; a SEND server starts sending at its first
            # receive and its duration alarm with it (run_iter_bi), a WRITE, READ or atomic
            # server at once (run_iter_bw on both ends).
            swin = None if duplex_send else self.server_window
            server = partial(self._bw_sender, s, c, size, swin, duplex_send, duplex_send)
        else:
            server = partial(self._bw_server, size)
        res = cpus.run([
            ("client", c.host, partial(self._bw_sender, c, s, size, self.window, duplex_send)),
            ("server", s.host, server)])
        return res[0], res[1]

    def _bw_sender(self, me: End, peer: End, size: int, win: Window | None,
                   receives: bool = False, first_rx: bool = False) -> Timing:
        """perftest's run_iter_bw from `me` to `peer`: keep TX depth WRs in flight per QP, a
        completion every CQ moderation WRs. With `receives` (run_iter_bi: a bidirectional
        SEND) the end takes the peer's SENDs too, reposting each receive, until both
        directions are done; with `first_rx` it posts nothing before its first receive.

        Iterations: the post time of each WR and the time the completion that made k WRs
        complete was polled. Duration (-D): keep going until the window's end; the WRs (and,
        with `receives`, the messages received) completed inside the sampled window count."""
        p = self.p
        env = self.w.env
        timed = p.duration is not None
        nq, iters, depth, mod = p.num_qps, p.iters, p.tx_depth, p.cq_mod
        total = iters * nq
        posted = np.zeros(0 if timed else total)
        completed = np.zeros(0 if timed else total)
        wrs = [self._wr(me, peer, q, size) for q in range(nq)]
        inline = self._inline(size)
        fill_count = (iters % depth) if mod >= depth else (iters % mod)
        scnt = [0] * nq
        ccnt = [0] * nq
        per_q = [0] * nq  # receives per QP
        tot_s = tot_c = rcnt = 0
        sending = not first_rx
        spin = _TwoCqs(me) if receives else None

        def going() -> bool:
            if timed:
                return win is None or env.now < win.end
            return tot_s < total or tot_c < total or (receives and rcnt < total)

        while going():
            for q in range(nq) if sending else ():
                qp, wr = me.qps[q], wrs[q]
                while ((timed or scnt[q] < iters) and scnt[q] < depth + ccnt[q]
                       and not (timed and env.now >= win.end)):  # type: ignore[union-attr]
                    k = scnt[q]
                    sig = k % mod == mod - 1 or (not timed and k == iters - 1)
                    wr.send_flags = (e.IBV_SEND_SIGNALED if sig else 0) | inline
                    if not timed:
                        posted[tot_s] = env.now
                    qp.post_send(wr)
                    scnt[q] += 1
                    tot_s += 1
            if spin is not None:
                # Two CQs polled in turn: poll the ones with a completion waiting; with none,
                # spin until the NIC writes either.
                rx_ready, tx_ready = spin.ready()
                if not (rx_ready or tx_ready):
                    spin.wait()
                    continue
                if rx_ready:
                    _, wcs = me.rcq.poll(p.rx_depth)
                    for wc in wcs:
                        _check(wc, "recv", rcnt, rcnt)
                        q = wc.wr_id
                        rcnt += 1
                        per_q[q] += 1
                        if not sending:
                            sending = True
                            if timed:
                                win = self._window()
                        if timed and win.sampling(env.now):  # type: ignore[union-attr]
                            win.iters += 1  # type: ignore[union-attr]
                        if timed or per_q[q] + p.rx_depth <= iters:
                            self._post_recvs(me, size, 1, q)
                if not tx_ready:
                    continue
            elif not (timed or tot_c < total):
                continue
            _, wcs = me.scq.poll(CQE_POLL_BATCH)
            for wc in wcs:
                _check(wc, "send", tot_s, tot_c)
                q = wc.wr_id
                if timed:
                    ccnt[q] += mod
                    tot_c += mod
                    if win.sampling(env.now):  # type: ignore[union-attr]
                        win.iters += mod  # type: ignore[union-attr]
                    continue
                fill = mod
                if fill_count and ccnt[q] + mod > iters:
                    fill = iters - ccnt[q]
                ccnt[q] += fill
                tot_c += fill
                completed[min(tot_c, total) - 1] = env.now
        if timed:
            return Timing(window=win)
        return Timing(posted, completed)

    def _bw_server(self, size: int) -> Timing:
        """run_iter_bw_server: take the client's SENDs, reposting each receive. The server
        times its own run, from its first receive to its last (its duration alarm starts at
        the first receive too): its table's bandwidth, without a peak."""
        p = self.p
        s = self.server
        env = self.w.env
        timed = p.duration is not None
        win: Window | None = None
        total = p.iters * p.num_qps
        rcnt = 0
        first = last = 0.0
        per_q = [0] * p.num_qps
        while (rcnt < total) if not timed else (win is None or env.now < win.end):
            _, wcs = s.rcq.poll(CQE_POLL_BATCH)
            for wc in wcs:
                _check(wc, "recv", rcnt, rcnt)
                q = wc.wr_id
                if rcnt == 0:
                    first = env.now
                    win = self._window() if timed else None
                rcnt += 1
                last = env.now
                per_q[q] += 1
                if win is not None and win.sampling(env.now):
                    win.iters += 1
                if timed or per_q[q] + p.rx_depth <= p.iters:
                    self._post_recvs(s, size, 1, q)
        return Timing(window=win if timed else Window(first, last, last, total))

    # -- latency ----------------------------------------------------------------------------------

    def run_lat(self, size: int) -> tuple[Timing, Timing | None]:
        """One size of a latency test: each end's post times (ns), or its window in a
        duration run (READ and atomics: the client's alone, the server only waits)."""
        p = self.p
        if p.verb in (Verb.READ, Verb.ATOMIC):
            return self._lat_alone(size), None
        if p.verb is Verb.SEND:
            for end in (self.client, self.server):
                self._post_recvs(end, size, p.rx_depth, 0)
            body = self._lat_send
        else:
            body = self._lat_write
        cpus = Cpus(self.w.env)
        # WRITE: the server sends first; SEND: the client does (as perftest's loops have it).
        res = cpus.run([
            ("client", self.client.host, lambda: body(self.client, self.server, size, True)),
            ("server", self.server.host, lambda: body(self.server, self.client, size, False))])
        return res[0], res[1]

    # (In a duration run (-D) the loops go on until the window's end instead of for a count
    # of iterations, and a wait gives up at the end: perftest's END_STATE. Both ends' alarms
    # start together, so the server's window has the client's times and counts of its own.)

    def _going(self, done: int) -> bool:
        win = self.window
        return done < self.p.iters if win is None else self.w.env.now < win.end

    def _await(self, cq: CQ, what: str, scnt: int, ccnt: int) -> bool:
        """Poll `cq` until one completion (True) or the end of a duration run (False)."""
        win = self.window
        env = self.w.env
        while win is None or env.now < win.end:
            _, wcs = cq.poll(1)
            if wcs:
                _check(wcs[0], what, scnt, ccnt)
                return True
        return False

    def _counted(self, win: Window | None) -> None:
        """A duration run counts what completes inside its sampled window."""
        if win is not None and win.sampling(self.w.env.now):
            win.iters += 1

    def _lat_alone(self, size: int) -> Timing:
        c = self.client
        env = self.w.env
        wr = self._wr(c, self.server, 0, size)
        wr.send_flags = e.IBV_SEND_SIGNALED
        posted: list[float] = []
        while self._going(len(posted)):
            posted.append(env.now)
            c.qps[0].post_send(wr)
            if self._await(c.scq, "send", len(posted), len(posted) - 1):
                self._counted(self.window)
        return Timing(np.array(posted), window=self.window)

    def _lat_write(self, me: End, peer: End, size: int, client: bool) -> Timing:
        """perftest's run_iter_lat_write: wait for the peer's count in the last byte of my
        receive half, write mine into the peer's, wait for my WRITE's completion."""
        env = self.w.env
        host = me.host
        aspace = me.ctx.aspace
        win = self.window
        mine = win if client else self.server_window
        wr = self._wr(me, peer, 0, size)
        wr.send_flags = e.IBV_SEND_SIGNALED | self._inline(size)
        post_at = me.buf(0) + size - 1
        poll_va = me.rbuf(0) + size - 1
        poll_pa = aspace.translate(poll_va)
        posted: list[float] = []
        scnt = rcnt = ccnt = 0
        while self._going(min(scnt, rcnt, ccnt)):
            if self._going(rcnt) and not (scnt < 1 and not client):
                rcnt += 1
                want = rcnt & 0xFF
                while aspace.read(poll_va, 1)[0] != want:
                    if win is not None and env.now >= win.end:
                        return Timing(np.array(posted), window=mine)
                    host.poll_wait(host.costs.poll_empty, poll_pa, poll_pa + 1)
            if self._going(scnt):
                posted.append(env.now)
                scnt += 1
                aspace.write(post_at, bytes([scnt & 0xFF]))
                me.qps[0].post_send(wr)
            if self._going(ccnt):
                if not self._await(me.scq, "send", scnt, ccnt):
                    break
                ccnt += 1
                self._counted(mine)
        return Timing(np.array(posted), window=mine)

    def _lat_send(self, me: End, peer: End, size: int, client: bool) -> Timing:
        """perftest's run_iter_lat_send: wait for a receive (reposting it), then send; every
        SEND signalled (CQ moderation is 1 at TX depth 1) and its completion awaited."""
        p = self.p
        env = self.w.env
        wr = self._wr(me, peer, 0, size)
        wr.send_flags = e.IBV_SEND_SIGNALED | self._inline(size)
        mine = self.window if client else self.server_window
        posted: list[float] = []
        scnt = rcnt = 0
        while self._going(min(scnt, rcnt)):
            if self._going(rcnt) and not (scnt < 1 and client):
                if not self._await(me.rcq, "recv", rcnt, rcnt):
                    break
                rcnt += 1
                self._counted(mine)
                if self.window is not None or rcnt + p.rx_depth <= p.iters:
                    self._post_recvs(me, size, 1, 0)
            if self._going(scnt):
                posted.append(env.now)
                scnt += 1
                me.qps[0].post_send(wr)
                if not self._await(me.scq, "send", scnt, scnt):
                    break
        return Timing(np.array(posted), window=mine)

    def _window(self) -> Window:
        """A duration run's clock from now (an end's alarm starts)."""
        p = self.p
        assert p.duration is not None
        return Window.start(self.w.env.now, p.duration, p.margin)

    def run(self, size: int) -> tuple[Timing, Timing | None]:
        """One size: what the client timed, and what the server did (None where it only
        waits: a unidirectional WRITE, READ or atomic test, a READ or atomic latency test)."""
        p = self.p
        if p.duration is not None:
            self.window = self._window()
            self.server_window = self._window()
        if p.kind is TestKind.BW:
            return self.run_bw(size)
        return self.run_lat(size)


class _TwoCqs:
    """A CPU spinning on an end's receive and send CQs in turn (run_iter_bi): which of them
    has a completion waiting (read as the provider reads it, in no time), and a wait until
    the NIC writes either ring. (CQ.poll waits on its own ring only: an end blocked there
    would not see the other CQ's completions, and its peer's SENDs would find no receive.)"""

    def __init__(self, end: End) -> None:
        self.host = end.host
        self.mem = end.host.mem
        self.cqs = (CqWatch(end.rcq, None), CqWatch(end.scq, None))
        self.rings = [(cq._p._ring_pa, cq._p._ring_pa + cq._p.ring_bytes)
                      for cq in (end.rcq, end.scq)]

    def ready(self) -> tuple[bool, bool]:
        return self.cqs[0].ready(), self.cqs[1].ready()

    def wait(self) -> None:
        """Two empty polls, then sleep until a CQE lands in either ring (at most 100 us)."""
        host = self.host
        host.cpu.wait_write(self, 0, 0, 2 * host.costs.poll_empty, 100_000.0)

    # (wait_write watches this object as it would one memory range: both rings)
    def watch(self, _lo: int, _hi: int, cb: Callable[[], None]) -> list[tuple]:
        return [self.mem.watch(lo, hi, cb) for lo, hi in self.rings]

    def unwatch(self, entries: list[tuple]) -> None:
        for entry in entries:
            self.mem.unwatch(entry)


def _check(wc: Any, what: str, scnt: int, ccnt: int) -> None:
    """perftest's NOTIFY_COMP_ERROR_SEND / _RECV: a failed completion ends the test."""
    if wc.status != e.IBV_WC_SUCCESS:
        name = e.ibv_wc_status(wc.status).name if hasattr(e, "ibv_wc_status") else wc.status
        raise PerftestError(f" Completion with error at {'client' if what == 'send' else 'server'}",
                            f" Failed status {wc.status}: wr_id {wc.wr_id} syndrom "
                            f"0x{wc.vendor_err:x}",
                            f"scnt={scnt}, ccnt={ccnt} ({name})")
