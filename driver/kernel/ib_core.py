"""ib_core: verbs objects, per-process contexts, and the rules every device must follow.

It checks what the IB spec makes the kernel check (the QP state machine and the attribute
masks of each transition, IBA 11.2.5 / table in ib_modify_qp_is_ok), keeps every object a
process created in its ucontext, and destroys them all, in dependency order, when the context
is closed (process exit). The vendor driver (hw/) does what the device needs.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from enum import IntEnum

from driver.kernel.hw.nsnic import HwCq, HwError, HwMr, HwQp, NsnicDriver
from nicsim.host.host import Host
from nicsim.host.memory import AddressSpace
from nicsim.hwif import Access, QpAttrMask, Qpc, QpState, QpType, blank_qpc


class KernelError(Exception):
    def __init__(self, msg: str, errno_: int) -> None:
        super().__init__(msg)
        self.errno = errno_


M = QpAttrMask
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


def modify_is_ok(cur: QpState, nxt: QpState, mask: int) -> bool:
    """ib_modify_qp_is_ok for RC: the transition exists and the mask has exactly the required
    attributes plus any of the optional ones."""
    if nxt in (QpState.RESET, QpState.ERR):
        return not mask & ~(M.STATE | M.CUR_STATE)
    rule = _RC_TRANSITIONS.get((cur, nxt))
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
class IbCq:
    handle: int
    hw: HwCq
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


@dataclass
class Ucontext:
    """Everything one process opened on one device."""

    dev: IbDevice
    aspace: AddressSpace
    objects: dict[int, object] = field(default_factory=dict)
    next_handle: int = 1
    closed: bool = False

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

    def __init__(self, name: str, hw: NsnicDriver) -> None:
        self.name = name
        self.hw = hw
        self._pdns = 1

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
        # Remote write/atomic access needs local write (IBA 10.6.3.1; ib_check_mr_access).
        if access & (Access.REMOTE_WRITE | Access.REMOTE_ATOMIC) and not access & \
                Access.LOCAL_WRITE:
            raise KernelError("remote write access requires local write", errno.EINVAL)
        if access & ~0xF:
            raise KernelError(f"unsupported access flags 0x{access:x}", errno.EINVAL)
        hw = _hw(lambda: self.hw.reg_mr(uctx.aspace, va, length, access, pd.pdn))
        mr = IbMr(0, pd, hw, access)
        mr.handle = uctx.add(mr)
        pd.users += 1
        return mr

    def dereg_mr(self, uctx: Ucontext, mr: IbMr) -> None:
        _hw(lambda: self.hw.dereg_mr(mr.hw))
        mr.pd.users -= 1
        del uctx.objects[mr.handle]

    def create_cq(self, uctx: Ucontext, cqe: int) -> IbCq:
        hw = _hw(lambda: self.hw.create_cq(cqe))
        cq = IbCq(0, hw)
        cq.handle = uctx.add(cq)
        return cq

    def destroy_cq(self, uctx: Ucontext, cq: IbCq) -> None:
        if cq.users:
            raise KernelError("CQ still in use", errno.EBUSY)
        _hw(lambda: self.hw.destroy_cq(cq.hw))
        del uctx.objects[cq.handle]

    def create_qp(self, uctx: Ucontext, pd: IbPd, qp_type: int, send_cq: IbCq, recv_cq: IbCq,
                  cap: tuple[int, int, int, int, int]) -> IbQp:
        try:
            t = QpType(qp_type)
        except ValueError:
            raise KernelError(f"unknown QP type {qp_type}", errno.EINVAL) from None
        if t is not QpType.RC:
            raise KernelError(f"QP type {t.name} is not supported by nsnic yet", errno.EOPNOTSUPP)
        hw = _hw(lambda: self.hw.create_qp(t, pd.pdn, send_cq.hw.cqn, recv_cq.hw.cqn, *cap))
        qp = IbQp(0, pd, send_cq, recv_cq, hw, t)
        qp.attrs = blank_qpc(hw.qpn)
        qp.handle = uctx.add(qp)
        pd.users += 1
        send_cq.users += 1
        recv_cq.users += 1
        return qp

    def modify_qp(self, qp: IbQp, attrs: Qpc, mask: int) -> None:
        cur = qp.state
        if mask & M.CUR_STATE and attrs.state != cur and not mask & M.STATE:
            raise KernelError("cur_qp_state does not match", errno.EINVAL)
        nxt = QpState(attrs.state) if mask & M.STATE else cur
        if not modify_is_ok(cur, nxt, mask):
            raise KernelError(f"invalid QP transition {cur.name}->{nxt.name} with attr mask "
                              f"0x{mask:x}", errno.EINVAL)
        a = qp.attrs
        if mask & M.ACCESS_FLAGS:
            if attrs.access & ~0xF:
                raise KernelError("bad qp_access_flags", errno.EINVAL)
            a.access = attrs.access
        if mask & M.PATH_MTU:
            if not 1 <= attrs.path_mtu <= 5:
                raise KernelError(f"bad path MTU {attrs.path_mtu}", errno.EINVAL)
            a.path_mtu = attrs.path_mtu
        if mask & M.MAX_QP_RD_ATOMIC and attrs.max_rd_atomic > self.hw.caps.max_qp_rd_atom:
            raise KernelError("max_rd_atomic beyond device limit", errno.EINVAL)
        if mask & M.MAX_DEST_RD_ATOMIC and attrs.max_dest_rd_atomic > \
                self.hw.caps.max_qp_rd_atom:
            raise KernelError("max_dest_rd_atomic beyond device limit", errno.EINVAL)
        for m, name in ((M.DEST_QPN, "dest_qpn"), (M.RQ_PSN, "rq_psn"), (M.SQ_PSN, "sq_psn"),
                        (M.TIMEOUT, "timeout"), (M.RETRY_CNT, "retry_cnt"),
                        (M.RNR_RETRY, "rnr_retry"), (M.MIN_RNR_TIMER, "min_rnr_timer"),
                        (M.MAX_QP_RD_ATOMIC, "max_rd_atomic"),
                        (M.MAX_DEST_RD_ATOMIC, "max_dest_rd_atomic"), (M.QKEY, "qkey")):
            if mask & m:
                setattr(a, name, getattr(attrs, name))
        if mask & M.AV:
            a.dgid, a.traffic_class = attrs.dgid, attrs.traffic_class
            a.sgid = _hw(lambda: self.hw.gid(0))
            a.smac = bytes(int(x, 16) for x in self.hw.fn.netdev.mac.split(":"))
            a.dmac = _hw(lambda: self.hw.resolve_dmac(attrs.dgid))
        a.state = nxt
        a.attr_mask = mask
        _hw(lambda: self.hw.modify_qp(a))
        qp.state = nxt
        if nxt is QpState.RESET:
            qp.attrs = blank_qpc(qp.hw.qpn)

    def query_qp(self, qp: IbQp) -> Qpc:
        return _hw(lambda: self.hw.query_qp(qp.hw.qpn))

    def destroy_qp(self, uctx: Ucontext, qp: IbQp) -> None:
        _hw(lambda: self.hw.destroy_qp(qp.hw))
        qp.pd.users -= 1
        qp.send_cq.users -= 1
        qp.recv_cq.users -= 1
        del uctx.objects[qp.handle]

    def close(self, uctx: Ucontext) -> None:
        """Process exit: destroy everything, QPs first, then MRs, CQs and PDs
        (ib_uverbs_cleanup_ucontext's order), so the NIC keeps no working QP or key."""
        for kind, destroy in ((IbQp, self.destroy_qp), (IbMr, self.dereg_mr),
                              (IbCq, self.destroy_cq), (IbPd, self.dealloc_pd)):
            for obj in [o for o in uctx.objects.values() if isinstance(o, kind)]:
                destroy(uctx, obj)  # type: ignore[operator]
        uctx.closed = True


def _hw(fn):  # noqa: ANN001, ANN202
    try:
        return fn()
    except HwError as e:
        raise KernelError(str(e), e.errno) from None


class Kernel:
    """The kernel of one host: probes the nsnic functions plugged into it."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.devices: dict[str, IbDevice] = {}
        for i, (name, fn) in enumerate(sorted(host.functions.items())):
            ibname = f"nsnic{i}"
            self.devices[ibname] = IbDevice(ibname, NsnicDriver(host, fn, name))
        host.kernel = self
