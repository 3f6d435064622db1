"""librdmacm with pyverbs.cmid's names: CMID, CMEventChannel, CMEvent, ConnParam, UDParam.

The kernel's connection manager (nicsim.driver.kernel.cm.cma) speaks the CM protocol in MADs
on QP1; this library does what librdmacm does in user space around it:

- the QP of an ID (rdma_create_qp): its CQs when none are given, and its moves INIT, RTR, RTS
  with the attributes the kernel derives from the REQ/REP (rdma_init_qp_attr); on the active
  side a CONNECT_RESPONSE for an ID with a QP becomes ESTABLISHED once the QP is in RTS and
  the RTU is sent (ucma_process_conn_resp); rdma_disconnect moves the QP to ERR first;
- synchronous IDs (created from an AddrInfo, rdma_create_ep; no event channel): every call
  that has an outcome waits for its event (rdma_connect, rdma_accept, rdma_get_request), on a
  channel of the ID's own;
- the data-path helpers (rdma_post_send/recv/read/write/ud_send, rdma_get_send/recv_comp,
  rdma_reg_msgs/read/write).

Waiting (CMEvent, the sync calls, get_*_comp) runs the simulated world until the event is
there, taking the MADs that arrived on every QP1 of the world as it goes (the kernel's MAD
handler). When the world is idle and no other side of the program can still act
(nicsim.driver.sched), no event can come: the wait fails with ETIMEDOUT instead of
hanging, as CompChannel.get_cq_event does.

Each flow of control (a thread that `nicsim exec` runs in place of a forked process) opens the
devices for itself, as a process would; its IDs and contexts close when it ends.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import threading
from collections.abc import Callable

from nicsim.driver import sched
from nicsim.driver.cm_enums import (
    RAI_PASSIVE,
    RDMA_OPTION_ID_ACK_TIMEOUT,
    rdma_cm_event_type,
    rdma_cm_join_mc_attr_mask,
    rdma_cm_mc_join_flags,
    rdma_port_space,
)
from nicsim.driver.enums import ibv_access_flags, ibv_qp_type, ibv_send_flags, ibv_wr_opcode
from nicsim.driver.kernel.cm.cma import (
    RDMA_UDP_QKEY,
    CmEvent,
    CmId,
    CmKernel,
    CmState,
    ConnInfo,
    EventChannel,
    cm_of,
)
from nicsim.driver.kernel.cm.gsi import ip_gid
from nicsim.driver.kernel.ib_core import IbDevice, KernelError
from nicsim.driver.user.base import PyverbsCM, PyverbsObject
from nicsim.driver.user.errors import PyverbsError, PyverbsRDMAError, PyverbsUserError
from nicsim.driver.user.process import current as current_process
from nicsim.driver.user.rdma_addrinfo import AddrInfo, fail
from nicsim.driver.user.verbs import (
    AH,
    CQ,
    GID,
    MR,
    PD,
    QP,
    SGE,
    WC,
    AHAttr,
    Context,
    GlobalRoute,
    QPAttr,
    QPInitAttr,
    RecvWR,
    SendWR,
)

from nicsim.host.host import Host
from nicsim.hwif import QpState

EV = rdma_cm_event_type
_SIGNALED = int(ibv_send_flags.IBV_SEND_SIGNALED)
_LOCAL_WRITE = int(ibv_access_flags.IBV_ACCESS_LOCAL_WRITE)
_WAIT_NS = 20_000.0  # how far simulated time runs between looks at the CM's queues
MULTICAST_QPN = 0xFFFFFF  # the destination QPN of a multicast datagram (IBA 10.5.2.2)
_JOIN_FLAGS = frozenset(int(f) for f in rdma_cm_mc_join_flags.__members__.values())


def _kerr(what: str, e: KernelError) -> PyverbsRDMAError:
    return fail(what, str(e), e.errno)


# -- the world the program sees ---------------------------------------------------------------


def _hosts() -> list[Host]:
    seen: dict[int, Host] = {}
    for d in current_process().devices:
        seen.setdefault(id(d.host), d.host)
    return list(seen.values())


def _device_of(ip: str) -> tuple[Host, str] | None:
    """The host and device whose netdev has address `ip`."""
    for d in current_process().devices:
        dev = d.host.kernel.devices.get(d.name)  # type: ignore[attr-defined]
        if dev is not None and dev.hw.fn.netdev.ip == ip:
            return d.host, d.name
    return None


def _service() -> None:
    for h in _hosts():
        cm_of(h.kernel).service()  # type: ignore[arg-type]


def _wait(ch: EventChannel, match: Callable[[CmEvent], bool], what: str) -> CmEvent:
    """The first event on `ch` that `match`es, running the world until it is there."""
    started = sched.since()
    hosts = _hosts()
    env = hosts[0].env
    while True:
        _service()
        for ev in ch.events:
            if match(ev):
                ch.events.remove(ev)
                return ev
        if ch.closed:
            raise fail(what, "the event channel is closed", errno.EBADF)
        due = min(cm_of(h.kernel).next_timer() for h in hosts)  # type: ignore[arg-type]
        if env.peek() != float("inf"):
            hosts[0].poll_wait(0.0, 0, 0, max(min(_WAIT_NS, due - env.now), 1.0))
        elif due != float("inf"):
            sched.advance_to(hosts[0], due)  # (other sides' wake-ups come first)
        elif not sched.wait_for_others(started):
            raise fail(what, "no CM event can arrive: the simulated world is idle and no "
                       "other side of the program can act", errno.ETIMEDOUT)


# -- a flow of control's own devices (what a process opens) ----------------------------------


class _Owner:
    def __init__(self) -> None:
        # By the kernel's device object, not its name: a program (or a test) that builds
        # another world has devices of the same names in it.
        self.devices: dict[IbDevice, tuple[Context, PD]] = {}
        self.ids: list[CMID] = []
        self.channels: list[CMEventChannel] = []

    def device(self, dev: IbDevice) -> tuple[Context, PD]:
        got = self.devices.get(dev)
        if got is None or got[0].closed:
            ctx = Context(name=dev.name, host=dev.hw.host,
                          aspace=current_process().aspace(dev.hw.host))
            got = self.devices[dev] = (ctx, PD(ctx))
        return got

    def close(self) -> None:
        """Process exit: the IDs (the kernel tells their peers), then the devices. Nothing
        here can fail the exit (an object whose world is gone is simply dropped)."""
        for obj in [*reversed(self.ids), *self.channels,
                    *(ctx for ctx, _ in self.devices.values())]:
            with contextlib.suppress(PyverbsError, KernelError):
                obj.close()


_owners: dict[int, _Owner] = {}


def _owner() -> _Owner:
    me = threading.get_ident()
    o = _owners.get(me)
    if o is None:
        o = _owners[me] = _Owner()

        def gone() -> None:
            _owners.pop(me, None)
            o.close()

        sched.at_exit(gone)
    return o


# -- attribute objects ------------------------------------------------------------------------


class ConnParam(PyverbsObject):
    """rdma_conn_param: ConnParam(resources=1, depth=1, flow_control=0, retry=5,
    rnr_retry=5, srq=0, qp_num=0, data_len=0)."""

    def __init__(self, resources: int = 1, depth: int = 1, flow_control: int = 0,
                 retry: int = 5, rnr_retry: int = 5, srq: int = 0, qp_num: int = 0,
                 data_len: int = 0) -> None:
        self.responder_resources, self.initiator_depth = resources, depth
        self.flow_control, self.retry_count, self.rnr_retry_count = flow_control, retry, \
            rnr_retry
        self.srq, self.qpn = srq, qp_num
        self._room = data_len
        self._data = b""

    @property
    def private_data(self) -> bytes:
        return self._data

    def set_private_data(self, data: bytes) -> None:
        self._data = bytes(data[:self._room])


class JoinMCAttrEx(PyverbsObject):
    """rdma_cm_join_mc_attr_ex."""

    def __init__(self, addr: AddrInfo, comp_mask: int = 0, join_flags: int = 0) -> None:
        if addr is None:
            raise TypeError("addr must be an AddrInfo")
        self.addr, self.comp_mask, self.join_flags = addr, comp_mask, join_flags


class CMEventChannel(PyverbsCM):
    """rdma_create_event_channel."""

    def __init__(self) -> None:
        self.ch = EventChannel()
        _owner().channels.append(self)

    def close(self) -> None:
        self.ch.closed = True
        self.ch.events.clear()


_ids: dict[int, CMID] = {}  # the CMID object of each kernel ID, by id()


class CMEvent(PyverbsCM):
    """rdma_get_cm_event: CMEvent(channel) waits for the channel's next event."""

    def __init__(self, channel: CMEventChannel) -> None:
        if not isinstance(channel, CMEventChannel):
            raise PyverbsUserError(f"a CMEvent comes from a CMEventChannel, not {type(channel)}")
        self.ev = _get_event(channel.ch)
        self.acked = False

    @property
    def event_type(self) -> int:
        return int(self.ev.event)

    @property
    def private_data(self) -> bytes:
        return self.ev.private_data

    @property
    def status(self) -> int:
        return self.ev.status

    def event_str(self) -> str:
        return "" if self.acked else EV(self.ev.event).name

    def ack_cm_event(self) -> None:
        self.acked = True

    def close(self) -> None:
        self.acked = True


