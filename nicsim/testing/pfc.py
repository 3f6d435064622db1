"""A PFC storm in a world of hosts: RC pairs on the lossless priority, WRITEs between them, a
host that keeps sending pauses, and polling for a completion with a deadline."""

from __future__ import annotations

from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, WC, SendWR
from nicsim.fabric.pfc import PfcStorm
from nicsim.testing.rdma import Side, make_side
from nicsim.workloads.endpoint import connect_qp, roce_v2_gid
from nicsim.world import World

DSCP = 26  # class 3: lossless by default
TC = DSCP << 2
MIB = 1 << 20


def link_pair(w: World, x: str, y: str, **qp: int) -> tuple[Side, Side]:
    """An RC pair from host `x` to host `y` (4 MiB MRs, MTU 4096) on the lossless traffic
    class; `qp` passes timeout, retry_cnt and the like to both QPs."""
    a, b = make_side(w, x, 4 * MIB), make_side(w, y, 4 * MIB)
    for s, t in ((a, b), (b, a)):
        connect_qp(s.qp, t.qp.qp_num, roce_v2_gid(t.ctx)[1], e.IBV_MTU_4096, traffic_class=TC,
                   **qp)
    return a, b


def post_write(a: Side, b: Side, n: int, wr_id: int) -> None:
    """Post a signaled WRITE of `n` bytes from the start of a's MR to the start of b's."""
    wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(a.mr.buf, n, a.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)


def start_storm(w: World, host: str, stop_ns: float | None = None) -> PfcStorm:
    """`host`'s NIC pauses priority 3 from now on, until `stop_ns` (None: for ever)."""
    nic = w.nics[host]
    return PfcStorm(w.env, nic.port.send_control, nic.mac, (3,), nic.port.rate_gbps,
                    w.env.now, stop_ns)


def poll_until(side: Side, until_ns: float) -> list[WC]:
    """Poll side's CQ until a completion arrives or simulated time reaches `until_ns`: the
    completion, or nothing."""
    env = side.ctx.host.env
    out: list[WC] = []
    while env.now < until_ns and not out:
        out += side.cq.poll(1)[1]
    return out
