"""uverbs: the command ABI between the user-space verbs library and the kernel.

A process opens a device (`open`), gets a file, and issues commands through `write`, each a
typed request answered by a typed response, as ib_uverbs_write() does with its command
structs. Every command is a user/kernel crossing and costs a syscall of CPU time; the file
counts them, which is how tests show the data path never comes here.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from enum import IntEnum

from nicsim.driver.kernel.events import CompChannel
from nicsim.driver.kernel.ib_core import (
    IbAh,
    IbCq,
    IbMr,
    IbMw,
    IbPd,
    IbQp,
    IbSrq,
    Kernel,
    KernelError,
    Ucontext,
)

from nicsim.host.host import Host
from nicsim.host.memory import AddressSpace
from nicsim.hwif import Qpc, UarReg, uar_offset


class Cmd(IntEnum):
    """The subset of IB_USER_VERBS_CMD_* nsnic implements."""

    GET_CONTEXT = 0
    QUERY_DEVICE = 1
    QUERY_PORT = 2
    ALLOC_PD = 3
    DEALLOC_PD = 4
    CREATE_AH = 5
    DESTROY_AH = 8
    REG_MR = 9
    REREG_MR = 11
    DEREG_MR = 13
    ALLOC_MW = 14
    DEALLOC_MW = 16
    CREATE_COMP_CHANNEL = 17
    CREATE_CQ = 18
    RESIZE_CQ = 19
    DESTROY_CQ = 20
    ATTACH_MCAST = 22
    DETACH_MCAST = 23
    CREATE_QP = 24
    QUERY_QP = 25
    MODIFY_QP = 26
    DESTROY_QP = 27
    CREATE_SRQ = 32
    MODIFY_SRQ = 33
    QUERY_SRQ = 34
    DESTROY_SRQ = 35
    # The GID and P_Key tables (UVERBS_METHOD_QUERY_GID_ENTRY and sysfs in Linux).
    QUERY_GID = 0x1001
    QUERY_PKEY = 0x1002
    # nsnic's own: a CQ's state. It stands in for the CQ_ERR asynchronous event (ib_uverbs'
    # async event file) until the device's event queues exist.
    QUERY_CQ = 0x1000
    # Reads and closes of event files (ib_uverbs' event file operations).
    GET_CQ_EVENT = 0x1003  # read a completion channel: the CQ handle of its next event
    GET_ASYNC_EVENT = 0x1004  # read the async event file
    DESTROY_COMP_CHANNEL = 0x1005  # close a completion channel
    # Extended commands (ib_uverbs' ex commands and ioctl methods).
    QUERY_ODP_CAPS = 0x1006  # the odp_caps of IB_USER_VERBS_EX_CMD_QUERY_DEVICE
    ADVISE_MR = 0x1007  # UVERBS_METHOD_ADVISE_MR


@dataclass
class CreateQpResp:
    handle: int
    qpn: int
    sq_va: int
    sq_log_size: int
    sq_log_stride: int
    rq_va: int
    rq_log_size: int
    rq_log_stride: int


@dataclass
class CreateSrqResp:
    handle: int
    srqn: int
    ring_va: int
    log_size: int
    log_stride: int
    max_wr: int


@dataclass
class CreateCqResp:
    handle: int
    cqn: int
    ring_va: int
    log_size: int
    dbrec_va: int


def cq_resp(u: Ucontext, cq: IbCq) -> CreateCqResp:
    """What the provider needs of a new CQ: its ring and doorbell record, as mapped."""
    hw = cq.hw
    return CreateCqResp(cq.handle, hw.cqn, u.rings.va(hw.ring_pa), hw.log_size,
                        u.rings.va(hw.dbrec_pa))


def qp_resp(u: Ucontext, qp: IbQp) -> CreateQpResp:
    """What the provider needs of a new QP: its rings, as mapped."""
    hw = qp.hw
    return CreateQpResp(qp.handle, hw.qpn, u.rings.va(hw.sq_pa), hw.sq_log_size,
                        hw.sq_log_stride, u.rings.va(hw.rq_pa), hw.rq_log_size,
                        hw.rq_log_stride)


class UverbsError(Exception):
    def __init__(self, msg: str, errno_: int) -> None:
        super().__init__(msg)
        self.errno = errno_


class DoorbellPage:
    """The process's doorbell page (its UAR) mmap'ed from BAR0: SQ/RQ doorbells and CQ arm
    for its own QPs and CQs only. Writes go straight to the device; nothing here enters the
    kernel."""

    def __init__(self, bar: object, uar: int, bf_size: int = 0) -> None:
        self._bar = bar
        self.uar = uar
        self.mapped = True
        self.bf_size = bf_size  # the page's BlueFlame buffer (hwif UarReg.BF; 0: none)

    def write_bf(self, data: bytes) -> None:
        """A BlueFlame write: the SQ doorbell word and the WQE, one write-combined burst."""
        if not self.mapped:
            raise UverbsError("doorbell page is no longer mapped", errno.EFAULT)
        if not 8 <= len(data) <= self.bf_size:
            raise UverbsError(f"BlueFlame write of {len(data)} bytes (buffer "
                              f"{self.bf_size})", errno.EINVAL)
        self._bar.write_block(uar_offset(self.uar, UarReg.BF), data)  # type: ignore

    def write64(self, reg: UarReg, value: int) -> None:
        if not self.mapped:
            # Closing the device file zaps the mapping: the page number may go to another
            # process, and a store through the old mapping must not reach its queues.
            raise UverbsError("doorbell page is no longer mapped", errno.EFAULT)
        if reg not in _UAR_REGS:
            raise UverbsError(f"offset {reg!r} is not a doorbell register", errno.EFAULT)
        # The store's CPU time is part of the provider's per-post cost.
        self._bar.write64(uar_offset(self.uar, reg), value, cpu=False)  # type: ignore


_UAR_REGS = frozenset(UarReg) - {UarReg.BF}  # BF takes bursts (write_bf), not stores


class UverbsFile:
    """An open /dev/infiniband/uverbsN."""

    def __init__(self, host: Host, kernel: Kernel, dev_name: str, aspace: AddressSpace,
                 privileged: bool = False) -> None:
        dev = kernel.devices.get(dev_name)
        if dev is None:
            raise UverbsError(f"no RDMA device {dev_name!r}", errno.ENODEV)
        self.host = host
        self.dev = dev
        self.uctx = dev.open(aspace, privileged)
        self.commands = 0
        self.doorbells = DoorbellPage(dev.hw.bar, self.uctx.uar, dev.hw.bf_size)
        # The descriptor a program sees for /dev/infiniband/uverbsN: a real one of the
        # process (of /dev/null), so what programs do with descriptors (os.dup, fcntl)
        # works; the simulated device is reached through this object, never through it.
        self.fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)

    def _enter(self) -> None:
        if self.uctx.closed:
            raise UverbsError("device file is closed", errno.EBADF)
        self.commands += 1
        self.host.spend(self.host.costs.syscall)

    def write(self, cmd: Cmd, **args: object) -> object:
        """Execute one command. Errors come back as UverbsError with the kernel's errno."""
        self._enter()
        try:
            return self._dispatch(cmd, args)
        except KernelError as e:
            raise UverbsError(str(e), e.errno) from None

    def _dispatch(self, cmd: Cmd, a: dict) -> object:  # noqa: C901
        dev, u = self.dev, self.uctx
        if cmd is Cmd.QUERY_DEVICE:
            return dev.query_device()
        if cmd is Cmd.QUERY_ODP_CAPS:
            return dev.query_odp_caps()
        if cmd is Cmd.ADVISE_MR:
            dev.advise_mr(u, u.get(a["pd"], IbPd), a["advice"], a["flags"],  # type: ignore
                          a["sges"])  # type: ignore[arg-type]
            return None
        if cmd is Cmd.QUERY_PORT:
            return dev.query_port(a["port"])  # type: ignore[arg-type]
        if cmd is Cmd.QUERY_GID:
            return dev.query_gid(a["port"], a["index"])  # type: ignore[arg-type]
        if cmd is Cmd.QUERY_PKEY:
            return dev.query_pkey(a["port"], a["index"])  # type: ignore[arg-type]
        if cmd is Cmd.CREATE_AH:
            pd = u.get(a["pd"], IbPd)
            av = dev.resolve_av(**a["av"])  # type: ignore[arg-type]
            return dev.create_ah(u, pd, av).handle, av  # type: ignore[arg-type]
        if cmd is Cmd.DESTROY_AH:
            dev.destroy_ah(u, u.get(a["ah"], IbAh))  # type: ignore[arg-type]
            return None
        if cmd is Cmd.ALLOC_PD:
            return dev.alloc_pd(u).handle
        if cmd is Cmd.DEALLOC_PD:
            dev.dealloc_pd(u, u.get(a["pd"], IbPd))  # type: ignore[arg-type]
            return None
        if cmd is Cmd.REG_MR:
            mr = dev.reg_mr(u, u.get(a["pd"], IbPd), a["va"], a["length"],  # type: ignore
                            a["access"])
            return mr.handle, mr.hw.key
        if cmd is Cmd.REREG_MR:
            mr = u.get(a["mr"], IbMr)
            pd = a.get("pd")
            dev.rereg_mr(mr, a["flags"], None if pd is None else u.get(pd, IbPd),  # type: ignore
                         a["va"], a["length"], a["access"])  # type: ignore[arg-type]
            return mr.hw.key  # type: ignore[attr-defined]
        if cmd is Cmd.ALLOC_MW:
            mw = dev.alloc_mw(u, u.get(a["pd"], IbPd), a["mw_type"])  # type: ignore[arg-type]
            return mw.handle, mw.key
        if cmd is Cmd.DEALLOC_MW:
            dev.dealloc_mw(u, u.get(a["mw"], IbMw))  # type: ignore[arg-type]
            return None
        if cmd is Cmd.DEREG_MR:
            dev.dereg_mr(u, u.get(a["mr"], IbMr))  # type: ignore[arg-type]
            return None
        if cmd is Cmd.CREATE_COMP_CHANNEL:
            ch = dev.create_comp_channel(u)
            return ch.handle, ch.fd
        if cmd is Cmd.DESTROY_COMP_CHANNEL:
            dev.destroy_comp_channel(u, u.get(a["channel"], CompChannel))  # type: ignore
            return None
        if cmd is Cmd.GET_CQ_EVENT:
            return dev.get_cq_event(u.get(a["channel"], CompChannel)).handle  # type: ignore
        if cmd is Cmd.GET_ASYNC_EVENT:
            return dev.get_async_event(u)
        if cmd is Cmd.CREATE_CQ:
            ch = a.get("channel")
            cq = dev.create_cq(u, a["cqe"],  # type: ignore[arg-type]
                               None if ch is None else u.get(ch, CompChannel))  # type: ignore
            return cq_resp(u, cq)  # type: ignore[arg-type]
        if cmd is Cmd.QUERY_CQ:
            return dev.query_cq(u.get(a["cq"], IbCq))  # type: ignore[arg-type]
        if cmd is Cmd.RESIZE_CQ:
            cq = u.get(a["cq"], IbCq)  # type: ignore[assignment]
            dev.resize_cq(u, cq, a["cqe"])  # type: ignore[arg-type]
            return u.rings.va(cq.hw.ring_pa), cq.hw.log_size
        if cmd is Cmd.DESTROY_CQ:
            dev.destroy_cq(u, u.get(a["cq"], IbCq))  # type: ignore[arg-type]
            return None
        if cmd is Cmd.CREATE_SRQ:
            srq = dev.create_srq(u, u.get(a["pd"], IbPd), a["max_wr"],  # type: ignore
                                 a["max_sge"], a["limit"])  # type: ignore[arg-type]
            h = srq.hw
            return CreateSrqResp(srq.handle, h.srqn, u.rings.va(h.ring_pa), h.log_size,
                                 h.log_stride, srq.max_wr)
        if cmd is Cmd.MODIFY_SRQ:
            srq = u.get(a["srq"], IbSrq)  # type: ignore[assignment]
            dev.modify_srq(u, srq, a.get("max_wr"),  # type: ignore[arg-type]
                           a.get("limit"))  # type: ignore[arg-type]
            return u.rings.va(srq.hw.ring_pa), srq.hw.log_size, srq.max_wr
        if cmd is Cmd.QUERY_SRQ:
            srq = u.get(a["srq"], IbSrq)
            return srq, dev.query_srq(srq)  # type: ignore[arg-type]
        if cmd is Cmd.DESTROY_SRQ:
            dev.destroy_srq(u, u.get(a["srq"], IbSrq))  # type: ignore[arg-type]
            return None
        if cmd is Cmd.CREATE_QP:
            srq = a.get("srq")
            qp = dev.create_qp(u, u.get(a["pd"], IbPd), a["qp_type"],  # type: ignore
                               u.get(a["send_cq"], IbCq), u.get(a["recv_cq"], IbCq),
                               a["cap"], None if srq is None else u.get(srq, IbSrq))  # type: ignore
            return qp_resp(u, qp)  # type: ignore[arg-type]
        if cmd is Cmd.MODIFY_QP:
            qp = u.get(a["qp"], IbQp)
            attrs: Qpc = a["attrs"]  # type: ignore[assignment]
            dev.modify_qp(qp, attrs, a["mask"], a.get("cur_state"),  # type: ignore[arg-type]
                          a.get("pkey_index", 0), a.get("port", 1))  # type: ignore[arg-type]
            return None
        if cmd is Cmd.QUERY_QP:
            return dev.query_qp(u.get(a["qp"], IbQp))  # type: ignore[arg-type]
        if cmd is Cmd.ATTACH_MCAST or cmd is Cmd.DETACH_MCAST:
            dev.attach_mcast(u.get(a["qp"], IbQp), a["gid"], a["lid"],  # type: ignore[arg-type]
                             attach=cmd is Cmd.ATTACH_MCAST)
            return None
        if cmd is Cmd.DESTROY_QP:
            dev.destroy_qp(u, u.get(a["qp"], IbQp))  # type: ignore[arg-type]
            return None
        raise UverbsError(f"command {cmd!r} not supported", errno.EOPNOTSUPP)

    def close(self) -> None:
        if not self.uctx.closed:
            self.host.spend(self.host.costs.syscall)
            self.doorbells.mapped = False
            self.dev.close(self.uctx)
            os.close(self.fd)


def open_device(host: Host, dev_name: str, aspace: AddressSpace,
                privileged: bool = False) -> UverbsFile:
    """Open /dev/infiniband/uverbsN; `privileged`: the process has CAP_NET_RAW."""
    kernel = host.kernel
    if not isinstance(kernel, Kernel):
        raise UverbsError(f"host {host.name} has no RDMA kernel stack", errno.ENODEV)
    host.spend(host.costs.syscall)
    return UverbsFile(host, kernel, dev_name, aspace, privileged)
