"""Bulk RDMA WRITE streams between the hosts of a fabric: N:1 incast, or any set of
sender -> receiver pairs (a permutation), each stream on its own QP.

What the fabric's validation tests and benchmarks run. Each sender posts its whole stream up
front (a queue of `msgs` WRITEs of `msg_bytes`, every 16th signaled, all to the same region
of its own buffer on the receiver), so nothing on the host side throttles it; the NICs,
the switches and congestion control decide how fast it goes. The run is sampled every
`bin_ns`: each sender's bytes on the wire (its port's counter, frames as they start),
the receivers' bytes placed (goodput), and the switch queues toward the receivers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nicsim.driver import enums as e
from nicsim.driver.user.verbs import (
    CQ,
    MR,
    PD,
    QP,
    SGE,
    Context,
    QPCap,
    QPInitAttr,
    SendWR,
)
from nicsim.workloads.endpoint import connect_qp, roce_v2_gid
from nicsim.workloads.wait import CqWatch, Waiter
from nicsim.world import World

ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
SIGNAL_EVERY = 16


@dataclass
class Stream:
    sender: str
    ctx: Context
    qp: QP
    cq: CQ
    mr: MR
    peer_mr: MR
    posted: int = 0
    completed: int = 0
    errors: list[int] = field(default_factory=list)
    finished: float | None = None


@dataclass
class BulkResult:
    senders: list[str]  # one per stream
    bin_ns: float
    times: list[float]  # end of each bin (ns)
    sent: list[list[float]]  # per bin, per sender: Gb/s of data sent
    goodput: list[float]  # per bin: Gb/s placed at the receivers
    queue: list[int]  # per bin: bytes queued toward the receivers at their switches
    duration_ns: float
    finished: list[float | None]  # per stream: when its last WR completed (None: did not)
    completed: bool  # every WR completed successfully
    ok: bool  # completed, and the receiver holds every sender's data
    errors: dict[str, list[int]]
    counters: dict[str, int]  # switch counters (all switches, prefixed) at the end

    def _end(self) -> int:
        """Bins before the first stream finished (the part where all of them compete)."""
        done = [f for f in self.finished if f is not None]
        if not done:
            return len(self.times)
        first = min(done)
        return max(1, sum(1 for t in self.times if t <= first))

    def window(self, start_frac: float = 0.5) -> tuple[list[float], float]:
        """Mean rate per sender and mean goodput over the bins from `start_frac` of the
        competing part of the run (until the first stream finished) to its end."""
        hi = self._end()
        lo = min(int(hi * start_frac), hi - 1)
        rows = self.sent[lo:hi]
        per = [sum(r[k] for r in rows) / len(rows) for k in range(len(self.senders))]
        return per, sum(self.goodput[lo:hi]) / len(rows)

    def converged_at(self, tol: float = 0.1, smooth: int = 10) -> float | None:
        """The end of the first bin from which every sender, its rate averaged over `smooth`
        bins, stays within `tol` of the fair share of what all senders send (while all
        compete), or None."""
        ok_from = None
        end = self._end()
        for i in range(smooth - 1, end):
            rows = self.sent[i - smooth + 1:i + 1]
            r = [sum(x[k] for x in rows) / smooth for k in range(len(self.senders))]
            fair = sum(r) / len(r)
            good = fair > 0 and all(abs(x - fair) <= tol * fair for x in r)
            if good and ok_from is None:
                ok_from = i
            elif not good:
                ok_from = None
        return None if ok_from is None else self.times[ok_from]


def jain(xs: list[float]) -> float:
    """Jain's fairness index: (sum x)^2 / (n sum x^2); 1 when all are equal."""
    s2 = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * s2) if s2 else 0.0


