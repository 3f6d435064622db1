"""ib_core: verbs objects, per-process contexts, and the rules every device must follow.

It checks what the IB spec makes the kernel check (the QP state machine and the attribute
masks of each transition, IBA 11.2.5 / table in ib_modify_qp_is_ok), keeps every object a
process created in its ucontext, and destroys them all, in dependency order, when the context
is closed (process exit). The vendor driver (hw/) does what the device needs.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
from collections import deque
from dataclasses import dataclass, field, replace
from enum import IntEnum, IntFlag

from nicsim.driver.kernel.events import CompChannel, EventError, EventQueue
from nicsim.driver.kernel.hw.nsnic import NsnicDriver, RingPool
from nicsim.driver.kernel.hw.objects import HwCq, HwError, HwMr, HwQp, HwSrq
from nicsim.driver.kernel.hw.odp import Advice
from nicsim.driver.kernel.query import (
    PKEY_DEFAULT,
    DeviceAttrs,
    PortAttrs,
    QueryError,
    check_port,
    device_attrs,
    port_attrs,
)

from nicsim.host.host import Host
from nicsim.host.memory import AddressSpace
from nicsim.hwif import (
    GSI_QPN,
    Access,
    Cqc,
    DevCap,
    DevFeature,
    GidType,
    OdpCaps,
    QpAttrMask,
    Qpc,
    QpState,
    QpType,
    Srqc,
    blank_qpc,
)
from nicsim.wire import is_multicast_ip


class KernelError(Exception):
    def __init__(self, msg: str, errno_: int) -> None:
        super().__init__(msg)
        self.errno = errno_


M = QpAttrMask
CONTROLLED_QKEY = 0x80000000  # the Q_Key bit that makes it controlled (IBA 3.5.3)
# (current, next) -> (required, optional) attributes for an RC QP (IBA 10.3 / 11.2.5.2).
_RC_TRANSITIONS: dict[tuple[QpState, QpState], tuple[int, int]] = {
    (QpState.RESET, QpState.INIT): (M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS, 0),
    (QpState.INIT, QpState.INIT): (0, M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS),
    (QpState.INIT, QpState.RTR): (
        M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN | M.MAX_DEST_RD_ATOMIC | M.MIN_RNR_TIMER,
        M.ALT_PATH | M.ACCESS_FLAGS | M.PKEY_INDEX),
    (QpState.RTR, QpState.RTS): (
        M.SQ_PSN | M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY | M.MAX_QP_RD_ATOMIC,
        M.CUR_STATE | M.ALT_PATH | M.ACCESS_FLAGS | M.MIN_RNR_TIMER | M.PATH_MIG_STATE),
    (QpState.RTS, QpState.RTS): (
        0, M.CUR_STATE | M.ACCESS_FLAGS | M.ALT_PATH | M.PATH_MIG_STATE | M.MIN_RNR_TIMER),
    (QpState.RTS, QpState.SQD): (0, M.EN_SQD_ASYNC_NOTIFY),
    (QpState.SQD, QpState.RTS): (
        0, M.CUR_STATE | M.ACCESS_FLAGS | M.ALT_PATH | M.PATH_MIG_STATE | M.MIN_RNR_TIMER),
    (QpState.SQE, QpState.RTS): (0, M.CUR_STATE | M.ACCESS_FLAGS | M.MIN_RNR_TIMER),
}
# The same for UD (no path, no access rights: a Q_Key) and UC (a path, no acknowledgements).
_UD_TRANSITIONS: dict[tuple[QpState, QpState], tuple[int, int]] = {
    (QpState.RESET, QpState.INIT): (M.PKEY_INDEX | M.PORT | M.QKEY, 0),
    (QpState.INIT, QpState.INIT): (0, M.PKEY_INDEX | M.PORT | M.QKEY),
    (QpState.INIT, QpState.RTR): (0, M.PKEY_INDEX | M.QKEY),
    (QpState.RTR, QpState.RTS): (M.SQ_PSN, M.CUR_STATE | M.QKEY),
    (QpState.RTS, QpState.RTS): (0, M.CUR_STATE | M.QKEY),
    (QpState.RTS, QpState.SQD): (0, M.EN_SQD_ASYNC_NOTIFY),
    (QpState.SQD, QpState.RTS): (0, M.CUR_STATE | M.QKEY),
    (QpState.SQE, QpState.RTS): (0, M.CUR_STATE | M.QKEY),
}
_UC_TRANSITIONS: dict[tuple[QpState, QpState], tuple[int, int]] = {
    (QpState.RESET, QpState.INIT): (M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS, 0),
    (QpState.INIT, QpState.INIT): (0, M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS),
    (QpState.INIT, QpState.RTR): (M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN,
                                  M.ALT_PATH | M.ACCESS_FLAGS | M.PKEY_INDEX),
    (QpState.RTR, QpState.RTS): (M.SQ_PSN,
                                 M.CUR_STATE | M.ALT_PATH | M.ACCESS_FLAGS | M.PATH_MIG_STATE),
    (QpState.RTS, QpState.RTS): (0, M.CUR_STATE | M.ACCESS_FLAGS | M.ALT_PATH | M.PATH_MIG_STATE),
    (QpState.RTS, QpState.SQD): (0, M.EN_SQD_ASYNC_NOTIFY),
    (QpState.SQD, QpState.RTS): (0, M.CUR_STATE | M.ACCESS_FLAGS | M.ALT_PATH
                                 | M.PATH_MIG_STATE),
    (QpState.SQE, QpState.RTS): (0, M.CUR_STATE | M.ACCESS_FLAGS),
}
_TRANSITIONS = {QpType.RC: _RC_TRANSITIONS, QpType.UD: _UD_TRANSITIONS,
                QpType.UC: _UC_TRANSITIONS}


class MrAccess(IntFlag):
    """ib_access_flags as uverbs passes them (IB_UVERBS_ACCESS_*)."""

    LOCAL_WRITE = 1 << 0
    REMOTE_WRITE = 1 << 1
    REMOTE_READ = 1 << 2
    REMOTE_ATOMIC = 1 << 3
    MW_BIND = 1 << 4
    ZERO_BASED = 1 << 5
    ON_DEMAND = 1 << 6
    HUGETLB = 1 << 7
    FLUSH_GLOBAL = 1 << 8
    FLUSH_PERSISTENT = 1 << 9
    RELAXED_ORDERING = 1 << 20  # the first of the optional flags


# Optional flags (bits 20-29) are hints a device may ignore: accepted, never an error.
_ACCESS_OPTIONAL = ((1 << 30) - 1) & ~((1 << 20) - 1)
_ACCESS_KNOWN = ((MrAccess.FLUSH_PERSISTENT << 1) - 1) | _ACCESS_OPTIONAL
# What nsnic does with an MR: the four rights, MW_BIND, and FLUSH_GLOBAL on a device with
# DevFeature.FLUSH.
_ACCESS_NSNIC = (MrAccess.LOCAL_WRITE | MrAccess.REMOTE_WRITE | MrAccess.REMOTE_READ
                 | MrAccess.REMOTE_ATOMIC | MrAccess.MW_BIND)
_QP_ACCESS = int(Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
                 | Access.REMOTE_ATOMIC)
_QP_FLUSH = int(Access.FLUSH_GLOBAL | Access.FLUSH_PERSISTENT)
_FLUSH_ACCESS = ((MrAccess.FLUSH_GLOBAL, Access.FLUSH_GLOBAL),
                 (MrAccess.FLUSH_PERSISTENT, Access.FLUSH_PERSISTENT))


def hw_access(access: int) -> int:
    """The device's encoding of ib access flags (hwif.Access: the flush bits move down)."""
    a = int(access) & 0x1F
    for ib, hw in _FLUSH_ACCESS:
        if access & ib:
            a |= hw
    return a