def _get_event(ch: EventChannel) -> CmEvent:
    """The next event, after what librdmacm does with it before the program sees it."""
    ev = _wait(ch, lambda e: True, "Failed to create CMEvent")
    cmid = _ids.get(id(ev.id))
    if ev.event == EV.RDMA_CM_EVENT_CONNECT_RESPONSE and cmid is not None and \
            cmid.qp is not None:
        try:
            cmid._to_rts()
            ev.id.cm.establish(ev.id)
            ev.event = EV.RDMA_CM_EVENT_ESTABLISHED
        except PyverbsRDMAError as e:  # ucma_process_conn_resp's failure path
            ev.event, ev.status = EV.RDMA_CM_EVENT_CONNECT_ERROR, -e.error_code
        except KernelError as e:
            ev.event, ev.status = EV.RDMA_CM_EVENT_CONNECT_ERROR, -e.errno
    return ev


class UDParam(PyverbsObject):
    """rdma_ud_param of an ESTABLISHED (or MULTICAST_JOIN) event: the remote QPN, Q_Key and
    an address to reach it."""

    def __init__(self, cm_event: CMEvent) -> None:
        if not isinstance(cm_event, CMEvent):
            raise TypeError("UDParam takes a CMEvent")
        ev = cm_event.ev
        self.qp_num, self.qkey = ev.qp_num, ev.qkey
        self._dgid, self._sgid_index = ev.ah_dgid, ev.ah_sgid_index

    @property
    def ah_attr(self) -> AHAttr:
        return AHAttr(is_global=1, port_num=1,
                      gr=GlobalRoute(dgid=GID(self._dgid), sgid_index=self._sgid_index))