def open_stream(w: World, sender: str, receiver: str, msg_bytes: int, depth: int,
                traffic_class: int, mtu: int) -> Stream:
    """A QP on `sender` connected to one on `receiver`, each with its own buffer."""
    ends = []
    for host in (sender, receiver):
        ctx = Context("nsnic0", host=w.hosts[host])
        pd = PD(ctx)
        cq = CQ(ctx, 4 * (depth // SIGNAL_EVERY + 2))
        qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                               cap=QPCap(depth, 1, 1, 1, 0), sq_sig_all=0))
        mr = MR(pd, msg_bytes, ACCESS)
        ends.append((ctx, qp, cq, mr))
    (sctx, sqp, scq, smr), (rctx, rqp, _rcq, rmr) = ends
    for (_, qp, _, _), (pctx, pqp, _, _) in ((ends[0], ends[1]), (ends[1], ends[0])):
        connect_qp(qp, pqp.qp_num, roce_v2_gid(pctx)[1], mtu, ACCESS, max_rd_atomic=1,
                   traffic_class=traffic_class)
    pattern = bytes((i * 7 + len(sender)) & 0xFF for i in range(256))
    data = (pattern * (msg_bytes // 256 + 1))[:msg_bytes]
    smr.write(data, msg_bytes)
    return Stream(sender, sctx, sqp, scq, smr, rmr)


def incast(w: World, senders: list[str], receiver: str, **kw: object) -> BulkResult:
    """N:1: every sender streams to `receiver` (see `run_streams`)."""
    return run_streams(w, [(s, receiver) for s in senders], **kw)  # type: ignore[arg-type]


def run_streams(w: World, pairs: list[tuple[str, str]], *, msg_bytes: int = 64 * 1024,
                msgs: int = 64, bin_ns: float = 20_000.0, dscp: int = 26,
                mtu: int = e.IBV_MTU_4096, limit_ns: float = 50e6) -> BulkResult:
    """Run one stream per (sender, receiver) to the end (every WR complete or failed, or
    `limit_ns` of simulated time)."""
    streams = [open_stream(w, s, r, msg_bytes, msgs, dscp << 2, mtu) for s, r in pairs]
    env = w.env
    receivers = sorted({r for _, r in pairs})
    rnics = [w.nics[r] for r in receivers]
    # The switch ports toward the receivers: whose links carry frames to their NICs.
    rlinks = {w.ports[f"{r}.eth0"][0] for r in receivers}
    toward = [(sw, p.idx) for sw in w.switches.values() for p in sw.ports if p.link in rlinks]
    # Posts take simulated time (the host's CPU cost per post): round-robin over the streams
    # so that they all start within a few posts of each other, as senders on separate hosts
    # posting in parallel would.
    for i in range(msgs):
        flags = e.IBV_SEND_SIGNALED if (i + 1) % SIGNAL_EVERY == 0 or i == msgs - 1 else 0
        for st in streams:
            wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                        sg=[SGE(st.mr.buf, msg_bytes, st.mr.lkey)], send_flags=flags)
            wr.set_wr_rdma(st.peer_mr.rkey, st.peer_mr.buf)
            st.qp.post_send(wr)
            st.posted += 1
    waiter = Waiter(env)
    watches = [CqWatch(st.cq, waiter) for st in streams]
    t0 = env.now
    # Bytes sent per stream: what its host's port put on the wire (frames as they start,
    # after any pause), shared out equally among the streams of a host that has several.
    nics = [w.nics[s] for s, _ in pairs]
    last = [n.port.counters["tx_bytes"] for n in nics]
    share = {s: sum(1 for x, _ in pairs if x == s) for s, _ in pairs}
    last_placed = sum(n.responder.counters["bytes_placed"] for n in rnics)
    times: list[float] = []
    sent: list[list[float]] = []
    goodput: list[float] = []
    queue: list[int] = []
    host = w.hosts[pairs[0][1]]
    while env.now - t0 < limit_ns:
        host.spend(bin_ns)
        now_b = [n.port.counters["tx_bytes"] for n in nics]
        placed = sum(n.responder.counters["bytes_placed"] for n in rnics)
        sent.append([(x - y) * 8 / bin_ns / share[s] for x, y, (s, _)
                     in zip(now_b, last, pairs, strict=True)])
        goodput.append((placed - last_placed) * 8 / bin_ns)
        queue.append(sum(sw.depth(p, c) for sw, p in toward for c in range(8)))
        times.append(env.now - t0)
        last, last_placed = now_b, placed
        for st, watch in zip(streams, watches, strict=True):
            while watch.ready():
                for wc in st.cq.poll(16)[1]:
                    if wc.status != e.IBV_WC_SUCCESS:
                        st.errors.append(wc.status)
                    st.completed = max(st.completed, wc.wr_id + 1)
                    if st.completed >= msgs and st.finished is None:
                        st.finished = env.now - t0
        if all(st.completed >= msgs or st.errors for st in streams):
            break
    for watch in watches:
        watch.close()
    duration = env.now - t0
    completed = ok = all(not st.errors and st.completed >= msgs for st in streams)
    if ok:
        host.spend(5_000)  # the last payload writes land
        ok = all(st.peer_mr.read(msg_bytes) == st.mr.read(msg_bytes) for st in streams)
    counters = {f"{name}.{k}": v for name, sw in w.switches.items()
                for k, v in sw.counters().items()}
    return BulkResult([s for s, _ in pairs], bin_ns, times, sent, goodput, queue, duration,
                      [st.finished for st in streams], completed, ok,
                      {st.sender: st.errors for st in streams if st.errors}, counters)
