"""Connected (RC, or UC) endpoints built only through the verbs API: a connected pair of
sides (what the tests and benchmarks start from), and a host's process with one context, PD,
CQs and memory region shared by many QPs (what the scenario runner builds, a pool of QPs
per host pair)."""

from __future__ import annotations

from dataclasses import dataclass

from nicsim.driver import enums as e
from nicsim.driver.user.verbs import (
    CQ,
    GID,
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
    """One process's end: its context, PD, one CQ for both queues, a connected (RC or UC) QP
    and one MR."""

    ctx: Context
    pd: PD
    cq: CQ
    qp: QP
    mr: MR


def make_side(w: World, host: str, mr_len: int = 1 << 16, cap: QPCap | None = None,
              access: int = ALL_ACCESS, cqe: int = 256, sq_sig_all: int = 0,
              qp_type: int = e.IBV_QPT_RC) -> Side:
    ctx = Context("nsnic0", host=w.hosts[host])
    pd = PD(ctx)
    cq = CQ(ctx, cqe)
    qp = QP(pd, QPInitAttr(qp_type=qp_type, scq=cq, rcq=cq,
                           cap=cap or QPCap(64, 64, 4, 4, 64), sq_sig_all=sq_sig_all))
    mr = MR(pd, mr_len, access)
    return Side(ctx, pd, cq, qp, mr)


def connect(x: Side, y: Side, mtu: int = e.IBV_MTU_1024, access: int = ALL_ACCESS,
            timeout: int = 14, retry_cnt: int = 7, rnr_retry: int = 7,
            min_rnr_timer: int = 1, max_rd_atomic: int = 4) -> None:
    """Take x's QP through INIT, RTR and RTS towards y's (both directions use the same
    max_rd_atomic, as the two sides usually agree on)."""
    connect_qp(x.qp, y.qp.qp_num, roce_v2_gid(y.ctx)[1], mtu, access, timeout, retry_cnt,
               rnr_retry, min_rnr_timer, max_rd_atomic)


def roce_v2_gid(ctx: Context, port: int = 1) -> tuple[int, GID]:
    """The GID table entry a RoCE v2 connection over the host's IP address uses, and its
    index: the first RoCE v2 entry that is not link-local (the IPv4-mapped address: index 3
    on a port with RoCE v1 too, 1 without), as perftest picks it with no -x and rdma_cm
    binds."""
    v2 = int(e.IBV_GID_TYPE_SYSFS_ROCE_V2)
    for i in range(ctx.query_port(port).gid_tbl_len):
        gid = ctx.query_gid(port, i)
        if gid.raw == bytes(16) or gid.raw[:2] == b"\xfe\x80":
            continue  # an empty entry, or the link-local GID
        if ctx.query_gid_type(port, i) == v2:
            return i, gid
    raise LookupError(f"no RoCE v2 GID of an IP address on port {port}")


def connect_qp(qp: QP, dest_qp_num: int, dgid: object, mtu: int = e.IBV_MTU_1024,
               access: int = ALL_ACCESS, timeout: int = 14, retry_cnt: int = 7,
               rnr_retry: int = 7, min_rnr_timer: int = 1, max_rd_atomic: int = 4,
               traffic_class: int = 0, sgid_index: int | None = None) -> None:
    """Take `qp` through INIT, RTR and RTS towards the QP `dest_qp_num` at `dgid`, from GID
    table entry `sgid_index` (None: the QP's roce_v2_gid); `traffic_class` is the GRH's
    (under RoCEv2 the IP TOS: DSCP << 2)."""
    if sgid_index is None:
        sgid_index = roce_v2_gid(qp.ctx)[0]
    route = GlobalRoute(dgid=dgid, sgid_index=sgid_index, traffic_class=traffic_class)
    attr = QPAttr(qp_access_flags=access, path_mtu=mtu, dest_qp_num=dest_qp_num,
                  max_rd_atomic=max_rd_atomic, max_dest_rd_atomic=max_rd_atomic,
                  timeout=timeout, retry_cnt=retry_cnt, rnr_retry=rnr_retry,
                  min_rnr_timer=min_rnr_timer, ah_attr=AHAttr(route))
    qp.to_init(attr)
    qp.to_rtr(attr)
    qp.to_rts(attr)


@dataclass
class Process:
    """One process on a host: a context, a PD, a send CQ and a receive CQ shared by all its
    QPs, and one memory region for their buffers."""

    host: str
    ctx: Context
    pd: PD
    scq: CQ
    rcq: CQ
    mr: MR

    def qp(self, cap: QPCap) -> QP:
        return QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.scq, rcq=self.rcq,
                                      cap=cap, sq_sig_all=0))


def open_process(w: World, host: str, mr_len: int, cqe: int, access: int = ALL_ACCESS
                 ) -> Process:
    ctx = Context("nsnic0", host=w.hosts[host])
    pd = PD(ctx)
    return Process(host, ctx, pd, CQ(ctx, cqe), CQ(ctx, cqe), MR(pd, mr_len, access))
