"""Two RC QPs of host b receiving from one shared receive queue, for tests."""

from __future__ import annotations

from pathlib import Path

from nicsim.driver import enums as e
from nicsim.driver.user.unsupported import SrqAttr, SrqInitAttr
from nicsim.driver.user.verbs import (
    CQ,
    MR,
    PD,
    QP,
    SGE,
    SRQ,
    Context,
    QPCap,
    QPInitAttr,
    RecvWR,
    SendWR,
)
from nicsim.testing.rdma import wait
from nicsim.workloads.endpoint import ALL_ACCESS, Side, connect, make_side
from nicsim.world import World


class Server:
    """Host b: two RC QPs receiving from one SRQ, one CQ, one MR."""

    def __init__(self, w: World, max_wr: int = 16) -> None:
        self.ctx = Context("nsnic0", host=w.hosts["b"])
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 64)
        self.srq = SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=max_wr, max_sge=2)))
        self.mr = MR(self.pd, 1 << 16, ALL_ACCESS)
        self.qps = [QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                                           srq=self.srq, cap=QPCap(8, 0, 1, 0, 0)))
                    for _ in range(2)]
        self.sides = [Side(self.ctx, self.pd, self.cq, qp, self.mr) for qp in self.qps]

    def post(self, wr_id: int, off: int, length: int = 256, lkey: int | None = None) -> None:
        self.srq.post_recv(RecvWR(wr_id, 1, [SGE(self.mr.buf + off, length,
                                                 self.mr.lkey if lkey is None else lkey)]))

    def wait(self, n: int) -> list:
        return wait(self.sides[0], n)  # (every side has the one CQ)


def srq_world(pcap: Path | None = None) -> tuple[World, list[Side], Server]:
    w = World.two_hosts(seed=0, pcap=pcap)
    clients = [make_side(w, "a") for _ in range(2)]
    s = Server(w)
    for c, sv in zip(clients, s.sides, strict=True):
        connect(c, sv)
        connect(sv, c)
    return w, clients, s


def send(c: Side, data: bytes) -> None:
    c.mr.write(data, len(data))
    c.qp.post_send(SendWR(1, e.IBV_WR_SEND, 1, sg=[SGE(c.mr.buf, len(data), c.mr.lkey)]))