def ib_access(hw: int) -> int:
    """The ib access flags of the device's encoding (the inverse of hw_access)."""
    a = hw & 0x1F
    for ib, dev in _FLUSH_ACCESS:
        if hw & dev:
            a |= ib
    return a


class RereFlag(IntFlag):
    """ibv_rereg_mr_flags."""

    CHANGE_TRANSLATION = 1
    CHANGE_PD = 2
    CHANGE_ACCESS = 4


ADVISE_FLUSH = 1  # IB_UVERBS_ADVISE_MR_FLAG_FLUSH: the prefetch is done when the call returns
_REREG_FLAGS = int(RereFlag.CHANGE_TRANSLATION | RereFlag.CHANGE_PD | RereFlag.CHANGE_ACCESS)


def check_mr_access(access: int, features: DevFeature, odp: bool = False) -> int:
    """ib_check_mr_access, then what the device supports (rxe's reg_user_mr check); returns
    the rights nsnic keeps, in ib encoding. `odp`: the device has on-demand paging
    (IBK_ON_DEMAND_PAGING); without it ON_DEMAND is EOPNOTSUPP, as ib_check_mr_access
    answers."""
    a = int(access)
    # Remote write/atomic access needs local write (IBA 10.6.3.1).
    if a & (MrAccess.REMOTE_WRITE | MrAccess.REMOTE_ATOMIC) and not a & MrAccess.LOCAL_WRITE:
        raise KernelError("remote write access requires local write", errno.EINVAL)
    if a & ~_ACCESS_KNOWN or a < 0:
        raise KernelError(f"unknown access flags 0x{a & ~_ACCESS_KNOWN:x}", errno.EINVAL)
    if a & MrAccess.ON_DEMAND and not odp:
        raise KernelError("the device has no on-demand paging", errno.EOPNOTSUPP)
    ok = _ACCESS_NSNIC | MrAccess.ON_DEMAND
    if DevFeature.FLUSH in features:
        ok |= MrAccess.FLUSH_GLOBAL | MrAccess.FLUSH_PERSISTENT
        if a & MrAccess.FLUSH_PERSISTENT:
            # Host memory is DRAM: no page can be made persistent (rxe refuses a
            # FLUSH_PERSISTENT registration of pages that are not pmem the same way).
            raise KernelError("FLUSH_PERSISTENT needs persistent memory; the host has none",
                              errno.EINVAL)
    if a & ~(ok | _ACCESS_OPTIONAL):
        raise KernelError(f"access flags 0x{a & ~(ok | _ACCESS_OPTIONAL):x} are not "
                          "supported by nsnic (no zero-based or huge-page MRs, no flush "
                          "without DevFeature.FLUSH)", errno.EOPNOTSUPP)
    return a & ok


def modify_is_ok(cur: QpState, nxt: QpState, mask: int, qp_type: QpType = QpType.RC) -> bool:
    """ib_modify_qp_is_ok: the transition exists for the QP's type and the mask has exactly
    the required attributes plus any of the optional ones."""
    if nxt in (QpState.RESET, QpState.ERR):
        return not mask & ~(M.STATE | M.CUR_STATE)
    rule = _TRANSITIONS[qp_type].get((cur, nxt))
    if rule is None:
        return False
    req, opt = rule
    if (mask & req) != req:
        return False
    return not mask & ~(req | opt | M.STATE)


