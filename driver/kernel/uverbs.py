"""uverbs: the command ABI between the user-space verbs library and the kernel.

A process opens a device (`open`), gets a file, and issues commands through `write`, each a
typed request answered by a typed response, as ib_uverbs_write() does with its command
structs. Every command is a user/kernel crossing and costs a syscall of CPU time; the file
counts them, which is how tests show the data path never comes here.
"""

from __future__ import annotations

import errno
import os

from nicsim.driver.abi import (
    Cmd,
    CreateCqResp,
    CreateQpResp,
    CreateSrqResp,
    DoorbellPage,
    UverbsError,
)
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
from nicsim.hwif import Qpc


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
