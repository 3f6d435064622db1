"""The connection manager between hosts of a world: an established RC connection through
rdma_cm, and MADs forged from a host's kernel (QP1), as a hostile network would send them."""

from __future__ import annotations

from nicsim.driver import enums as e
from nicsim.driver.cm_enums import RAI_PASSIVE, rdma_port_space
from nicsim.driver.cm_enums import rdma_cm_event_type as EV
from nicsim.driver.kernel.cm import mad as m
from nicsim.driver.kernel.cm.cma import CmKernel, cm_of
from nicsim.driver.kernel.cm.gsi import ip_gid
from nicsim.driver.user.rdma_addrinfo import AddrInfo
from nicsim.driver.user.rdmacm import CMID, CMEvent, CMEventChannel, ConnParam
from nicsim.driver.user.verbs import QPCap, QPInitAttr
from nicsim.world import World

TCP = rdma_port_space.RDMA_PS_TCP
PORT = 7471


def rdma_device(w: World, host: str):  # noqa: ANN201 - the host's RDMA device (kernel object)
    """The (first) RDMA device of `host`'s kernel."""
    return next(iter(w.hosts[host].kernel.devices.values()))  # type: ignore[attr-defined]


def device_ip(w: World, host: str) -> str:
    """The IP address of `host`'s RDMA device's network interface."""
    return rdma_device(w, host).hw.fn.netdev.ip


def cm_kernel(w: World, host: str) -> CmKernel:
    """The kernel connection manager of `host`."""
    return cm_of(w.hosts[host].kernel)  # type: ignore[arg-type]


class Conn:
    """An established RC connection: the active side on h0, the passive side on h1."""

    def __init__(self, w: World, backlog: int = 0) -> None:
        self.w = w
        self.sip, self.cip = device_ip(w, "h1"), device_ip(w, "h0")
        self.sch, self.cch = CMEventChannel(), CMEventChannel()
        self.listen = CMID(self.sch, port_space=TCP)
        self.listen.bind_addr(AddrInfo(src=self.sip, src_service=str(PORT), flags=RAI_PASSIVE,
                                       port_space=TCP))
        self.listen.listen(backlog)
        self.init = QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=4, max_recv_wr=4))

    def connect(self) -> tuple[CMID, CMID]:
        """Connect a new active ID to the listener: (the active ID, the passive one)."""
        cli = CMID(self.cch, port_space=TCP)
        cli.resolve_addr(AddrInfo(src=self.cip, dst=self.sip, dst_service=str(PORT),
                                  port_space=TCP))
        assert CMEvent(self.cch).event_type == EV.RDMA_CM_EVENT_ADDR_RESOLVED
        cli.resolve_route()
        assert CMEvent(self.cch).event_type == EV.RDMA_CM_EVENT_ROUTE_RESOLVED
        cli.create_qp(self.init)
        cli.connect(ConnParam())
        ev = CMEvent(self.sch)
        assert ev.event_type == EV.RDMA_CM_EVENT_CONNECT_REQUEST
        srv = CMID(ev, listen_id=self.listen)
        srv.create_qp(self.init)
        srv.accept(ConnParam())
        assert CMEvent(self.cch).event_type == EV.RDMA_CM_EVENT_ESTABLISHED
        assert CMEvent(self.sch).event_type == EV.RDMA_CM_EVENT_ESTABLISHED
        return cli, srv


def send_mad(w: World, host: str, to: str, mad: bytes) -> None:
    """A MAD from the kernel (QP1) of `host` to QP1 of the host with address `to`."""
    cm = cm_kernel(w, host)
    cm.gsi(rdma_device(w, host)).send(ip_gid(to), mad)


def run_cm(w: World, host: str, ns: float = 200_000) -> None:
    """Let the MADs arrive and the CM of `host` handle them."""
    w.hosts[host].spend(ns)
    cm_kernel(w, host).service()


def dreq_mad(local: int, remote: int, qpn: int) -> bytes:
    """A DREQ MAD naming the communication IDs `local` (the sender's) and `remote`, and
    `qpn`."""
    return m.Mad(m.AttrId.DREQ, 0x1234, m.Dreq(local, remote, qpn)).pack()


def valid_mads(src: str, dst: str) -> list[bytes]:
    """One well-formed MAD of each CM message type (REQ, REP, REJ, RTU, DREQ, DREP, SIDR_REQ,
    SIDR_REP) between the addresses `src` and `dst`."""
    sid = m.service_id(m.PortSpace.TCP, PORT)
    hdr = m.cma_hdr(src, dst, 0x9000)
    msgs: list[tuple[m.AttrId, m.Message]] = [
        (m.AttrId.REQ, m.Req(5, sid, 1, 0x100, 7, ip_gid(src), ip_gid(dst),
                             private_data=hdr)),
        (m.AttrId.REP, m.Rep(6, 5, 0x101, 9, 2)),
        (m.AttrId.REJ, m.Rej(6, 5, 8, 1, b"ari")),
        (m.AttrId.RTU, m.Rtu(5, 6)),
        (m.AttrId.DREQ, m.Dreq(5, 6, 0x101)),
        (m.AttrId.DREP, m.Rtu(6, 5)),
        (m.AttrId.SIDR_REQ, m.SidrReq(9, sid, private_data=hdr)),
        (m.AttrId.SIDR_REP, m.SidrRep(9, 0, 0x102, sid, 0x1234)),
    ]
    return [m.Mad(a, 3, msg).pack() for a, msg in msgs]