class ObjType(IntEnum):
    PD = 1
    MR = 2
    CQ = 3
    QP = 4
    AH = 5


@dataclass
class AddressVector:
    """A resolved path to a destination (what an AH or a connected QP sends with): the
    GRH fields and the Ethernet destination ib_resolve_eth_dmac found."""

    dgid: bytes
    sgid: bytes
    dmac: bytes
    traffic_class: int
    hop_limit: int
    flow_label: int
    sl: int
    sgid_index: int = 0  # the GID table entry of sgid (the device frames by its type)
    gid_type: GidType = GidType.ROCE_V2


@dataclass
class IbAh:
    handle: int
    pd: IbPd
    av: AddressVector


@dataclass
class IbPd:
    handle: int
    pdn: int
    users: int = 0


@dataclass
class IbMr:
    handle: int
    pd: IbPd
    hw: HwMr
    access: int


@dataclass
class IbMw:
    handle: int
    pd: IbPd
    key: int
    type2: bool


@dataclass
class IbCq:
    handle: int
    hw: HwCq
    users: int = 0
    channel: CompChannel | None = None


@dataclass
class IbSrq:
    handle: int
    pd: IbPd
    hw: HwSrq
    max_wr: int
    max_sge: int
    users: int = 0


@dataclass
class IbQp:
    handle: int
    pd: IbPd
    send_cq: IbCq
    recv_cq: IbCq
    hw: HwQp
    qp_type: QpType
    state: QpState = QpState.RESET
    attrs: Qpc = field(default_factory=blank_qpc)
    srq: IbSrq | None = None
    mcast: set[bytes] = field(default_factory=set)  # the multicast GIDs it is attached to
    privileged: bool = False  # its creator's CAP_NET_RAW


@dataclass
class Ucontext:
    """Everything one process opened on one device."""

    dev: IbDevice
    aspace: AddressSpace
    uar: int  # the doorbell page (BAR0 page) the process's QPs and CQs are bound to
    rings: RingPool  # the process's ring memory (mapped into it)
    objects: dict[int, object] = field(default_factory=dict)
    next_handle: int = 1
    closed: bool = False
    async_events: deque = field(default_factory=deque)  # the async event file's queue
    privileged: bool = False  # the opener's CAP_NET_RAW (controlled Q_Keys, C3-32)

    def add(self, obj: object) -> int:
        h = self.next_handle
        self.next_handle += 1
        self.objects[h] = obj
        return h

    def get(self, handle: int, kind: type) -> object:
        obj = self.objects.get(handle)
        if not isinstance(obj, kind):
            raise KernelError(f"no {kind.__name__} with handle {handle}", errno.EINVAL)
        return obj


