"""The kernel's connection manager (ib_cm and rdma_cm, drivers/infiniband/core/cm.c + cma.c,
as one small module): IP addressing over RoCE, listeners by port space and port, and the CM
protocol of IBA chapter 12 carried in MADs on QP1 (nicsim.driver.kernel.cm.gsi).

What librdmacm (nicsim.driver.user.cm) asks of it, as ucma's commands: create an ID on an
event channel, bind, resolve the address and route, listen, connect, accept, reject,
establish, disconnect, the QP attributes of each transition (rdma_init_qp_attr), and the
events that arrive on a channel. Its state per ID follows ib_cm's (IBA 12.9.6 state diagram,
reduced to what RC and SIDR connections pass through):

    active RC:  ROUTE_RESOLVED -REQ-> REQ_SENT -REP-> REP_RCVD -RTU-> ESTABLISHED
    passive RC: LISTEN; REQ -> REQ_RCVD -REP-> REP_SENT -RTU-> ESTABLISHED
    either:     ESTABLISHED -DREQ-> DREQ_SENT -DREP-> TIMEWAIT
                ESTABLISHED <-DREQ- DREQ_RCVD -DREP-> TIMEWAIT
    UD (SIDR):  ROUTE_RESOLVED -SIDR_REQ-> SIDR_REQ_SENT -SIDR_REP-> ESTABLISHED
                LISTEN; SIDR_REQ -> SIDR_REQ_RCVD -SIDR_REP-> ESTABLISHED

A REQ or SIDR_REQ for a service nobody listens on is answered as ib_cm answers it: REJ with
reason "invalid service ID" (8), SIDR_REP with status "service ID not supported".

The MAD handler runs when a program waits on the CM (it stands in for the kernel's MAD
completion handler, which runs from the QP1 CQ's interrupt): see CmKernel.service.
A request (REQ, REP, DREQ, SIDR_REQ) goes again when its answer is late (IBA 12.4), up to
Max CM Retries times; its timers, like the MAD handler, run when a program waits on the CM.
Not done: MRA, LAP/APR (path migration), TIMEWAIT_EXIT events, multicast joins (EOPNOTSUPP).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import random
from collections import deque
from dataclasses import dataclass, field
from enum import Enum

from nicsim.driver.cm_enums import rdma_cm_event_type as EV
from nicsim.driver.kernel.cm import mad as m
from nicsim.driver.kernel.cm.gsi import Gsi, ip_gid
from nicsim.driver.kernel.ib_core import IbDevice, Kernel, KernelError

from nicsim.hwif import Access, QpAttrMask, QpState

RDMA_UDP_QKEY = 0x01234567  # the Q_Key of RDMA_PS_UDP IDs (rdma_cma.h)
DEFAULT_ACK_TIMEOUT = 18  # 4.096 us * 2^18 ~ 1 s: the RoCE packet lifetime rdma_cm assumes
CM_RESPONSE_TIMEOUT = 20  # 4.096 us * 2^20 ~ 4.3 s (cma.c's CMA_CM_RESPONSE_TIMEOUT)
MAX_CM_RETRIES = 15  # CMA_MAX_CM_RETRIES
PORT_FIRST = 0x8000  # ephemeral ports (the local port range)
MAX_BACKLOG = 1024  # ucma's max_backlog (the rdma_ucm sysctl's default)
CMA_HDR = m.CMA_HDR_SIZE
_CA_GUID_BASE = 0x0002C90300000000  # an EUI-64 style GUID, derived from the MAC below


# What answers each request (IBA 12.6: REQ by REP or REJ, REP by RTU or REJ, DREQ by DREP).
_ANSWERS = {m.AttrId.REQ: (m.AttrId.REP, m.AttrId.REJ), m.AttrId.REP: (m.AttrId.RTU, m.AttrId.REJ),
            m.AttrId.DREQ: (m.AttrId.DREP,), m.AttrId.SIDR_REQ: (m.AttrId.SIDR_REP,)}
_ANSWERED = frozenset(_ANSWERS)


class CmState(Enum):
    IDLE = "idle"
    ADDR_BOUND = "addr_bound"
    ADDR_RESOLVED = "addr_resolved"
    ROUTE_RESOLVED = "route_resolved"
    LISTEN = "listen"
    REQ_SENT = "req_sent"
    REQ_RCVD = "req_rcvd"
    REP_SENT = "rep_sent"
    REP_RCVD = "rep_rcvd"
    ESTABLISHED = "established"
    DREQ_SENT = "dreq_sent"
    DREQ_RCVD = "dreq_rcvd"
    TIMEWAIT = "timewait"
    SIDR_REQ_SENT = "sidr_req_sent"
    SIDR_REQ_RCVD = "sidr_req_rcvd"
    REJECTED = "rejected"
    DESTROYED = "destroyed"


class CmError(KernelError):
    """A CM call refused, with the errno rdma_cm returns."""


@dataclass
class CmEvent:
    """One rdma_cm_event: its type, the ID, a status (an errno or a REJ reason) and the
    connection's or datagram's parameters."""

    event: EV
    id: CmId
    status: int = 0
    private_data: bytes = b""
    listen_id: CmId | None = None
    responder_resources: int = 0
    initiator_depth: int = 0
    retry_count: int = 0
    rnr_retry_count: int = 0
    srq: int = 0
    qp_num: int = 0
    qkey: int = 0
    ah_dgid: bytes = b""
    ah_sgid_index: int = 0  # the GID table entry the address handle sends from


@dataclass
class EventChannel:
    """rdma_event_channel: the events of the IDs created on it, in order."""

    events: deque[CmEvent] = field(default_factory=deque)
    ids: int = 0
    closed: bool = False


@dataclass
class ConnInfo:
    """What rdma_connect/rdma_accept give the kernel (struct rdma_ucm_conn_param)."""

    qp_num: int
    qp_type_ud: bool = False
    responder_resources: int = 1
    initiator_depth: int = 1
    retry_count: int = 7
    rnr_retry_count: int = 7
    srq: bool = False
    private_data: bytes = b""
    qkey: int = 0


@dataclass
class Pending:
    attr: m.AttrId
    mad: bytes
    dgid: bytes
    due: float
    left: int
    sent: int = 1


def response_timeout_ns(exp: int) -> float:
    """4.096 us * 2^exp (IBA 12.7.34's timeout encoding)."""
    return 4096.0 * (1 << exp)


@dataclass(eq=False)
class CmId:
    cm: CmKernel
    channel: EventChannel
    ps: int
    state: CmState = CmState.IDLE
    dev: IbDevice | None = None
    src_ip: str = ""
    src_port: int = 0
    dst_ip: str = ""
    dst_port: int = 0
    local_comm_id: int = 0
    remote_comm_id: int = 0
    tid: int = 0
    qpn: int = 0
    psn: int = 0
    remote_qpn: int = 0
    remote_psn: int = 0
    remote_qkey: int = 0
    remote_gid: bytes = b""
    responder_resources: int = 0
    initiator_depth: int = 0
    retry_count: int = 7
    rnr_retry_count: int = 7
    ack_timeout: int | None = None
    path_mtu: int = 5
    listen: CmId | None = None
    backlog: int = 0
    # The request this side waits an answer to (REQ, REP, DREQ, SIDR_REQ): its bytes, when
    # it goes again (simulated ns) and how many more times it may (IBA 12.4: the sender
    # resends after the response timeout, up to Max CM Retries, then gives up).
    pending: Pending | None = None

    @property
    def ud(self) -> bool:
        return self.ps == m.PortSpace.UDP

    @property
    def gsi(self) -> Gsi:
        assert self.dev is not None
        return self.cm.gsi(self.dev)


@dataclass
class CmCounters:
    mads_sent: int = 0
    mads_received: int = 0
    mads_malformed: int = 0
    mads_unmatched: int = 0
    rej_sent: int = 0
    rej_received: int = 0
    mads_resent: int = 0
    duplicates: int = 0
    timeouts: int = 0
    backlog_drops: int = 0  # connection requests beyond a listener's backlog (not answered)
    wrong_qp_type: int = 0  # a REQ for a UD listener or a SIDR_REQ for a connected one


def _ip(addr: str) -> str:
    try:
        return str(ipaddress.ip_address(addr))
    except ValueError:
        raise CmError(f"{addr!r} is not an IP address", errno.EINVAL) from None


def _any(ip: str) -> bool:
    return ip in ("", "0.0.0.0", "::")


class CmKernel:
    """The connection manager of one host's kernel."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.host = kernel.host
        self._gsi: dict[str, Gsi] = {}
        self._rng = random.Random(self.host.seed ^ 0xC0117EC7)
        # Communication IDs as ib_cm makes them: a cyclic index, XORed with a random operand
        # drawn once, so that IDs are not consecutive numbers a third party can count along.
        self._id_next = 0
        self._id_operand = self._rng.getrandbits(32)
        self._tids = self._rng.randrange(1, 1 << 32)
        self._ports: dict[int, set[int]] = {}
        self._next_port = PORT_FIRST
        self.ids: dict[int, CmId] = {}  # by local communication ID
        self.listeners: dict[tuple[int, int], list[CmId]] = {}
        self.counters = CmCounters()
        for dev in kernel.devices.values():  # QP1 of every port, ready for MADs
            self.gsi(dev)

    # -- devices and addresses --------------------------------------------------------------

    def gsi(self, dev: IbDevice) -> Gsi:
        g = self._gsi.get(dev.name)
        if g is None or g.dev is not dev:
            g = self._gsi[dev.name] = Gsi(dev)
        return g

    def device_of(self, ip: str) -> IbDevice | None:
        """The device whose netdev has address `ip` (rdma_translate_ip)."""
        for dev in self.kernel.devices.values():
            if dev.hw.fn.netdev.ip == ip:
                return dev
        return None

    def _route(self, dst: str) -> IbDevice | None:
        """The device that reaches `dst`: its own address (a local route), or one whose
        host knows the neighbour."""
        own = self.device_of(dst)
        if own is not None:
            return own
        if dst in self.host.neighbours:
            return next(iter(self.kernel.devices.values()), None)
        return None

    def _alloc_port(self, ps: int, port: int) -> int:
        used = self._ports.setdefault(ps, set())
        if port:
            if port in used:
                raise CmError(f"port {port} is in use", errno.EADDRINUSE)
        else:
            while self._next_port in used:
                self._next_port += 1
            port = self._next_port
            self._next_port += 1
        used.add(port)
        return port

    def _new_comm_id(self, cid: CmId) -> None:
        """The next free communication ID (ib_cm: xa_alloc_cyclic, then ^ random_id_operand);
        never 0, which a REQ's answer uses for "not known yet"."""
        while True:
            self._id_next = (self._id_next + 1) & 0xFFFFFFFF
            comm = self._id_next ^ self._id_operand
            if comm and comm not in self.ids:
                break
        cid.local_comm_id = comm
        self.ids[comm] = cid

    def _new_tid(self) -> int:
        self._tids = (self._tids + 1) & 0xFFFFFFFFFFFFFFFF
        return self._tids

    # -- calls (ucma's commands) ------------------------------------------------------------

    def create_id(self, channel: EventChannel, ps: int) -> CmId:
        if ps not in (m.PortSpace.TCP, m.PortSpace.UDP):
            raise CmError(f"port space 0x{ps:x} is not supported", errno.EPROTONOSUPPORT)
        channel.ids += 1
        return CmId(self, channel, ps)

    def bind(self, cid: CmId, ip: str, port: int) -> None:
        if cid.state is not CmState.IDLE:
            raise CmError(f"rdma_bind_addr on an ID in state {cid.state.value}", errno.EINVAL)
        ip = "0.0.0.0" if _any(ip) else _ip(ip)
        dev = None
        if not _any(ip):
            dev = self.device_of(ip)
            if dev is None:
                raise CmError(f"{ip} is not an address of this host", errno.EADDRNOTAVAIL)
        cid.src_port = self._alloc_port(cid.ps, port)
        cid.src_ip, cid.dev, cid.state = ip, dev, CmState.ADDR_BOUND

    def resolve_addr(self, cid: CmId, src: str, dst: str) -> None:
        """rdma_resolve_addr: bind (if not yet), find the device that reaches `dst`; the
        result comes as ADDR_RESOLVED or ADDR_ERROR (status -EHOSTUNREACH)."""
        dst = _ip(dst)
        if cid.state is CmState.IDLE:
            self.bind(cid, src or "", 0)
        elif cid.state is not CmState.ADDR_BOUND:
            raise CmError(f"rdma_resolve_addr in state {cid.state.value}", errno.EINVAL)
        group = ipaddress.ip_address(dst).is_multicast  # a group: the bound device sends
        dev = cid.dev or self._route(dst)
        cid.dst_ip = dst
        if dev is None or (cid.dev is not None and self._route(dst) is None and not group):
            self._event(cid, EV.RDMA_CM_EVENT_ADDR_ERROR, -errno.EHOSTUNREACH)
            return
        cid.dev = dev
        if _any(cid.src_ip):
            cid.src_ip = dev.hw.fn.netdev.ip
        cid.state = CmState.ADDR_RESOLVED
        self._event(cid, EV.RDMA_CM_EVENT_ADDR_RESOLVED)

    def resolve_route(self, cid: CmId) -> None:
        """rdma_resolve_route: on RoCE the route is the neighbour's MAC and the path MTU of
        the port (cma_resolve_iboe_route)."""
        if cid.state is not CmState.ADDR_RESOLVED or cid.dev is None:
            raise CmError(f"rdma_resolve_route in state {cid.state.value}", errno.EINVAL)
        cid.remote_gid = ip_gid(cid.dst_ip)
        try:
            cid.dev.resolve_av(1, 1, cid.remote_gid, cid.gsi.sgid_index(), 0, 64, 0, 0)
        except KernelError as e:
            self._event(cid, EV.RDMA_CM_EVENT_ROUTE_ERROR, -e.errno)
            return
        cid.path_mtu = cid.dev.query_port(1).active_mtu
        cid.state = CmState.ROUTE_RESOLVED
        self._event(cid, EV.RDMA_CM_EVENT_ROUTE_RESOLVED)

    def listen(self, cid: CmId, backlog: int) -> None:
        if cid.state is CmState.IDLE:
            self.bind(cid, "", 0)
        if cid.state is not CmState.ADDR_BOUND:
            raise CmError(f"rdma_listen in state {cid.state.value}", errno.EINVAL)
        # ucma_listen: a backlog outside 1..max_backlog is max_backlog.
        cid.state = CmState.LISTEN
        cid.backlog = backlog if 0 < backlog < MAX_BACKLOG else MAX_BACKLOG
        self.listeners.setdefault((cid.ps, cid.src_port), []).append(cid)

    def set_ack_timeout(self, cid: CmId, timeout: int) -> None:
        if not 0 <= timeout <= 31:
            raise CmError(f"ack timeout {timeout} (0..31)", errno.EINVAL)
        cid.ack_timeout = timeout

    def connect(self, cid: CmId, p: ConnInfo) -> None:
        """rdma_connect: REQ (RC) or SIDR_REQ (UD), with rdma_cm's header first in the
        private data."""
        if cid.state is not CmState.ROUTE_RESOLVED:
            raise CmError(f"rdma_connect in state {cid.state.value}", errno.EINVAL)
        hdr = m.cma_hdr(cid.src_ip, cid.dst_ip, cid.src_port)
        sid = m.service_id(cid.ps, cid.dst_port)
        self._new_comm_id(cid)
        cid.tid = self._new_tid()
        if cid.ud:
            msg: m.Message = m.SidrReq(cid.local_comm_id, sid, private_data=hdr + p.private_data)
            _check_len(p.private_data, m.SIDR_REQ_PRIVATE - CMA_HDR)
            self._send(cid, m.AttrId.SIDR_REQ, msg)
            cid.state = CmState.SIDR_REQ_SENT
            return
        _check_len(p.private_data, m.REQ_PRIVATE - CMA_HDR)
        cid.qpn, cid.psn = p.qp_num, self._rng.randrange(1 << 24)
        cid.responder_resources, cid.initiator_depth = p.responder_resources, p.initiator_depth
        cid.retry_count, cid.rnr_retry_count = p.retry_count, p.rnr_retry_count
        dev = cid.dev
        assert dev is not None
        req = m.Req(cid.local_comm_id, sid, self._guid(dev), cid.qpn, cid.psn,
                    dev.hw.gid(cid.gsi.sgid_index())[0], cid.remote_gid,
                    responder_resources=p.responder_resources,
                    initiator_depth=p.initiator_depth, remote_cm_timeout=CM_RESPONSE_TIMEOUT,
                    local_cm_timeout=CM_RESPONSE_TIMEOUT, retry_count=p.retry_count,
                    rnr_retry_count=p.rnr_retry_count, max_cm_retries=MAX_CM_RETRIES,
                    srq=p.srq, path_mtu=cid.path_mtu, local_ack_timeout=self._timeout(cid),
                    private_data=hdr + p.private_data)
        self._send(cid, m.AttrId.REQ, req)
        cid.state = CmState.REQ_SENT

    def accept(self, cid: CmId, p: ConnInfo) -> None:
        if cid.state is CmState.SIDR_REQ_RCVD:
            _check_len(p.private_data, m.SIDR_REP_PRIVATE)
            self._send(cid, m.AttrId.SIDR_REP, m.SidrRep(
                cid.remote_comm_id, m.SidrStatus.VALID, p.qp_num,
                m.service_id(cid.ps, cid.src_port), p.qkey or RDMA_UDP_QKEY, p.private_data))
            cid.qpn, cid.state = p.qp_num, CmState.ESTABLISHED
            return
        if cid.state is not CmState.REQ_RCVD:
            raise CmError(f"rdma_accept in state {cid.state.value}", errno.EINVAL)
        _check_len(p.private_data, m.REP_PRIVATE)
        cid.qpn = p.qp_num  # (its starting PSN was drawn with the ID: the QP may be in RTS)
        # What this side accepts is bounded by what the active side asked for.
        cid.responder_resources = min(p.responder_resources, cid.responder_resources)
        cid.initiator_depth = min(p.initiator_depth, cid.initiator_depth)
        dev = cid.dev
        assert dev is not None
        self._send(cid, m.AttrId.REP, m.Rep(
            cid.local_comm_id, cid.remote_comm_id, cid.qpn, cid.psn, self._guid(dev),
            cid.responder_resources, cid.initiator_depth, rnr_retry_count=p.rnr_retry_count,
            srq=p.srq, private_data=p.private_data))
        cid.state = CmState.REP_SENT

    def reject(self, cid: CmId, private_data: bytes) -> None:
        if cid.state is CmState.SIDR_REQ_RCVD:
            _check_len(private_data, m.SIDR_REP_PRIVATE)
            self._send(cid, m.AttrId.SIDR_REP, m.SidrRep(
                cid.remote_comm_id, m.SidrStatus.REJECTED, 0,
                m.service_id(cid.ps, cid.src_port), 0, private_data))
        elif cid.state is CmState.REQ_RCVD:
            _check_len(private_data, m.REJ_PRIVATE)
            self._send(cid, m.AttrId.REJ, m.Rej(cid.local_comm_id, cid.remote_comm_id,
                                                m.RejReason.CONSUMER_DEFINED, 0,
                                                private_data=private_data))
            self.counters.rej_sent += 1
        else:
            raise CmError(f"rdma_reject in state {cid.state.value}", errno.EINVAL)
        cid.state = CmState.REJECTED

    def establish(self, cid: CmId) -> None:
        """RTU: the active side's QP is ready (rdma_establish, or librdmacm after it moved
        the ID's own QP to RTS)."""
        if cid.state is not CmState.REP_RCVD:
            raise CmError(f"rdma_establish in state {cid.state.value}", errno.EINVAL)
        self._send(cid, m.AttrId.RTU, m.Rtu(cid.local_comm_id, cid.remote_comm_id))
        cid.state = CmState.ESTABLISHED

    def disconnect(self, cid: CmId) -> None:
        if cid.state is CmState.ESTABLISHED and not cid.ud:
            cid.tid = self._new_tid()
            self._send(cid, m.AttrId.DREQ, m.Dreq(cid.local_comm_id, cid.remote_comm_id,
                                                  cid.remote_qpn))
            cid.state = CmState.DREQ_SENT
        elif cid.state is CmState.DREQ_RCVD:
            self._send(cid, m.AttrId.DREP, m.Drep(cid.local_comm_id, cid.remote_comm_id))
            cid.state = CmState.TIMEWAIT
        elif cid.state not in (CmState.DREQ_SENT, CmState.TIMEWAIT):
            raise CmError(f"rdma_disconnect in state {cid.state.value}", errno.EINVAL)

    def destroy(self, cid: CmId) -> None:
        """rdma_destroy_id: what the connection's state calls for goes to the peer first
        (a DREQ when established, a REJ for a request never answered)."""
        try:
            if cid.state in (CmState.ESTABLISHED, CmState.DREQ_RCVD) and not cid.ud:
                self.disconnect(cid)
            elif cid.state in (CmState.REQ_RCVD, CmState.SIDR_REQ_RCVD):
                self.reject(cid, b"")
        except KernelError:
            pass  # the peer is unreachable: nothing more to tell it
        if cid.state is CmState.LISTEN:
            lst = self.listeners.get((cid.ps, cid.src_port), [])
            if cid in lst:
                lst.remove(cid)
        if cid.src_port and cid.listen is None:
            self._ports.get(cid.ps, set()).discard(cid.src_port)
        self.ids.pop(cid.local_comm_id, None)
        cid.channel.ids -= 1
        cid.state = CmState.DESTROYED

    def init_qp_attr(self, cid: CmId, state: QpState) -> tuple[dict[str, object], int]:
        """rdma_init_qp_attr: the attributes (hwif.Qpc field names, plus 'dgid') and mask of
        the QP's move to `state` for this connection (ib_cm_init_qp_attr, and
        cma_ib_init_qp_attr for UD and for an RC QP before the connection exists)."""
        M = QpAttrMask
        a: dict[str, object] = {"state": state}
        if state is QpState.INIT:
            mask = M.STATE | M.PKEY_INDEX | M.PORT
            if cid.ud:
                a["qkey"] = RDMA_UDP_QKEY
                return a, int(mask | M.QKEY)
            access = int(Access.LOCAL_WRITE | Access.REMOTE_WRITE)
            if cid.responder_resources:
                access |= int(Access.REMOTE_READ | Access.REMOTE_ATOMIC)
            a["access"] = access if cid.remote_qpn else 0
            return a, int(mask | M.ACCESS_FLAGS)
        if cid.ud:
            if state is QpState.RTS:
                a["sq_psn"] = 0
                return a, int(M.STATE | M.SQ_PSN)
            return a, int(M.STATE)
        if not cid.remote_qpn:
            raise CmError("the connection's QP attributes are not known yet", errno.EINVAL)
        if state is QpState.RTR:
            a.update(path_mtu=cid.path_mtu, dest_qpn=cid.remote_qpn, rq_psn=cid.remote_psn,
                     max_dest_rd_atomic=cid.responder_resources, min_rnr_timer=0,
                     dgid=cid.remote_gid, sgid_index=cid.gsi.sgid_index())
            return a, int(M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN |
                          M.MAX_DEST_RD_ATOMIC | M.MIN_RNR_TIMER)
        if state is QpState.RTS:
            a.update(sq_psn=cid.psn, timeout=self._timeout(cid), retry_cnt=cid.retry_count,
                     rnr_retry=cid.rnr_retry_count, max_rd_atomic=cid.initiator_depth)
            return a, int(M.STATE | M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY | M.SQ_PSN |
                          M.MAX_QP_RD_ATOMIC)
        if state is QpState.ERR:
            return a, int(M.STATE)
        raise CmError(f"no CM attributes for QP state {state.name}", errno.EINVAL)

    # -- the wire ---------------------------------------------------------------------------

    @staticmethod
    def _guid(dev: IbDevice) -> int:
        mac = int(dev.hw.fn.netdev.mac.replace(":", ""), 16)
        return _CA_GUID_BASE | (mac & 0xFFFFFFFF)

    @staticmethod
    def _timeout(cid: CmId) -> int:
        return DEFAULT_ACK_TIMEOUT if cid.ack_timeout is None else cid.ack_timeout

    def _send(self, cid: CmId, attr: m.AttrId, msg: m.Message) -> None:
        self.counters.mads_sent += 1
        dgid = cid.remote_gid or ip_gid(cid.dst_ip)
        raw = m.Mad(attr, cid.tid, msg).pack()
        cid.gsi.send(dgid, raw)
        if attr in _ANSWERED:
            # The peer's CM answers within its response timeout, plus the way there and back
            # (cm_ack_timeout's packet life): ~4.3 s each with rdma_cm's 20.
            cid.pending = Pending(attr, raw, dgid, self.host.env.now + 2 * response_timeout_ns(
                CM_RESPONSE_TIMEOUT), MAX_CM_RETRIES)
        else:
            cid.pending = None

    def next_timer(self) -> float:
        """When the next request is due again (inf: none is waiting for an answer)."""
        return min((c.pending.due for c in self.ids.values() if c.pending is not None),
                   default=float("inf"))

    def _timers(self) -> None:
        """Resend the requests whose answer is late; give up on those out of retries, as
        ib_cm does (REQ and REP: a REJ with reason Timeout, and the ID is unreachable;
        DREQ: the connection is down anyway; SIDR_REQ: unreachable)."""
        now = self.host.env.now
        for cid in list(self.ids.values()):
            p = cid.pending
            if p is None or p.due > now:
                continue
            if p.left > 0:
                p.left -= 1
                p.sent += 1
                p.due = now + 2 * response_timeout_ns(CM_RESPONSE_TIMEOUT)
                self.counters.mads_resent += 1
                with contextlib.suppress(KernelError):
                    cid.gsi.send(p.dgid, p.mad)
                continue
            cid.pending = None
            self.counters.timeouts += 1
            if p.attr is m.AttrId.DREQ:
                cid.state = CmState.TIMEWAIT
                self._event(cid, EV.RDMA_CM_EVENT_DISCONNECTED, -errno.ETIMEDOUT)
                continue
            if p.attr in (m.AttrId.REQ, m.AttrId.REP):
                with contextlib.suppress(KernelError):
                    self._send(cid, m.AttrId.REJ, m.Rej(
                        cid.local_comm_id, cid.remote_comm_id, m.RejReason.TIMEOUT,
                        0 if p.attr is m.AttrId.REQ else 1))
            cid.state = CmState.REJECTED
            self._event(cid, EV.RDMA_CM_EVENT_UNREACHABLE, -errno.ETIMEDOUT)

    def _reply(self, gsi: Gsi, sgid: bytes, tid: int, attr: m.AttrId, msg: m.Message) -> None:
        self.counters.mads_sent += 1
        with contextlib.suppress(KernelError):  # no route back: the requester times out
            gsi.send(sgid, m.Mad(attr, tid, msg).pack())

    def _event(self, cid: CmId, ev: EV, status: int = 0, **kw: object) -> None:
        cid.channel.events.append(CmEvent(ev, cid, status, **kw))  # type: ignore[arg-type]

    def service(self) -> int:
        """Handle the MADs that arrived on this host's QP1s; returns how many. (The kernel
        does this from the QP1 CQ's completion interrupt; here whoever waits on the CM runs
        it, which changes no simulated time: MADs are taken when they are there.)"""
        n = 0
        self._timers()
        for g in list(self._gsi.values()):
            for r in g.poll():
                n += 1
                self.receive(g, r.sgid, r.mad)
        return n

    def receive(self, g: Gsi, sgid: bytes, raw: bytes) -> None:
        """One MAD that arrived on `g` from `sgid`. Whatever it holds, the outcome is handled
        or counted (mads_malformed: not a CM message this CM speaks; mads_unmatched: valid,
        but for no connection in a state to take it), never an exception: one packet from
        the network must not take down the programs waiting on the CM."""
        self.counters.mads_received += 1
        try:
            mad = m.parse(raw)
        except m.MadError:
            self.counters.mads_malformed += 1
            return
        self._handle(g, sgid, mad)

    def _handle(self, g: Gsi, sgid: bytes, mad: m.Mad) -> None:  # noqa: C901
        msg = mad.msg
        if isinstance(msg, m.Req):
            self._on_req(g, sgid, mad.tid, msg)
        elif isinstance(msg, m.SidrReq):
            self._on_sidr_req(g, sgid, mad.tid, msg)
        elif isinstance(msg, m.SidrRep):
            cid = self.ids.get(msg.request_id)
            if cid is None or cid.state is not CmState.SIDR_REQ_SENT or \
                    cid.remote_gid != sgid:
                self.counters.mads_unmatched += 1
                return
            cid.pending = None
            if msg.status == m.SidrStatus.VALID:
                cid.state = CmState.ESTABLISHED
                cid.remote_qpn, cid.remote_qkey = msg.qpn, msg.qkey
                self._event(cid, EV.RDMA_CM_EVENT_ESTABLISHED, private_data=msg.private_data,
                            qp_num=msg.qpn, qkey=msg.qkey, ah_dgid=cid.remote_gid,
                            ah_sgid_index=cid.gsi.sgid_index())
            else:
                cid.state = CmState.REJECTED
                # cma_sidr_rep_handler: a refused lookup is UNREACHABLE (a rejection by the
                # consumer, REJECTED) with the SIDR status
                ev = EV.RDMA_CM_EVENT_REJECTED if msg.status == m.SidrStatus.REJECTED else \
                    EV.RDMA_CM_EVENT_UNREACHABLE
                self._event(cid, ev, msg.status, private_data=msg.private_data)
        else:
            self._on_conn_msg(g, sgid, mad, msg)

    def _conn_of(self, sgid: bytes, msg: m.Message) -> CmId | None:
        """The connection a REP, REJ, RTU, DREQ or DREP names, if it is that connection's in
        every field ib_cm checks: our communication ID (the message's remote one) and the
        peer's (its local one) once we know it (cm_acquire_id), the sender's GID against the
        connection's path, and a DREQ's QPN against ours (cm_dreq_handler). Anything else is
        not for the connection, whoever sent it."""
        cid = self.ids.get(getattr(msg, "remote_comm_id", 0))
        if cid is None or cid.remote_gid != sgid:
            return None
        if cid.remote_comm_id and getattr(msg, "local_comm_id", 0) != cid.remote_comm_id:
            return None
        if isinstance(msg, m.Dreq) and msg.remote_qpn != cid.qpn:
            return None
        return cid

    def _on_conn_msg(self, g: Gsi, sgid: bytes, mad: m.Mad, msg: m.Message) -> None:
        cid = self._conn_of(sgid, msg)
        if cid is None:
            self.counters.mads_unmatched += 1
            if isinstance(msg, m.Rep):  # a REP for no connection: stale (IBA 12.6.8)
                self._reply(g, sgid, mad.tid, m.AttrId.REJ, m.Rej(
                    0, msg.local_comm_id, m.RejReason.STALE_CONN, 1))
            return
        if isinstance(msg, m.Rep) and cid.state is CmState.ESTABLISHED and \
                cid.remote_comm_id == msg.local_comm_id:
            # our RTU was lost: the REP came again (cm_dup_rep_handler resends the RTU)
            self._reply(g, sgid, mad.tid, m.AttrId.RTU,
                        m.Rtu(cid.local_comm_id, cid.remote_comm_id))
            return
        if cid.pending is not None and mad.attr in _ANSWERS[cid.pending.attr]:
            cid.pending = None  # the answer to what we sent
        if isinstance(msg, m.Rep) and cid.state is CmState.REQ_SENT:
            cid.remote_comm_id, cid.remote_qpn, cid.remote_psn = \
                msg.local_comm_id, msg.local_qpn, msg.starting_psn
            # The passive side's resources bound ours (what it reads from us, we answer).
            cid.responder_resources = min(cid.responder_resources, msg.initiator_depth)
            cid.initiator_depth = min(cid.initiator_depth, msg.responder_resources)
            cid.rnr_retry_count = msg.rnr_retry_count
            cid.state = CmState.REP_RCVD
            self._event(cid, EV.RDMA_CM_EVENT_CONNECT_RESPONSE, private_data=msg.private_data,
                        responder_resources=msg.responder_resources,
                        initiator_depth=msg.initiator_depth, srq=int(msg.srq),
                        qp_num=msg.local_qpn, rnr_retry_count=msg.rnr_retry_count)
        elif isinstance(msg, m.Rej) and cid.state in (CmState.REQ_SENT, CmState.REP_SENT):
            self.counters.rej_received += 1
            cid.state = CmState.REJECTED
            self._event(cid, EV.RDMA_CM_EVENT_REJECTED, msg.reason,
                        private_data=msg.private_data)
        elif isinstance(msg, m.Rtu) and mad.attr is m.AttrId.RTU and \
                cid.state is CmState.REP_SENT:
            cid.state = CmState.ESTABLISHED
            self._event(cid, EV.RDMA_CM_EVENT_ESTABLISHED, private_data=msg.private_data)
        elif isinstance(msg, m.Dreq):
            if cid.state is CmState.ESTABLISHED:
                cid.state = CmState.DREQ_RCVD
                cid.tid = mad.tid
                self._event(cid, EV.RDMA_CM_EVENT_DISCONNECTED, private_data=msg.private_data)
            elif cid.state in (CmState.DREQ_SENT, CmState.TIMEWAIT):
                # both sides disconnected at once (or our DREP was lost): answer it
                self._reply(g, sgid, mad.tid, m.AttrId.DREP,
                            m.Drep(cid.local_comm_id, cid.remote_comm_id))
            else:
                self.counters.mads_unmatched += 1
        elif mad.attr is m.AttrId.DREP and cid.state is CmState.DREQ_SENT:
            cid.state = CmState.TIMEWAIT
            self._event(cid, EV.RDMA_CM_EVENT_DISCONNECTED, private_data=msg.private_data)
        else:
            self.counters.mads_unmatched += 1

    def _match(self, g: Gsi, sid: int, private: bytes, ud: bool
               ) -> tuple[CmId | None, tuple[str, str, int] | None]:
        """The listener a request is for (by the Service ID's port space and port, and the
        destination address in rdma_cm's header), and that header's addresses. A REQ is for
        a connected listener only and a SIDR_REQ (`ud`) for a UD one (rdma_cm's
        cma_ib_check_req_qp_type): the other kind is answered as for no listener, and
        counted (wrong_qp_type)."""
        try:
            src = m.parse_cma_hdr(private)
        except m.MadError:
            return None, None
        ps, port = m.split_service_id(sid)
        for lid in self.listeners.get((ps, port), []):
            if _any(lid.src_ip) or (lid.src_ip == src[1] and lid.dev is g.dev):
                if lid.ud != ud:
                    self.counters.wrong_qp_type += 1
                    return None, src
                return lid, src
        return None, src

    def _backlog_full(self, lid: CmId) -> bool:
        """Whether listener `lid` already holds `backlog` connection requests its process has
        not taken. A request beyond them is dropped without an answer and without an ID
        (ucma_event_handler's backlog, and ib_cm's "do not reject to allow future retries"):
        the active side sends it again after its response timeout."""
        held = sum(1 for ev in lid.channel.events
                   if ev.listen_id is lid and ev.event is EV.RDMA_CM_EVENT_CONNECT_REQUEST)
        if held < lid.backlog:
            return False
        self.counters.backlog_drops += 1
        return True

    def _child(self, lid: CmId, g: Gsi, sgid: bytes, tid: int, src: tuple[str, str, int]
               ) -> CmId:
        src_ip, dst_ip, src_port = src
        c = CmId(self, lid.channel, lid.ps, dev=g.dev, src_ip=dst_ip, src_port=lid.src_port,
                 dst_ip=src_ip, dst_port=src_port, tid=tid, remote_gid=sgid, listen=lid,
                 ack_timeout=lid.ack_timeout)
        c.path_mtu = g.dev.query_port(1).active_mtu
        c.psn = self._rng.randrange(1 << 24)
        lid.channel.ids += 1
        self._new_comm_id(c)
        return c

    def _on_req(self, g: Gsi, sgid: bytes, tid: int, req: m.Req) -> None:
        for c in self.ids.values():  # a retransmitted REQ for a connection we have
            if c.remote_comm_id == req.local_comm_id and c.remote_gid == sgid:
                self.counters.duplicates += 1
                if c.state is CmState.REP_SENT and c.pending is not None:
                    # our REP was lost: send it again now (cm_dup_req_handler)
                    with contextlib.suppress(KernelError):
                        g.send(sgid, c.pending.mad)
                return
        lid, src = self._match(g, req.service_id, req.private_data, ud=False)
        if lid is None or src is None:
            self.counters.rej_sent += 1
            self._reply(g, sgid, tid, m.AttrId.REJ, m.Rej(
                0, req.local_comm_id, m.RejReason.INVALID_SERVICE_ID, 0))
            return
        if self._backlog_full(lid):
            return
        c = self._child(lid, g, sgid, tid, src)
        c.remote_comm_id, c.remote_qpn, c.remote_psn = \
            req.local_comm_id, req.local_qpn, req.starting_psn
        # Seen from here: what we answer is what they initiate, and the reverse.
        c.responder_resources, c.initiator_depth = req.initiator_depth, req.responder_resources
        c.retry_count, c.rnr_retry_count = req.retry_count, req.rnr_retry_count
        c.path_mtu = min(c.path_mtu, req.path_mtu)
        c.state = CmState.REQ_RCVD
        self._event(c, EV.RDMA_CM_EVENT_CONNECT_REQUEST, private_data=req.private_data[CMA_HDR:],
                    listen_id=lid, responder_resources=req.initiator_depth,
                    initiator_depth=req.responder_resources, retry_count=req.retry_count,
                    rnr_retry_count=req.rnr_retry_count, srq=int(req.srq),
                    qp_num=req.local_qpn)

    def _on_sidr_req(self, g: Gsi, sgid: bytes, tid: int, req: m.SidrReq) -> None:
        lid, src = self._match(g, req.service_id, req.private_data, ud=True)
        if lid is None or src is None:
            self._reply(g, sgid, tid, m.AttrId.SIDR_REP, m.SidrRep(
                req.request_id, m.SidrStatus.SERVICE_ID_NOT_SUPPORTED, 0, req.service_id, 0))
            return
        if self._backlog_full(lid):
            return
        c = self._child(lid, g, sgid, tid, src)
        c.remote_comm_id = req.request_id
        c.state = CmState.SIDR_REQ_RCVD
        self._event(c, EV.RDMA_CM_EVENT_CONNECT_REQUEST, private_data=req.private_data[CMA_HDR:],
                    listen_id=lid)


def _check_len(data: bytes, limit: int) -> None:
    if len(data) > limit:
        raise CmError(f"private data of {len(data)} bytes (at most {limit})", errno.EINVAL)


def cm_of(kernel: Kernel) -> CmKernel:
    """The CM of a host's kernel, loaded at first use (modprobe rdma_cm: a world that never
    uses the CM has no QP1, and runs exactly as it did before there was one)."""
    cm = getattr(kernel, "cm", None)
    if cm is None:
        cm = kernel.cm = CmKernel(kernel)  # type: ignore[attr-defined]
    return cm
