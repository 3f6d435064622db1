"""An RC endpoint and a connected pair of them, built only through the verbs API: what the
scenario runner, the tests and the benchmarks all start from."""

from __future__ import annotations

from dataclasses import dataclass

from driver.user import enums as e
from driver.user.verbs import (
    CQ,
    MR,
    PD,
    QP,
    AHAttr,
    Context,
    GlobalRoute,
    QPAttr,
    QPCap,
    QPInitAttr,
)
from nicsim.world import World

ALL_ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
              | e.IBV_ACCESS_REMOTE_ATOMIC)


@dataclass
class Side:
    """One process's end: its context, PD, one CQ for both queues, an RC QP and one MR."""

    ctx: Context
    pd: PD
    cq: CQ
    qp: QP
    mr: MR


def make_side(w: World, host: str, mr_len: int = 1 << 16, cap: QPCap | None = None,
              access: int = ALL_ACCESS, cqe: int = 256) -> Side:
    ctx = Context("nsnic0", host=w.hosts[host])
    pd = PD(ctx)
    cq = CQ(ctx, cqe)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                           cap=cap or QPCap(64, 64, 4, 4, 64), sq_sig_all=0))
    mr = MR(pd, mr_len, access)
    return Side(ctx, pd, cq, qp, mr)


def connect(x: Side, y: Side, mtu: int = e.IBV_MTU_1024, access: int = ALL_ACCESS,
            timeout: int = 14, retry_cnt: int = 7, rnr_retry: int = 7,
            min_rnr_timer: int = 1, max_rd_atomic: int = 4) -> None:
    """Take x's QP through INIT, RTR and RTS towards y's (both directions use the same
    max_rd_atomic, as the two sides usually agree on)."""
    attr = QPAttr(qp_access_flags=access, path_mtu=mtu, dest_qp_num=y.qp.qp_num,
                  max_rd_atomic=max_rd_atomic, max_dest_rd_atomic=max_rd_atomic,
                  timeout=timeout, retry_cnt=retry_cnt, rnr_retry=rnr_retry,
                  min_rnr_timer=min_rnr_timer,
                  ah_attr=AHAttr(GlobalRoute(dgid=y.ctx.query_gid())))
    x.qp.to_init(attr)
    x.qp.to_rtr(attr)
    x.qp.to_rts(attr)