class IbDevice:
    """A registered RDMA device (ib_device) backed by a vendor driver."""

    def open(self, aspace: AddressSpace, privileged: bool = False) -> Ucontext:
        """A process opens the device: its context, and its own doorbell page. `privileged`:
        the opener has CAP_NET_RAW (the kernel's own users have)."""
        return Ucontext(self, aspace, _hw(self.hw.uars.alloc), RingPool(self.hw.host.mem, aspace),
                        privileged=privileged)

    def __init__(self, name: str, hw: NsnicDriver) -> None:
        self.name = name
        self.hw = hw
        self._pdns = 1
        self.events = EventQueue(hw)

    # -- queries (ib_query_device, ib_query_port, the GID and P_Key tables) ------------------

    def query_device(self) -> DeviceAttrs:
        hw = self.hw
        return device_attrs(hw.caps, hw.dev_id, hw.fn.netdev.mac, hw.lim.log_mtt,
                            NUM_COMP_VECTORS, hw.features)

    def query_port(self, port: int) -> PortAttrs:
        _query(lambda: check_port(port))
        return port_attrs(_hw(lambda: self.hw.query_port(port)), self.hw.fn.netdev.mtu)

    def query_gid(self, port: int, index: int) -> tuple[bytes, GidType]:
        """A GID table entry and its type; ENODATA for an empty entry."""
        _query(lambda: check_port(port))
        return _hw(lambda: self.hw.gid(index))

    @staticmethod
    def query_pkey(port: int, index: int) -> int:
        _query(lambda: check_port(port))
        if index != 0:
            raise KernelError(f"P_Key index {index}: the table has one entry", errno.EINVAL)
        return PKEY_DEFAULT

    # Every method below maps HwError to KernelError with the same errno.

    def alloc_pd(self, uctx: Ucontext) -> IbPd:
        pdn = self._pdns
        self._pdns += 1
        pd = IbPd(0, pdn)
        pd.handle = uctx.add(pd)
        return pd

    def dealloc_pd(self, uctx: Ucontext, pd: IbPd) -> None:
        if pd.users:
            raise KernelError("PD still in use", errno.EBUSY)
        del uctx.objects[pd.handle]

    def reg_mr(self, uctx: Ucontext, pd: IbPd, va: int, length: int, access: int) -> IbMr:
        _check_ints(va=va, length=length, access=access)
        odp = bool(access & MrAccess.ON_DEMAND)
        kept = check_mr_access(access, self.hw.features, self.hw.odp.supported)
        if va < 0 or length < 0 or va + length > 1 << 64:
            # ib_umem_get: a range that wraps the address space is invalid, not a fault.
            raise KernelError(f"MR range 0x{va:x}+{length} wraps", errno.EINVAL)
        if odp and va == 0 and length == (1 << 64) - 1:
            # Implicit ODP: the device reports no IMPLICIT capability (rxe refuses the same).
            raise KernelError("implicit on-demand paging MRs are not supported", errno.EINVAL)
        hw = _hw(lambda: self.hw.reg_mr(uctx.aspace, va, length, hw_access(kept), pd.pdn, odp))
        mr = IbMr(0, pd, hw, access)
        mr.handle = uctx.add(mr)
        pd.users += 1
        return mr

    def rereg_mr(self, mr: IbMr, flags: int, pd: IbPd | None, va: int, length: int,
                 access: int) -> None:
        """ib_uverbs_rereg_mr: a new translation, PD or access for a registered MR. nsnic
        writes it anew under the same key (INVALIDATE_MPT, then MTT and MPT writes): the old
        translation, PD or rights stop applying at once, for messages in flight too."""
        _check_ints(flags=flags, va=va, length=length, access=access)
        if not flags or flags & ~_REREG_FLAGS:
            raise KernelError(f"rereg flags 0x{flags:x}", errno.EINVAL)
        new_pd = pd if flags & RereFlag.CHANGE_PD else mr.pd
        if new_pd is None:
            raise KernelError("IBV_REREG_MR_CHANGE_PD without a PD", errno.EINVAL)
        if flags & RereFlag.CHANGE_ACCESS:
            check_mr_access(access, self.hw.features, self.hw.odp.supported)
            if (access ^ mr.access) & MrAccess.ON_DEMAND:
                raise KernelError("rereg cannot turn on-demand paging on or off",
                                  errno.EOPNOTSUPP)
        else:
            access = mr.access
        if flags & RereFlag.CHANGE_TRANSLATION:
            if va < 0 or length <= 0 or va + length > 1 << 64:
                raise KernelError(f"MR range 0x{va:x}+{length}", errno.EINVAL)
        else:
            va, length = mr.hw.va, mr.hw.length
        kept = check_mr_access(access, self.hw.features, self.hw.odp.supported)
        _hw(lambda: self.hw.rereg_mr(mr.hw, va, length, hw_access(kept), new_pd.pdn))
        mr.pd.users -= 1
        mr.pd, mr.access = new_pd, access
        new_pd.users += 1

    def query_odp_caps(self) -> OdpCaps:
        """ib_device_attr.odp_caps: what the device's QUERY_ODP reported (zeros without)."""
        return self.hw.odp.caps

    def advise_mr(self, uctx: Ucontext, pd: IbPd, advice: int, flags: int,
                  sges: list[tuple[int, int, int]]) -> None:
        """ib_uverbs advise_mr (ibv_advise_mr) with rxe's checks: flags other than FLUSH
        EINVAL (uverbs' flags attribute), an advice the device does not know EOPNOTSUPP, no
        SGE EINVAL; each (addr, length, lkey) must name an ODP MR of the PD (EINVAL), the
        range inside it (EINVAL), with LOCAL_WRITE for PREFETCH_WRITE (EPERM)."""
        _check_ints(advice=advice, flags=flags)
        if flags & ~ADVISE_FLUSH:
            raise KernelError(f"advise_mr flags 0x{flags:x}", errno.EINVAL)
        if not self.hw.odp.supported:
            raise KernelError("the device has no on-demand paging", errno.EOPNOTSUPP)
        try:
            adv = Advice(advice)
        except ValueError:
            raise KernelError(f"advice {advice}", errno.EOPNOTSUPP) from None
        if not sges:
            raise KernelError("advise_mr without an SGE", errno.EINVAL)
        todo = []
        for addr, length, lkey in sges:
            _check_ints(addr=addr, length=length, lkey=lkey)
            mr = next((o for o in uctx.objects.values() if isinstance(o, IbMr)
                       and o.hw.key == lkey and o.pd is pd), None)
            if mr is None or not mr.hw.odp:
                raise KernelError(f"lkey 0x{lkey:x} is not an on-demand paging MR of the PD",
                                  errno.EINVAL)
            if addr < mr.hw.va or addr + length > mr.hw.va + mr.hw.length:
                raise KernelError(f"0x{addr:x}+{length} is outside the MR", errno.EINVAL)
            if adv is Advice.PREFETCH_WRITE and not mr.access & MrAccess.LOCAL_WRITE:
                raise KernelError("PREFETCH_WRITE on an MR without local write", errno.EPERM)
            todo.append((mr.hw, addr, length))
        for hw_mr, addr, length in todo:
            self.hw.odp.advise(hw_mr, addr, length, adv, bool(flags & ADVISE_FLUSH))

    def alloc_mw(self, uctx: Ucontext, pd: IbPd, mw_type: int) -> IbMw:
        """ib_alloc_mw: type 1 or type 2 (2B: bound to a QP by a BIND_MW work request)."""
        _check_ints(mw_type=mw_type)
        if mw_type not in (1, 2):
            raise KernelError(f"memory window type {mw_type}", errno.EINVAL)
        mw = IbMw(0, pd, _hw(lambda: self.hw.alloc_mw(pd.pdn, mw_type == 2)), mw_type == 2)
        mw.handle = uctx.add(mw)
        pd.users += 1
        return mw

    def dealloc_mw(self, uctx: Ucontext, mw: IbMw) -> None:
        _hw(lambda: self.hw.dealloc_mw(mw.key))
        mw.pd.users -= 1
        del uctx.objects[mw.handle]

    def dereg_mr(self, uctx: Ucontext, mr: IbMr) -> None:
        _hw(lambda: self.hw.dereg_mr(mr.hw))
        mr.pd.users -= 1
        del uctx.objects[mr.handle]

    def create_cq(self, uctx: Ucontext, cqe: int, channel: CompChannel | None = None) -> IbCq:
        _check_ints(cqe=cqe)
        hw = _hw(lambda: self.hw.create_cq(cqe, uctx.uar, uctx.rings))
        cq = IbCq(0, hw, channel=channel)
        cq.handle = uctx.add(cq)
        if channel is not None:
            channel.users += 1
        self.events.cqs[hw.cqn] = (cq, channel, uctx.async_events)
        return cq

    # -- events (ib_uverbs' completion event files and async event file) --------------------

    def create_comp_channel(self, uctx: Ucontext) -> CompChannel:
        _ev(self.events.start)
        ch = CompChannel(0, next(_event_fds))
        ch.handle = uctx.add(ch)
        return ch

    def destroy_comp_channel(self, uctx: Ucontext, ch: CompChannel) -> None:
        if ch.users:
            raise KernelError("completion channel still has CQs", errno.EBUSY)
        del uctx.objects[ch.handle]

    def get_cq_event(self, ch: CompChannel) -> IbCq:
        """Read the channel: the CQ of its oldest completion event, waiting for one."""
        _ev(lambda: self.events.wait(lambda: bool(ch.events)))
        return ch.events.popleft()

    def get_async_event(self, uctx: Ucontext) -> object:
        _ev(self.events.start)
        _ev(lambda: self.events.wait(lambda: bool(uctx.async_events)))
        return uctx.async_events.popleft()

    def query_cq(self, cq: IbCq) -> Cqc:
        return _hw(lambda: self.hw.query_cq(cq.hw.cqn))

    def destroy_cq(self, uctx: Ucontext, cq: IbCq) -> None:
        if cq.users:
            raise KernelError("CQ still in use", errno.EBUSY)
        _hw(lambda: self.hw.destroy_cq(cq.hw))
        del uctx.objects[cq.handle]
        self.events.cqs.pop(cq.hw.cqn, None)
        ch = cq.channel
        if ch is not None:  # its events go with it (ib_uverbs_release_ucq)
            ch.users -= 1
            ch.events = deque(c for c in ch.events if c is not cq)
        # The NIC has stopped (a fenced command): the ring and its mapping can go.
        self.hw.free_cq(cq.hw, uctx.rings)

    # -- SRQ (ib_create_srq, ib_modify_srq, ib_query_srq) -----------------------------------

    def create_srq(self, uctx: Ucontext, pd: IbPd, max_wr: int, max_sge: int,
                   limit: int) -> IbSrq:
        _check_ints(max_wr=max_wr, max_sge=max_sge, srq_limit=limit)
        if not self.hw.has_srq:  # ib_uverbs_create_srq: the device has no create_srq op
            raise KernelError(f"{self.name} has no SRQs", errno.EOPNOTSUPP)
        # Its limit event needs the event queue; on a device without one, arming a limit is
        # refused (modify_srq).
        with contextlib.suppress(EventError):
            self.events.start()
        hw = _hw(lambda: self.hw.create_srq(pd.pdn, uctx.uar, uctx.rings, max_wr, max_sge,
                                            limit))
        srq = IbSrq(0, pd, hw, (1 << hw.log_size) - 1, max_sge)
        srq.handle = uctx.add(srq)
        pd.users += 1
        self.events.objs[("srq", hw.srqn)] = (srq, uctx.async_events)
        return srq

    def resize_cq(self, uctx: Ucontext, cq: IbCq, cqe: int) -> None:
        """ib_resize_cq: EINVAL for a size out of range or below the unpolled count."""
        _check_ints(cqe=cqe)
        _hw(lambda: self.hw.resize_cq(cq.hw, cqe, uctx.rings))

    def modify_srq(self, uctx: Ucontext, srq: IbSrq, max_wr: int | None,
                   limit: int | None) -> None:
        """ib_modify_srq: IBV_SRQ_MAX_WR resizes (rxe's checks: not below the armed limit,
        nor below the WQEs posted and not taken), IBV_SRQ_LIMIT arms the limit."""
        if max_wr is not None:
            _check_ints(max_wr=max_wr)
            armed = self.query_srq(srq).limit
            if armed and max_wr < armed:
                raise KernelError(f"max_wr {max_wr} < the armed srq_limit {armed}",
                                  errno.EINVAL)
            waiting = self.query_srq(srq).wqes
            if max_wr < waiting:
                raise KernelError(f"max_wr {max_wr} < the {waiting} WQEs posted", errno.EINVAL)
            _hw(lambda: self.hw.resize_srq(srq.hw, max_wr, uctx.rings))
            srq.max_wr = (1 << srq.hw.log_size) - 1
        if limit is not None:
            _check_ints(srq_limit=limit)
            if not 0 <= limit <= srq.max_wr:
                raise KernelError(f"srq_limit {limit} > max_wr {srq.max_wr}", errno.EINVAL)
            if limit and self.events.eq is None:
                raise KernelError("the device has no event queue for the SRQ limit event",
                                  errno.EOPNOTSUPP)
            _hw(lambda: self.hw.modify_srq(srq.hw, limit))

    def query_srq(self, srq: IbSrq) -> Srqc:
        return _hw(lambda: self.hw.query_srq(srq.hw))

    def destroy_srq(self, uctx: Ucontext, srq: IbSrq) -> None:
        if srq.users:
            raise KernelError("SRQ still in use", errno.EBUSY)
        _hw(lambda: self.hw.destroy_srq(srq.hw))
        srq.pd.users -= 1
        del uctx.objects[srq.handle]
        self.events.objs.pop(("srq", srq.hw.srqn), None)
        uctx.rings.free(srq.hw.ring_pa, srq.hw.ring_bytes)

    def create_qp(self, uctx: Ucontext, pd: IbPd, qp_type: int, send_cq: IbCq, recv_cq: IbCq,
                  cap: tuple[int, int, int, int, int], srq: IbSrq | None = None,
                  special_qpn: int = 0) -> IbQp:
        """ib_create_qp. `special_qpn` is for the kernel's own QPs (the GSI QP, QP1, which
        the CM's MAD agent creates as a UD QP): user space cannot ask for it."""
        _check_ints(qp_type=qp_type, **dict(zip(_CAP_NAMES, cap, strict=True)))
        try:
            t = QpType(qp_type)
        except ValueError:
            if qp_type in _IB_QP_TYPES:  # a type the verbs know and nsnic does not have
                raise KernelError(f"QP type {_IB_QP_TYPES[qp_type]} is not supported by nsnic",
                                  errno.EOPNOTSUPP) from None
            raise KernelError(f"unknown QP type {qp_type}", errno.EINVAL) from None
        if t not in _SUPPORTED_QP_TYPES:
            raise KernelError(f"QP type {t.name} is not supported by nsnic yet", errno.EOPNOTSUPP)
        lacks = DevCap(self.hw.caps.flags)
        if t is QpType.UC and DevCap.NO_UC in lacks or \
                t is QpType.UD and DevCap.NO_UD in lacks and special_qpn != GSI_QPN:
            # A device without the transport: as siw's create_qp refuses all but RC.
            raise KernelError(f"QP type {t.name} is not supported by this device",
                              errno.EOPNOTSUPP)
        if min(cap) < 0:
            raise KernelError("negative QP capability", errno.EINVAL)
        hw = _hw(lambda: self.hw.create_qp(t, pd.pdn, uctx.uar, uctx.rings, send_cq.hw.cqn,
                                           recv_cq.hw.cqn, *cap,
                                           srqn=srq.hw.srqn if srq is not None else 0,
                                           special_qpn=special_qpn))
        qp = IbQp(0, pd, send_cq, recv_cq, hw, t, srq=srq, privileged=uctx.privileged)
        if srq is not None:
            srq.users += 1
        qp.attrs = blank_qpc(hw.qpn)
        qp.handle = uctx.add(qp)
        pd.users += 1
        send_cq.users += 1
        recv_cq.users += 1
        return qp

    def modify_qp(self, qp: IbQp, attrs: Qpc, mask: int, cur_state: int | None = None,
                  pkey_index: int = 0, port: int = 1) -> None:
        """ib_modify_qp: the transition and its attribute mask, then every attribute's range,
        on a copy of the QP's attributes. A rejected modify changes nothing."""
        _check_ints(mask=mask, pkey_index=pkey_index, port=port)
        cur = qp.state
        if mask & M.CUR_STATE:
            # The state the caller believes the QP is in must be the one it is in (rxe and
            # mlx5 refuse otherwise); the NIC's view counts, as it may have moved to ERR.
            cur = QpState(self.query_qp(qp).state)
            if cur_state != cur:
                raise KernelError(f"cur_qp_state {cur_state} is not the QP's state {cur.name}",
                                  errno.EINVAL)
        try:
            nxt = QpState(attrs.state) if mask & M.STATE else cur
        except ValueError:
            raise KernelError(f"no QP state {attrs.state!r}", errno.EINVAL) from None
        if not modify_is_ok(cur, nxt, mask, qp.qp_type):
            raise KernelError(f"invalid QP transition {cur.name}->{nxt.name} with attr mask "
                              f"0x{mask:x}", errno.EINVAL)
        if mask & M.QKEY and isinstance(attrs.qkey, int) and attrs.qkey & CONTROLLED_QKEY \
                and not qp.privileged:
            # A controlled Q_Key (high bit set: the GSI's 0x80010000 among them) only for
            # privileged consumers (IBA 3.5.3, C3-32); ib_uverbs' modify_qp refuses it
            # without CAP_NET_RAW.
            raise KernelError(f"Q_Key 0x{attrs.qkey:x} is controlled (needs CAP_NET_RAW)",
                              errno.EPERM)
        if mask & M.PKEY_INDEX and pkey_index != 0:
            raise KernelError(f"pkey_index {pkey_index}: the P_Key table has one entry",
                              errno.EINVAL)
        if mask & M.PORT and port != 1:
            raise KernelError(f"no port {port}", errno.EINVAL)
        if mask & M.ACCESS_FLAGS:
            _check_ints(qp_access_flags=attrs.access)
            if attrs.access & ~_ACCESS_KNOWN or attrs.access < 0:
                raise KernelError(f"bad qp_access_flags 0x{attrs.access:x}", errno.EINVAL)
            # Rights the QP cannot use on nsnic (relaxed ordering, FLUSH without the
            # feature...) are dropped as the kernel and rxe drop them: ib_modify_qp does not
            # check them. The flush rights go in the device's encoding.
            keep = _QP_ACCESS | (_QP_FLUSH if DevFeature.FLUSH in self.hw.features else 0)
            attrs = replace(attrs, access=hw_access(attrs.access) & keep)
        a = replace(qp.attrs)
        limits = {M.MAX_QP_RD_ATOMIC: self.hw.caps.max_qp_rd_atom,
                  M.MAX_DEST_RD_ATOMIC: self.hw.caps.max_qp_rd_atom}
        for m, name, lo, hi in _QP_ATTRS:
            if not mask & m:
                continue
            v = getattr(attrs, name)
            hi = limits.get(m, hi)
            if not isinstance(v, int) or not lo <= v <= hi:
                raise KernelError(f"{name} {v!r} out of range {lo}..{hi}", errno.EINVAL)
            setattr(a, name, v)
        if mask & M.ACCESS_FLAGS and a.access & ~(_QP_ACCESS | _QP_FLUSH):
            raise KernelError(f"bad qp_access_flags 0x{a.access:x}", errno.EINVAL)
        # PSNs are 24 bits on the wire (IBA 9.7.1); the upper bits are dropped, as rxe does.
        a.rq_psn &= 0xFFFFFF
        a.sq_psn &= 0xFFFFFF
        if mask & M.AV:
            _check_ints(traffic_class=attrs.traffic_class)
            if not isinstance(attrs.dgid, bytes) or len(attrs.dgid) != 16 or \
                    not 0 <= attrs.traffic_class <= 0xFFFF:
                raise KernelError("bad address vector", errno.EINVAL)
            _check_ints(sgid_index=attrs.sgid_index)
            try:
                a.sgid = self.hw.gid(attrs.sgid_index)[0]
            except HwError as e:  # (ib_get_cached_gid_attr: no such entry)
                raise KernelError(f"sgid_index {attrs.sgid_index}: {e}", errno.EINVAL) from None
            a.dgid, a.traffic_class = attrs.dgid, attrs.traffic_class
            a.sgid_index = attrs.sgid_index
            a.smac = bytes(int(x, 16) for x in self.hw.fn.netdev.mac.split(":"))
            a.dmac = _hw(lambda: self.hw.resolve_dmac(attrs.dgid))
        a.state = nxt
        a.attr_mask = mask
        _hw(lambda: self.hw.modify_qp(a))
        qp.state = nxt
        qp.attrs = blank_qpc(qp.hw.qpn) if nxt is QpState.RESET else a

    def query_qp(self, qp: IbQp) -> Qpc:
        q = _hw(lambda: self.hw.query_qp(qp.hw.qpn))
        q.access = ib_access(q.access)
        return q

    def attach_mcast(self, qp: IbQp, gid: object, lid: int, attach: bool = True) -> None:
        """ib_attach_mcast / ib_detach_mcast through uverbs: a UD QP and a multicast GID
        (EINVAL otherwise, as ib_attach_mcast checks); attaching twice is one attachment
        and detaching what is not attached is EINVAL (ib_uverbs_attach/detach_mcast)."""
        _check_ints(lid=lid)
        if not isinstance(gid, bytes) or len(gid) != 16:
            raise KernelError("bad multicast GID", errno.EINVAL)
        if not is_multicast_ip(gid) or qp.qp_type is not QpType.UD:
            raise KernelError("multicast needs a UD QP and a multicast GID", errno.EINVAL)
        if attach:
            if gid in qp.mcast:
                return
            _hw(lambda: self.hw.attach_mcast(qp.hw.qpn, gid))
            qp.mcast.add(gid)
        else:
            if gid not in qp.mcast:
                raise KernelError("the QP is not attached to that group", errno.EINVAL)
            _hw(lambda: self.hw.attach_mcast(qp.hw.qpn, gid, attach=False))
            qp.mcast.discard(gid)

    def destroy_qp(self, uctx: Ucontext, qp: IbQp, exiting: bool = False) -> None:
        """A QP still attached to a group is not destroyed (EBUSY, uverbs_free_qp) unless
        the process is exiting, when its attachments go first."""
        if qp.mcast:
            if not exiting:
                raise KernelError("QP is attached to multicast groups", errno.EBUSY)
            for gid in list(qp.mcast):
                self.attach_mcast(qp, gid, 0, attach=False)
        _hw(lambda: self.hw.destroy_qp(qp.hw))
        qp.pd.users -= 1
        qp.send_cq.users -= 1
        qp.recv_cq.users -= 1
        if qp.srq is not None:
            qp.srq.users -= 1
        del uctx.objects[qp.handle]
        # The NIC has stopped (a fenced command): the rings, and their pages' mappings once
        # no ring of the process is left on them, can go. No one else gets a page that an old
        # mapping could still write (rdma_user_mmap_entry removal and zap in Linux).
        self.hw.free_qp(qp.hw, uctx.rings)

    # -- address handles (ib_create_ah: RoCE resolves the destination MAC in the kernel) ----

    def resolve_av(self, port: int, is_global: int, dgid: object, sgid_index: int,
                   traffic_class: int, hop_limit: int, flow_label: int, sl: int
                   ) -> AddressVector:
        """Check an address vector and resolve its Ethernet destination. RoCE needs the GRH
        (ib_resolve_eth_dmac: EINVAL without it); the source GID must be a table entry."""
        _check_ints(port=port, sgid_index=sgid_index, traffic_class=traffic_class,
                    hop_limit=hop_limit, flow_label=flow_label, sl=sl)
        _query(lambda: check_port(port))
        if not is_global:
            raise KernelError("RoCE address vectors need a GRH (is_global)", errno.EINVAL)
        if not isinstance(dgid, bytes) or len(dgid) != 16:
            raise KernelError("bad destination GID", errno.EINVAL)
        if not (0 <= traffic_class <= 0xFF and 0 <= hop_limit <= 0xFF
                and 0 <= flow_label <= 0xFFFFF and 0 <= sl <= 15):
            raise KernelError("GRH field out of range", errno.EINVAL)
        try:
            sgid, kind = self.hw.gid(sgid_index)
        except HwError as e:
            raise KernelError(f"sgid_index {sgid_index}: {e}", errno.EINVAL) from None
        dmac = _hw(lambda: self.hw.resolve_dmac(dgid))
        return AddressVector(dgid, sgid, dmac, traffic_class, hop_limit, flow_label, sl,
                             sgid_index, kind)

    def create_ah(self, uctx: Ucontext, pd: IbPd, av: AddressVector) -> IbAh:
        ah = IbAh(0, pd, av)
        ah.handle = uctx.add(ah)
        pd.users += 1
        return ah

    def destroy_ah(self, uctx: Ucontext, ah: IbAh) -> None:
        ah.pd.users -= 1
        del uctx.objects[ah.handle]

    def close(self, uctx: Ucontext) -> None:
        """Process exit: destroy everything, QPs first, then AHs, MRs, CQs and PDs
        (ib_uverbs_cleanup_ucontext's order), so the NIC keeps no working QP or key."""
        def destroy_qp(uctx: Ucontext, qp: IbQp) -> None:
            self.destroy_qp(uctx, qp, exiting=True)

        for kind, destroy in ((IbQp, destroy_qp), (IbAh, self.destroy_ah),
                              (IbMw, self.dealloc_mw),
                              (IbMr, self.dereg_mr), (IbSrq, self.destroy_srq),
                              (IbCq, self.destroy_cq), (CompChannel, self.destroy_comp_channel),
                              (IbPd, self.dealloc_pd)):
            for obj in [o for o in uctx.objects.values() if isinstance(o, kind)]:
                destroy(uctx, obj)  # type: ignore[operator]
        uctx.closed = True
        self.hw.uars.free(uctx.uar)  # quarantined like QPNs before another process gets it