# -- the ID -----------------------------------------------------------------------------------


class CMID(PyverbsCM):
    """rdma_cm_id. CMID(AddrInfo, qp_init_attr=None, pd=None): a synchronous endpoint
    (rdma_create_ep); CMID(CMEventChannel, port_space=...): an asynchronous ID;
    CMID(CMEvent, listen_id=...): the ID of a connection request."""

    def __init__(self, creator: object = None, qp_init_attr: QPInitAttr | None = None,
                 pd: PD | None = None, port_space: int = rdma_port_space.RDMA_PS_TCP,
                 listen_id: CMID | None = None) -> None:
        self._kid: CmId | None = None
        self._sync: EventChannel | None = None
        self.event_channel: CMEventChannel | None = None
        self.ctx: Context | None = None
        self.pd: PD | None = pd
        self.qp: QP | None = None
        self._own_cqs: list[CQ] = []
        self._mrs: list[MR] = []
        self._ps = int(port_space)
        self._qp_init = qp_init_attr
        self._ai: AddrInfo | None = None
        self._groups: dict[bytes, int] = {}  # joined multicast groups, by GID: join flags
        self._owner = _owner()
        self.closed = False
        if creator is None:
            return
        if isinstance(creator, AddrInfo):
            self._create_ep(creator, qp_init_attr)
        elif isinstance(creator, CMEventChannel):
            self.event_channel = creator
            if self._ps not in (rdma_port_space.RDMA_PS_TCP, rdma_port_space.RDMA_PS_UDP):
                raise fail("Failed to create CM ID", f"port space {self._ps} is not supported "
                           "by nsnic's CM", errno.EPROTONOSUPPORT)
        elif isinstance(creator, CMEvent):
            if listen_id is None:
                raise PyverbsUserError("listen ID not provided")
            self._adopt(creator.ev.id, listen_id)
            self.event_channel = listen_id.event_channel
        else:
            raise PyverbsUserError(f"Cannot create CM ID from {type(creator)}")
        self._owner.ids.append(self)

    # -- plumbing ---------------------------------------------------------------------------

    def _adopt(self, kid: CmId, listen: CMID) -> None:
        self._kid, self._ps = kid, kid.ps
        _ids[id(kid)] = self
        self.ctx, self.pd = listen.ctx, listen.pd
        if kid.dev is not None:
            self.ctx, self.pd = self._owner.device(kid.dev)

    def _channel(self) -> EventChannel:
        if self.event_channel is not None:
            return self.event_channel.ch
        if self._sync is None:
            self._sync = EventChannel()
        return self._sync

    def _kernel_id(self, host: Host) -> CmId:
        if self._kid is None:
            for h in _hosts():  # the CM is loaded on every host before a MAD can go out
                cm_of(h.kernel)  # type: ignore[arg-type]
            self._kid = cm_of(host.kernel).create_id(self._channel(),  # type: ignore[arg-type]
                                                     self._ps)
            _ids[id(self._kid)] = self
        return self._kid

    @property
    def _k(self) -> CmId:
        if self.closed:
            raise PyverbsUserError("this CMID is closed")
        if self._kid is None:
            raise fail("CM ID", "the ID is not bound to an address yet", errno.EINVAL)
        return self._kid

    @property
    def _cm(self) -> CmKernel:
        return self._k.cm

    def _bound_device(self) -> None:
        kid = self._kid
        if kid is not None and kid.dev is not None and self.ctx is None:
            self.ctx, pd = self._owner.device(kid.dev)
            self.pd = self.pd or pd

    def _host_for(self, src: str | None, dst: str | None, what: str) -> Host:
        for ip in (src, dst):
            if ip and ip not in ("0.0.0.0", "::"):
                found = _device_of(ip)
                if found is not None:
                    return found[0]
                if ip == src:
                    raise fail(what, f"{ip} is not an address of the simulated world",
                               errno.EADDRNOTAVAIL)
        return current_process().home

    def _sync_wait(self, what: str, *want: EV) -> CmEvent:
        ev = _get_event(self._channel())
        if ev.event not in want:
            if ev.event == EV.RDMA_CM_EVENT_REJECTED:
                raise fail(what, f"rejected (reason {ev.status})", errno.ECONNREFUSED)
            code = -ev.status if ev.status < 0 else (ev.status or errno.EINVAL)
            raise fail(what, f"{EV(ev.event).name}", code)
        return ev

    # -- properties -------------------------------------------------------------------------

    @property
    def dev_name(self) -> str:
        dev = self._k.dev
        return "" if dev is None else dev.name

    @property
    def port_num(self) -> int:
        return 1 if self._kid is not None and self._kid.dev is not None else 0

    @property
    def context(self) -> Context | None:
        return self.ctx

    @property
    def qpn(self) -> int | None:
        return None if self.qp is None else self.qp.qp_num

    # -- addressing -------------------------------------------------------------------------

    def _create_ep(self, ai: AddrInfo, init: QPInitAttr | None) -> None:
        """rdma_create_ep: passive, bound; active, address and route resolved, and a QP when
        `init` is given."""
        self._ps = ai.port_space
        self._ai = ai
        if ai.flags & RAI_PASSIVE:
            self.bind_addr(ai)
            return
        self.resolve_addr(ai)
        self._sync_wait("Failed to create CM ID", EV.RDMA_CM_EVENT_ADDR_RESOLVED)
        self.resolve_route()
        self._sync_wait("Failed to create CM ID", EV.RDMA_CM_EVENT_ROUTE_RESOLVED)
        self._bound_device()
        if init is not None:
            self.create_qp(init)

    def bind_addr(self, lai: AddrInfo) -> None:
        what = "Failed to Bind ID"
        host = self._host_for(lai.src_addr, None, what)
        try:
            self._cm_bind(host, lai.src_addr or "", lai.src_port)
        except KernelError as e:
            raise _kerr(what, e) from None
        self._bound_device()

    def _cm_bind(self, host: Host, ip: str, port: int) -> None:
        kid = self._kernel_id(host)
        kid.cm.bind(kid, ip, port)

    def resolve_addr(self, rai: AddrInfo, timeout_ms: int = 2000) -> None:
        what = "Failed to Resolve Address"
        if rai.dst_addr is None:
            raise fail(what, "no destination address", errno.EINVAL)
        host = self._host_for(rai.src_addr, rai.dst_addr, what)
        kid = self._kernel_id(host)
        kid.dst_port = rai.dst_port
        try:
            kid.cm.resolve_addr(kid, rai.src_addr or "", rai.dst_addr)
        except KernelError as e:
            raise _kerr(what, e) from None

    def resolve_route(self, timeout_ms: int = 2000) -> None:
        try:
            self._cm.resolve_route(self._k)
        except KernelError as e:
            raise _kerr("Failed to Resolve Route", e) from None
        self._bound_device()

    def resolve_addrinfo(self, node: object = None, service: object = None,
                         port_space: int = 0, flags: int = 0) -> None:
        """rdma_resolve_addrinfo: the AddrInfo for `node`/`service` (ADDRINFO_RESOLVED, or
        ADDRINFO_ERROR when it does not resolve)."""
        ps = int(port_space) or self._ps
        try:
            ai = AddrInfo(src=node, src_service=service, port_space=ps, flags=flags) \
                if flags & RAI_PASSIVE else AddrInfo(dst=node, dst_service=service,
                                                     port_space=ps)
        except PyverbsRDMAError as e:
            ai, err = None, e
        host = self._host_for(None, None if ai is None else (ai.src_addr if flags & RAI_PASSIVE
                                                               else ai.dst_addr), "")
        kid = self._kernel_id(host)
        self._ai = ai
        ch = self._channel()
        if ai is None:
            ch.events.append(CmEvent(EV.RDMA_CM_EVENT_ADDRINFO_ERROR, kid,
                                     -err.error_code))
        else:
            ch.events.append(CmEvent(EV.RDMA_CM_EVENT_ADDRINFO_RESOLVED, kid))

    def query_addrinfo(self) -> AddrInfo:
        if self._ai is None:
            raise fail("Failed to Query AddrInfo", "no address was resolved", errno.EINVAL)
        return self._ai

    # -- connection -------------------------------------------------------------------------

    def listen(self, backlog: int = 0) -> None:
        try:
            self._cm.listen(self._k, backlog)
        except KernelError as e:
            raise _kerr("Listen Failed", e) from None

    def get_request(self) -> CMID:
        """rdma_get_request: the next connection request on this synchronous listener, as a
        new synchronous CMID (with a QP when the listener was made with qp_init_attr)."""
        what = "Failed to get request, no connection established"
        if self.event_channel is not None:
            raise fail(what, "the ID is asynchronous (it has an event channel)", errno.EINVAL)
        ev = self._sync_wait(what, EV.RDMA_CM_EVENT_CONNECT_REQUEST)
        child = CMID()
        child._owner.ids.append(child)
        child._adopt(ev.id, self)
        # rdma_migrate_id: the new ID's events go to a channel of its own
        own = child._channel()
        ev.id.channel = own
        old = self._channel()
        for e in [e for e in old.events if e.id is ev.id]:
            old.events.remove(e)
            own.events.append(e)
        self.ctx, self.pd = child.ctx, child.pd
        if self._qp_init is not None:
            child.create_qp(self._qp_init)
        return child

    def _conn_info(self, param: ConnParam | None) -> ConnInfo:
        assert self.ctx is not None
        top = self.ctx.query_device().max_qp_rd_atom
        ud = self._ps == rdma_port_space.RDMA_PS_UDP
        if param is None:
            param = ConnParam(top, top, 0, 7, 7)
        qpn = self.qp.qp_num if self.qp is not None else param.qpn
        srq = int(self.qp is not None and self.qp.init_attr.srq is not None) \
            if self.qp is not None else int(param.srq)
        return ConnInfo(qpn, ud, min(param.responder_resources, top),
                        min(param.initiator_depth, top), min(param.retry_count, 7),
                        min(param.rnr_retry_count, 7), bool(srq), param.private_data,
                        RDMA_UDP_QKEY if ud else 0)

    def connect(self, param: ConnParam | None = None) -> None:
        what = "Failed to Connect"
        try:
            self._cm.connect(self._k, self._conn_info(param))
        except KernelError as e:
            raise _kerr(what, e) from None
        if self._sync is not None:
            self._sync_wait(what, EV.RDMA_CM_EVENT_ESTABLISHED)

    def accept(self, param: ConnParam | None = None) -> None:
        what = "Failed to Accept Connection"
        kid = self._k
        try:
            if self.qp is not None and not kid.ud:
                self._to_rts()
            kid.cm.accept(kid, self._conn_info(param))
        except KernelError as e:
            raise _kerr(what, e) from None
        if self._sync is not None and not kid.ud:
            self._sync_wait(what, EV.RDMA_CM_EVENT_ESTABLISHED)

    def establish(self) -> None:
        try:
            self._cm.establish(self._k)
        except KernelError as e:
            raise _kerr("Failed to Complete an active connection request", e) from None

    def reject(self, private_data: bytes | None = None) -> None:
        try:
            self._cm.reject(self._k, bytes(private_data or b""))
        except KernelError as e:
            raise _kerr("Failed to Reject Connection", e) from None

    def disconnect(self) -> None:
        kid = self._k
        if self.qp is not None and not kid.ud:
            self._modify(QpState.ERR)  # ucma_shutdown: the QP stops first
        try:
            kid.cm.disconnect(kid)
        except KernelError as e:
            raise _kerr("Failed to Disconnect", e) from None

    def set_option(self, level: int, optname: int, optval: int, optlen: int) -> None:
        if optname != RDMA_OPTION_ID_ACK_TIMEOUT:
            raise PyverbsUserError("Currently only RDMA_OPTION_ID_ACK_TIMEOUT is supported "
                                   "in Pyverbs.")
        try:
            self._cm.set_ack_timeout(self._k, int(optval) & 0xFF)
        except KernelError as e:
            raise _kerr("Failed to set option", e) from None

    def set_local_ece(self, ece: object) -> None:
        raise fail("Failed to set local ECE", "nsnic has no enhanced connection options",
                   errno.EOPNOTSUPP)

    def get_remote_ece(self) -> object:
        raise fail("Failed to get remote ECE", "nsnic has no enhanced connection options",
                   errno.EOPNOTSUPP)

    def join_multicast(self, addr: AddrInfo | None = None, mc_attr: JoinMCAttrEx | None = None,
                       context: int = 0) -> None:
        """rdma_join_multicast[_ex]: on RoCE a join asks nothing of the fabric (no SA, IGMP is
        the netdev's business): the ID's QP is attached to the group (ibv_attach_mcast; not
        for a send-only member) and MULTICAST_JOIN reports how to send to it (QPN 0xFFFFFF,
        the port space's Q_Key, the group's GID)."""
        what = "Failed to Join multicast"
        if addr is None and mc_attr is None:
            raise PyverbsUserError("Join to multicast must have AddrInfo or JoinMCAttrEx "
                                   "arguments")
        flags = int(rdma_cm_mc_join_flags.RDMA_MC_JOIN_FLAG_FULLMEMBER)
        if mc_attr is not None:
            addr = mc_attr.addr
            if mc_attr.comp_mask & rdma_cm_join_mc_attr_mask.RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS:
                flags = int(mc_attr.join_flags)
            if flags not in _JOIN_FLAGS:
                raise fail(what, f"join flags {flags}", errno.EINVAL)
        gid = self._group(addr, what)
        attach = getattr(self.qp, "attach_mcast", None)
        if attach is None:
            raise fail(what, "nsnic's verbs have no multicast attach", errno.EOPNOTSUPP)
        if flags == rdma_cm_mc_join_flags.RDMA_MC_JOIN_FLAG_FULLMEMBER:
            attach(GID(gid))
        self._groups[gid] = flags
        self._channel().events.append(CmEvent(EV.RDMA_CM_EVENT_MULTICAST_JOIN, self._k,
                                              qp_num=MULTICAST_QPN, qkey=RDMA_UDP_QKEY,
                                              ah_dgid=gid,
                                              ah_sgid_index=self._k.gsi.sgid_index()))

    def leave_multicast(self, addr: AddrInfo) -> None:
        what = "Failed to leave multicast"
        gid = self._group(addr, what)
        flags = self._groups.pop(gid, None)
        if flags is None:
            raise fail(what, "the ID has not joined that group", errno.EADDRNOTAVAIL)
        if flags == rdma_cm_mc_join_flags.RDMA_MC_JOIN_FLAG_FULLMEMBER:
            self.qp.detach_mcast(GID(gid))  # type: ignore[union-attr]

    def _group(self, addr: AddrInfo | None, what: str) -> bytes:
        ip = None if addr is None else addr.src_addr
        if ip is None or not ipaddress.ip_address(ip).is_multicast:
            raise fail(what, f"{ip} is not a multicast address", errno.EINVAL)
        if self.qp is None or self._ps != rdma_port_space.RDMA_PS_UDP:
            raise fail(what, "a join needs the ID's UD QP (RDMA_PS_UDP)", errno.EINVAL)
        return ip_gid(ip)

    # -- the QP -----------------------------------------------------------------------------

    def init_qp_attr(self, qp_state: int) -> tuple[QPAttr, int]:
        """rdma_init_qp_attr: the attributes and mask of the QP's move to `qp_state`."""
        try:
            a, mask = self._cm.init_qp_attr(self._k, QpState(qp_state))
        except (KernelError, ValueError) as e:
            if isinstance(e, KernelError):
                raise _kerr("Failed to get QP attributes", e) from None
            raise fail("Failed to get QP attributes", f"no QP state {qp_state}",
                       errno.EINVAL) from None
        attr = QPAttr(qp_state=int(qp_state), pkey_index=0, port_num=1,
                      qp_access_flags=int(a.get("access", 0)),  # type: ignore[arg-type]
                      qkey=int(a.get("qkey", 0)),  # type: ignore[arg-type]
                      path_mtu=int(a.get("path_mtu", 3)),  # type: ignore[arg-type]
                      dest_qp_num=int(a.get("dest_qpn", 0)),  # type: ignore[arg-type]
                      rq_psn=int(a.get("rq_psn", 0)),  # type: ignore[arg-type]
                      sq_psn=int(a.get("sq_psn", 0)),  # type: ignore[arg-type]
                      max_dest_rd_atomic=int(a.get("max_dest_rd_atomic", 0)),  # type: ignore
                      max_rd_atomic=int(a.get("max_rd_atomic", 0)),  # type: ignore[arg-type]
                      min_rnr_timer=int(a.get("min_rnr_timer", 0)),  # type: ignore[arg-type]
                      timeout=int(a.get("timeout", 0)),  # type: ignore[arg-type]
                      retry_cnt=int(a.get("retry_cnt", 0)),  # type: ignore[arg-type]
                      rnr_retry=int(a.get("rnr_retry", 0)))  # type: ignore[arg-type]
        if "dgid" in a:
            attr.ah_attr = AHAttr(is_global=1, port_num=1, gr=GlobalRoute(
                dgid=GID(a["dgid"]),  # type: ignore[arg-type]
                sgid_index=int(a.get("sgid_index", 0))))  # type: ignore[arg-type]
        return attr, mask

    def _modify(self, state: QpState) -> None:
        assert self.qp is not None
        attr, mask = self.init_qp_attr(int(state))
        self.qp.modify(attr, mask)

    def _to_rts(self) -> None:
        """ucma_modify_qp_rtr/rts: the connection's access rights (INIT again), RTR, RTS."""
        for s in (QpState.INIT, QpState.RTR, QpState.RTS):
            self._modify(s)

    def create_qp(self, qp_init: QPInitAttr) -> None:
        """rdma_create_qp: on the ID's PD, with send and receive CQs of its own when the
        attributes name none; RC goes to INIT, UD to RTS (ucma_init_conn_qp / _ud_qp)."""
        what = "Failed to Create QP"
        self._bound_device()
        if self.ctx is None or self.pd is None:
            raise fail(what, "the ID is not bound to a device", errno.EINVAL)
        if self.qp is not None:
            raise fail(what, "the ID already has a QP", errno.EINVAL)
        init = QPInitAttr(qp_type=qp_init.qp_type, qp_context=qp_init.qp_context,
                          scq=qp_init.scq, rcq=qp_init.rcq, srq=qp_init.srq, cap=qp_init.cap,
                          sq_sig_all=qp_init.sq_sig_all)
        want = ibv_qp_type.IBV_QPT_UD if self._ps == rdma_port_space.RDMA_PS_UDP else \
            ibv_qp_type.IBV_QPT_RC
        if int(init.qp_type) != want:
            raise fail(what, f"QP type {init.qp_type} does not match the port space",
                       errno.EINVAL)
        if init.rcq is None:
            init.rcq = CQ(self.ctx, max(init.cap.max_recv_wr, 1))
            self._own_cqs.append(init.rcq)
        if init.scq is None:
            init.scq = CQ(self.ctx, max(init.cap.max_send_wr, 1))
            self._own_cqs.append(init.scq)
        self.qp = QP(self.pd, init)
        try:
            states = (QpState.INIT, QpState.RTR, QpState.RTS) if want == \
                ibv_qp_type.IBV_QPT_UD else (QpState.INIT,)
            for s in states:
                self._modify(s)
        except PyverbsError:
            self.qp.close()
            self.qp = None
            raise

    def query_qp(self, attr_mask: int) -> tuple[QPAttr, QPInitAttr]:
        if self.qp is None:
            raise fail("Failed to query QP", "the ID has no QP", errno.EINVAL)
        return self.qp.query(attr_mask)

    # -- memory and the data path -----------------------------------------------------------

    def _reg(self, size: int, access: int) -> MR:
        self._bound_device()
        if self.pd is None:
            raise fail("Failed to register MR", "the ID has no PD", errno.EINVAL)
        mr = MR(self.pd, size, access)
        self._mrs.append(mr)
        return mr

    def reg_msgs(self, size: int) -> MR:
        return self._reg(size, _LOCAL_WRITE)

    def reg_read(self, size: int = 0) -> MR:
        return self._reg(size, _LOCAL_WRITE | int(ibv_access_flags.IBV_ACCESS_REMOTE_READ))

    def reg_write(self, size: int = 0) -> MR:
        return self._reg(size, _LOCAL_WRITE | int(ibv_access_flags.IBV_ACCESS_REMOTE_WRITE))

    def _need_qp(self, what: str) -> QP:
        if self.qp is None:
            raise fail(what, "the ID has no QP", errno.EINVAL)
        return self.qp

    def post_recv(self, mr: MR, length: int | None = None) -> None:
        qp = self._need_qp("Failed to Post Receive")
        qp.post_recv(RecvWR(num_sge=1, sg=[SGE(mr.buf, length or mr.length, mr.lkey)]))

    def _post(self, what: str, mr: MR, length: int, flags: int, **wr: object) -> None:
        qp = self._need_qp(what)
        qp.post_send(SendWR(num_sge=1, sg=[SGE(mr.buf, length, mr.lkey)], send_flags=flags,
                            **wr))  # type: ignore[arg-type]

    def post_send(self, mr: MR, flags: int = _SIGNALED, length: int | None = None) -> None:
        self._post("Failed to Post Send", mr, length or mr.length, flags)

    def post_read(self, mr: MR, length: int, remote_addr: int, rkey: int,
                  flags: int = 0) -> None:
        self._post("Failed to Post Read", mr, length, flags,
                   opcode=ibv_wr_opcode.IBV_WR_RDMA_READ, remote_addr=remote_addr, rkey=rkey)

    def post_write(self, mr: MR, length: int, remote_addr: int, rkey: int,
                   flags: int = 0) -> None:
        self._post("Failed to Post Write", mr, length, flags,
                   opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, remote_addr=remote_addr, rkey=rkey)

    def post_ud_send(self, mr: MR, ah: AH, rqpn: int = 0, flags: int = _SIGNALED,
                     length: int | None = None) -> None:
        self._post("Failed to Post Send", mr, length or mr.length, flags, ah=ah,
                   remote_qpn=rqpn, remote_qkey=RDMA_UDP_QKEY)

    def _comp(self, cq: object, what: str) -> WC:
        """rdma_get_*_comp: block until the CQ has a completion."""
        started = sched.since()
        env = self.ctx.host.env if self.ctx is not None else None
        while True:
            n, wcs = cq.poll(1)  # type: ignore[attr-defined]
            if n:
                return wcs[0]
            # (an empty poll that saw the NIC write the ring looks again: the CQE is there)
            if env is not None and env.peek() == float("inf") and cq._p.silent and \
                    not sched.wait_for_others(started):  # type: ignore[attr-defined]
                raise fail(what, "no completion can arrive: the simulated world is idle",
                           errno.ETIMEDOUT)

    def get_recv_comp(self) -> WC:
        qp = self._need_qp("Failed to retrieve receive completion")
        return self._comp(qp.init_attr.rcq, "Failed to retrieve receive completion")

    def get_send_comp(self) -> WC:
        qp = self._need_qp("Failed to retrieve send completion")
        return self._comp(qp.init_attr.scq, "Failed to retrieve send completion")

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """rdma_destroy_id (rdma_destroy_ep for a synchronous ID): its MRs, QP and CQs, then
        the kernel ID (which tells a connected peer: DREQ, or REJ for an unanswered
        request)."""
        if self.closed:
            return
        self.closed = True
        for mr in self._mrs:
            mr.close()
        if self.qp is not None:
            for gid, flags in self._groups.items():  # rdma_destroy_id leaves its groups
                if flags == rdma_cm_mc_join_flags.RDMA_MC_JOIN_FLAG_FULLMEMBER:
                    self.qp.detach_mcast(GID(gid))  # type: ignore[attr-defined]
            self._groups.clear()
            self.qp.close()
        for cq in self._own_cqs:
            cq.close()
        if self._kid is not None and self._kid.state is not CmState.DESTROYED:
            self._kid.cm.destroy(self._kid)
            _ids.pop(id(self._kid), None)
        if self in self._owner.ids:
            self._owner.ids.remove(self)
