"""Two connected RC endpoints for tests, built only through the verbs API."""

from __future__ import annotations

from dataclasses import dataclass

from driver.user import enums as e
from driver.user.verbs import (
    CQ,
    MR,
    PD,
    QP,
    WC,
    AHAttr,
    Context,
    GlobalRoute,
    QPAttr,
    QPCap,
    QPInitAttr,
)
from nicsim.fabric.faults import FaultConfig
from nicsim.nic.config import NicConfig
from nicsim.world import World

ALL_ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
              | e.IBV_ACCESS_REMOTE_ATOMIC)


@dataclass
class Side:
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
            min_rnr_timer: int = 1) -> None:
    attr = QPAttr(qp_access_flags=access, path_mtu=mtu, dest_qp_num=y.qp.qp_num,
                  max_rd_atomic=4, max_dest_rd_atomic=4, timeout=timeout,
                  retry_cnt=retry_cnt, rnr_retry=rnr_retry, min_rnr_timer=min_rnr_timer,
                  ah_attr=AHAttr(GlobalRoute(dgid=y.ctx.query_gid())))
    x.qp.to_init(attr)
    x.qp.to_rtr(attr)
    x.qp.to_rts(attr)


def pair(mtu: int = e.IBV_MTU_1024, mr_len: int = 1 << 16, seed: int = 0,
         pcap: str | None = None, nic: NicConfig | None = None,
         faults: FaultConfig | None = None, **qp: int) -> tuple[World, Side, Side]:
    """Two connected sides; `qp` passes timeout, retry_cnt, rnr_retry, min_rnr_timer."""
    w = World.two_hosts(seed=seed, pcap=pcap, nic=nic, faults=faults)
    a, b = make_side(w, "a", mr_len), make_side(w, "b", mr_len)
    connect(a, b, mtu, **qp)
    connect(b, a, mtu, **qp)
    return w, a, b


def wait(side: Side, n: int = 1, limit_ns: float = 10e6) -> list[WC]:
    """Poll until `n` completions arrive (or fail after `limit_ns` of simulated time)."""
    env = side.ctx.host.env
    deadline = env.now + limit_ns
    out: list[WC] = []
    while len(out) < n:
        _, wcs = side.cq.poll(n - len(out))
        out += wcs
        assert env.now < deadline, f"only {len(out)} of {n} completions after {limit_ns} ns"
    return out


def settle(w: World, ns: float = 5000) -> None:
    """Let in-flight DMA writes land (a completion can precede the peer's last write)."""
    w.hosts["a"].spend(ns)
