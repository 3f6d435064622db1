"""uverbs: the command ABI between the user-space verbs library and the kernel.

A process opens a device (`open`), gets a file, and issues commands through `write`, each a
typed request answered by a typed response, as ib_uverbs_write() does with its command
structs. Every command is a user/kernel crossing and costs a syscall of CPU time; the file
counts them, which is how tests show the data path never comes here.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Any

from nicsim.driver import abi as a
from nicsim.driver.abi import CreateCqResp, CreateQpResp, DoorbellPage, UverbsError
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
from nicsim.hwif import DevCap


def cq_resp(u: Ucontext, cq: IbCq) -> CreateCqResp:
    """What the provider needs of a new CQ: its ring and doorbell record, as mapped."""
    hw = cq.hw
    return CreateCqResp(cq.handle, hw.cqn, u.rings.va(hw.ring_pa), hw.log_size,
                        u.rings.va(hw.dbrec_pa), hw.stride.bit_length() - 1)


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
        self.context = a.ContextResp(atomics=not dev.hw.caps.flags & DevCap.NO_ATOMICS)
        # The descriptor a program sees for /dev/infiniband/uverbsN: a real one of the
        # process (of /dev/null), so what programs do with descriptors (os.dup, fcntl)
        # works; the simulated device is reached through this object, never through it.
        self.fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)

    def _enter(self) -> None:
        if self.uctx.closed:
            raise UverbsError("device file is closed", errno.EBADF)
        self.commands += 1
        self.host.spend(self.host.costs.syscall)

    def write(self, req: a.Request) -> object:
        """Execute one command. Errors come back as UverbsError with the kernel's errno."""
        self._enter()
        handler = _HANDLERS.get(type(req))
        if handler is None:
            raise UverbsError(f"command {req!r} not supported", errno.EOPNOTSUPP)
        try:
            return handler(self, req)
        except KernelError as e:
            raise UverbsError(str(e), e.errno) from None

    # -- the commands (ib_uverbs_write's table) ------------------------------------------------

    def _query_device(self, _r: a.QueryDevice) -> object:
        return self.dev.query_device()

    def _query_odp_caps(self, _r: a.QueryOdpCaps) -> object:
        return self.dev.query_odp_caps()

    def _query_port(self, r: a.QueryPort) -> object:
        return self.dev.query_port(r.port)

    def _query_gid(self, r: a.QueryGid) -> object:
        return self.dev.query_gid(r.port, r.index)

    def _query_pkey(self, r: a.QueryPkey) -> object:
        return self.dev.query_pkey(r.port, r.index)

    def _get_async_event(self, _r: a.GetAsyncEvent) -> object:
        return self.dev.get_async_event(self.uctx)

    def _alloc_pd(self, _r: a.AllocPd) -> int:
        return self.dev.alloc_pd(self.uctx).handle

    def _dealloc_pd(self, r: a.DeallocPd) -> None:
        self.dev.dealloc_pd(self.uctx, self.uctx.get(r.pd, IbPd))

    def _create_ah(self, r: a.CreateAh) -> tuple[int, object]:
        u = self.uctx
        pd = u.get(r.pd, IbPd)
        v = r.av
        av = self.dev.resolve_av(v.port, v.is_global, v.dgid, v.sgid_index, v.traffic_class,
                                 v.hop_limit, v.flow_label, v.sl)
        return self.dev.create_ah(u, pd, av).handle, av

    def _destroy_ah(self, r: a.DestroyAh) -> None:
        self.dev.destroy_ah(self.uctx, self.uctx.get(r.ah, IbAh))

    def _reg_mr(self, r: a.RegMr) -> tuple[int, int]:
        u = self.uctx
        mr = self.dev.reg_mr(u, u.get(r.pd, IbPd), r.va, r.length, r.access)
        return mr.handle, mr.hw.key

    def _rereg_mr(self, r: a.ReregMr) -> int:
        u = self.uctx
        mr = u.get(r.mr, IbMr)
        self.dev.rereg_mr(mr, r.flags, None if r.pd is None else u.get(r.pd, IbPd), r.va,
                          r.length, r.access)
        return mr.hw.key

    def _dereg_mr(self, r: a.DeregMr) -> None:
        self.dev.dereg_mr(self.uctx, self.uctx.get(r.mr, IbMr))

    def _advise_mr(self, r: a.AdviseMr) -> None:
        u = self.uctx
        self.dev.advise_mr(u, u.get(r.pd, IbPd), r.advice, r.flags, r.sges)

    def _alloc_mw(self, r: a.AllocMw) -> tuple[int, int]:
        u = self.uctx
        mw = self.dev.alloc_mw(u, u.get(r.pd, IbPd), r.mw_type)
        return mw.handle, mw.key

    def _dealloc_mw(self, r: a.DeallocMw) -> None:
        self.dev.dealloc_mw(self.uctx, self.uctx.get(r.mw, IbMw))

    def _create_comp_channel(self, _r: a.CreateCompChannel) -> tuple[int, int]:
        ch = self.dev.create_comp_channel(self.uctx)
        return ch.handle, ch.fd

    def _destroy_comp_channel(self, r: a.DestroyCompChannel) -> None:
        self.dev.destroy_comp_channel(self.uctx, self.uctx.get(r.channel, CompChannel))

    def _get_cq_event(self, r: a.GetCqEvent) -> int:
        return self.dev.get_cq_event(self.uctx.get(r.channel, CompChannel)).handle

    def _create_cq(self, r: a.CreateCq) -> a.CreateCqResp:
        u = self.uctx
        ch = None if r.channel is None else u.get(r.channel, CompChannel)
        return cq_resp(u, self.dev.create_cq(u, r.cqe, ch))

    def _query_cq(self, r: a.QueryCq) -> object:
        return self.dev.query_cq(self.uctx.get(r.cq, IbCq))

    def _resize_cq(self, r: a.ResizeCq) -> tuple[int, int]:
        u = self.uctx
        cq = u.get(r.cq, IbCq)
        self.dev.resize_cq(u, cq, r.cqe)
        return u.rings.va(cq.hw.ring_pa), cq.hw.log_size

    def _destroy_cq(self, r: a.DestroyCq) -> None:
        self.dev.destroy_cq(self.uctx, self.uctx.get(r.cq, IbCq))

    def _create_srq(self, r: a.CreateSrq) -> a.CreateSrqResp:
        u = self.uctx
        srq = self.dev.create_srq(u, u.get(r.pd, IbPd), r.max_wr, r.max_sge, r.limit)
        h = srq.hw
        return a.CreateSrqResp(srq.handle, h.srqn, u.rings.va(h.ring_pa), h.log_size,
                               h.log_stride, srq.max_wr)

    def _modify_srq(self, r: a.ModifySrq) -> tuple[int, int, int]:
        u = self.uctx
        srq = u.get(r.srq, IbSrq)
        self.dev.modify_srq(u, srq, r.max_wr, r.limit)
        return u.rings.va(srq.hw.ring_pa), srq.hw.log_size, srq.max_wr

    def _query_srq(self, r: a.QuerySrq) -> tuple[IbSrq, object]:
        srq = self.uctx.get(r.srq, IbSrq)
        return srq, self.dev.query_srq(srq)

    def _destroy_srq(self, r: a.DestroySrq) -> None:
        self.dev.destroy_srq(self.uctx, self.uctx.get(r.srq, IbSrq))

    def _create_qp(self, r: a.CreateQp) -> a.CreateQpResp:
        u = self.uctx
        srq = None if r.srq is None else u.get(r.srq, IbSrq)
        qp = self.dev.create_qp(u, u.get(r.pd, IbPd), r.qp_type, u.get(r.send_cq, IbCq),
                                u.get(r.recv_cq, IbCq), r.cap, srq)
        return qp_resp(u, qp)

    def _modify_qp(self, r: a.ModifyQp) -> None:
        self.dev.modify_qp(self.uctx.get(r.qp, IbQp), r.attrs, r.mask, r.cur_state,
                           r.pkey_index, r.port)

    def _query_qp(self, r: a.QueryQp) -> object:
        return self.dev.query_qp(self.uctx.get(r.qp, IbQp))

    def _attach_mcast(self, r: a.AttachMcast) -> None:
        self.dev.attach_mcast(self.uctx.get(r.qp, IbQp), r.gid, r.lid, attach=True)

    def _detach_mcast(self, r: a.DetachMcast) -> None:
        self.dev.attach_mcast(self.uctx.get(r.qp, IbQp), r.gid, r.lid, attach=False)

    def _destroy_qp(self, r: a.DestroyQp) -> None:
        self.dev.destroy_qp(self.uctx, self.uctx.get(r.qp, IbQp))

    def close(self) -> None:
        if not self.uctx.closed:
            self.host.spend(self.host.costs.syscall)
            self.doorbells.mapped = False
            self.dev.close(self.uctx)
            os.close(self.fd)


