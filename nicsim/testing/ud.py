"""A UD QP with its CQ and MR on one host, for tests."""

from __future__ import annotations

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
from nicsim.workloads.endpoint import roce_v2_gid
from nicsim.world import World

QKEY = 0x11111111


class Side:
    def __init__(self, w: World, host: str, qkey: int = QKEY) -> None:
        self.w = w
        self.ctx = Context("nsnic0", host=w.hosts[host])
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 64)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=self.cq, rcq=self.cq,
                                         cap=QPCap(16, 16, 2, 2, 64)), QPAttr(qkey=qkey))
        self.mr = MR(self.pd, 16384, e.IBV_ACCESS_LOCAL_WRITE)
        self.nic = w.nics[host]

    def ah_to(self, other: Side) -> AH:
        return AH(self.pd, attr=AHAttr(GlobalRoute(dgid=roce_v2_gid(other.ctx)[1],
                                                   sgid_index=roce_v2_gid(self.ctx)[0])))

    def recv(self, wr_id: int, length: int = 2048, offset: int = 8192) -> None:
        self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1,
                                 sg=[SGE(self.mr.buf + offset, length, self.mr.lkey)]))

    def send(self, to: Side, data: bytes, ah: AH | None = None, qkey: int = QKEY,
             imm: int | None = None, wr_id: int = 1) -> None:
        self.mr.write(data, len(data))
        op = e.IBV_WR_SEND if imm is None else e.IBV_WR_SEND_WITH_IMM
        wr = SendWR(wr_id=wr_id, opcode=op, num_sge=1, imm_data=imm or 0,
                    sg=[SGE(self.mr.buf, len(data), self.mr.lkey)])
        wr.set_wr_ud(ah or self.ah_to(to), to.qp.qp_num, qkey)
        self.qp.post_send(wr)

    def wait(self, n: int = 1, limit_ns: float = 1e6) -> list:
        env = self.ctx.host.env
        end = env.now + limit_ns
        out: list = []
        while len(out) < n and env.now < end:
            out += self.cq.poll(n - len(out))[1]
        return out
