"""A connected RC pair for tests (see nicsim.workloads.endpoint), and waiting on it."""

from __future__ import annotations

from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, WC, SendWR
from nicsim.fabric.faults import FaultConfig
from nicsim.nic.config import NicConfig
from nicsim.workloads.endpoint import ALL_ACCESS, Side, connect, make_side
from nicsim.world import World

__all__ = ["ALL_ACCESS", "Side", "connect", "drain", "make_side", "pair", "rdma_write", "settle",
           "wait"]


def pair(mtu: int = e.IBV_MTU_1024, mr_len: int = 1 << 16, seed: int = 0,
         pcap: str | None = None, nic: NicConfig | None = None,
         faults: FaultConfig | None = None, access: int = ALL_ACCESS,
         **qp: int) -> tuple[World, Side, Side]:
    """Two connected sides, their MRs registered with `access`; `qp` passes timeout,
    retry_cnt, rnr_retry, min_rnr_timer."""
    w = World.two_hosts(seed=seed, pcap=pcap, nic=nic, faults=faults)
    a, b = make_side(w, "a", mr_len, access=access), make_side(w, "b", mr_len, access=access)
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


def rdma_write(side: Side, rkey: int, raddr: int, data: bytes, limit_ns: float = 10e6) -> int:
    """WRITE `data` (from the start of side's MR) to `raddr` under `rkey`, signaled, and
    wait for its completion; returns its status."""
    side.mr.write(data, len(data))
    wr = SendWR(wr_id=5, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(side.mr.buf, len(data), side.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(rkey, raddr)
    side.qp.post_send(wr)
    return wait(side, limit_ns=limit_ns)[0].status


def drain(side: Side, ns: float = 200_000) -> list[WC]:
    """Every completion that arrives within `ns` of simulated time (expecting maybe none)."""
    env = side.ctx.host.env
    end = env.now + ns
    out: list[WC] = []
    while env.now < end:
        out += side.cq.poll(16)[1]
    return out


def settle(w: World, ns: float = 5000) -> None:
    """Let in-flight DMA writes land (a completion can precede the peer's last write)."""
    w.hosts["a"].spend(ns)