# (mask bit, Qpc field, lowest, highest) of the attributes modify_qp stores: the widths of
# the IBA fields (timeout and min_rnr_timer 5 bits, retry counts 3 bits, QPN 24 bits).
_QP_ATTRS = (
    (M.ACCESS_FLAGS, "access", 0, 0xFF), (M.PATH_MTU, "path_mtu", 1, 5),
    (M.DEST_QPN, "dest_qpn", 0, 0xFFFFFF), (M.RQ_PSN, "rq_psn", 0, 0xFFFFFFFF),
    (M.SQ_PSN, "sq_psn", 0, 0xFFFFFFFF), (M.TIMEOUT, "timeout", 0, 31),
    (M.RETRY_CNT, "retry_cnt", 0, 7), (M.RNR_RETRY, "rnr_retry", 0, 7),
    (M.MIN_RNR_TIMER, "min_rnr_timer", 0, 31), (M.MAX_QP_RD_ATOMIC, "max_rd_atomic", 0, 0),
    (M.MAX_DEST_RD_ATOMIC, "max_dest_rd_atomic", 0, 0), (M.QKEY, "qkey", 0, 0xFFFFFFFF),
)
# The QP types of ib_verbs (enum ib_qp_type as uverbs passes them) beyond hwif.QpType: asking
# for one is EOPNOTSUPP (rxe_qp_chk_init), an unknown number EINVAL.
_IB_QP_TYPES = {0: "SMI", 1: "GSI", 5: "RAW_IPV6", 6: "RAW_ETHERTYPE", 8: "RAW_PACKET",
                9: "XRC_INI", 10: "XRC_TGT", 0xFF: "DRIVER"}