# Request record -> its handler: ib_uverbs_write's command table.
_HANDLERS: dict[type[a.Request], Callable[[UverbsFile, Any], object]] = {
    a.QueryDevice: UverbsFile._query_device, a.QueryOdpCaps: UverbsFile._query_odp_caps,
    a.QueryPort: UverbsFile._query_port, a.QueryGid: UverbsFile._query_gid,
    a.QueryPkey: UverbsFile._query_pkey, a.GetAsyncEvent: UverbsFile._get_async_event,
    a.AllocPd: UverbsFile._alloc_pd, a.DeallocPd: UverbsFile._dealloc_pd,
    a.CreateAh: UverbsFile._create_ah, a.DestroyAh: UverbsFile._destroy_ah,
    a.RegMr: UverbsFile._reg_mr, a.ReregMr: UverbsFile._rereg_mr,
    a.DeregMr: UverbsFile._dereg_mr, a.AdviseMr: UverbsFile._advise_mr,
    a.AllocMw: UverbsFile._alloc_mw, a.DeallocMw: UverbsFile._dealloc_mw,
    a.CreateCompChannel: UverbsFile._create_comp_channel,
    a.DestroyCompChannel: UverbsFile._destroy_comp_channel,
    a.GetCqEvent: UverbsFile._get_cq_event, a.CreateCq: UverbsFile._create_cq,
    a.QueryCq: UverbsFile._query_cq, a.ResizeCq: UverbsFile._resize_cq,
    a.DestroyCq: UverbsFile._destroy_cq, a.CreateSrq: UverbsFile._create_srq,
    a.ModifySrq: UverbsFile._modify_srq, a.QuerySrq: UverbsFile._query_srq,
    a.DestroySrq: UverbsFile._destroy_srq, a.CreateQp: UverbsFile._create_qp,
    a.ModifyQp: UverbsFile._modify_qp, a.QueryQp: UverbsFile._query_qp,
    a.AttachMcast: UverbsFile._attach_mcast, a.DetachMcast: UverbsFile._detach_mcast,
    a.DestroyQp: UverbsFile._destroy_qp,
}


def open_device(host: Host, dev_name: str, aspace: AddressSpace,
                privileged: bool = False) -> UverbsFile:
    """Open /dev/infiniband/uverbsN; `privileged`: the process has CAP_NET_RAW."""
    kernel = host.kernel
    if not isinstance(kernel, Kernel):
        raise UverbsError(f"host {host.name} has no RDMA kernel stack", errno.ENODEV)
    host.spend(host.costs.syscall)
    return UverbsFile(host, kernel, dev_name, aspace, privileged)