_SUPPORTED_QP_TYPES = (QpType.RC, QpType.UC, QpType.UD)
_CAP_NAMES = ("max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge", "max_inline_data")


def _check_ints(**values: object) -> None:
    """Arguments from user space are integers (a C ABI carries nothing else)."""
    for name, v in values.items():
        if not isinstance(v, int):
            raise KernelError(f"{name} must be an integer, not {v!r}", errno.EINVAL)


def _hw(fn):  # noqa: ANN001, ANN202
    try:
        return fn()
    except HwError as e:
        raise KernelError(str(e), e.errno) from None


def _ev(fn):  # noqa: ANN001, ANN202
    try:
        return fn()
    except EventError as e:
        raise KernelError(str(e), e.errno) from None


_event_fds = itertools.count(1000)  # the numbers a program sees for its event files


def _query(fn):  # noqa: ANN001, ANN202
    try:
        return fn()
    except QueryError as e:
        raise KernelError(str(e), e.errno) from None


# Completion vectors (interrupt vectors for CQ events): nsnic has one event queue, so every
# CQ has the one vector 0.
NUM_COMP_VECTORS = 1


class Kernel:
    """The kernel of one host: probes the nsnic functions plugged into it."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.devices: dict[str, IbDevice] = {}
        for i, (name, fn) in enumerate(sorted(host.functions.items())):
            ibname = f"nsnic{i}"
            self.devices[ibname] = IbDevice(ibname, NsnicDriver(host, fn, name, ifindex=i + 2))
        host.kernel = self

    def rename_device(self, old: str, new: str) -> None:
        """`rdma dev set OLD name NEW` (ib_device_rename): EEXIST if the name is taken."""
        if old not in self.devices:
            raise KernelError(f"no RDMA device {old!r}", errno.ENODEV)
        if new != old and new in self.devices:
            raise KernelError(f"RDMA device name {new!r} is taken", errno.EEXIST)
        dev = self.devices.pop(old)
        dev.name = new
        self.devices[new] = dev
