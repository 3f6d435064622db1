"""The user/kernel ABI of the nsnic verbs (what include/uapi/rdma/ib_user_verbs.h and a
provider's ABI header are to rdma-core): the uverbs command numbers, a typed record per
request and the records the kernel answers with, the error a command returns, and the
doorbell page the process maps.
Both the kernel (nicsim.driver.kernel.uverbs) and user space (the verbs library and the ring
code, nicsim.driver.rings) use it; neither imports the other for it."""

from __future__ import annotations

import errno
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

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


# -- requests ----------------------------------------------------------------------------------
# One record per command, as ib_uverbs has a struct per command: what user space passes
# (object handles, not objects). The kernel checks every value; a program may pass anything.


@dataclass(frozen=True)
class Request:
    cmd: ClassVar[Cmd]


@dataclass(frozen=True)
class QueryDevice(Request):
    cmd = Cmd.QUERY_DEVICE


@dataclass(frozen=True)
class QueryOdpCaps(Request):
    cmd = Cmd.QUERY_ODP_CAPS


@dataclass(frozen=True)
class QueryPort(Request):
    cmd = Cmd.QUERY_PORT
    port: int


@dataclass(frozen=True)
class QueryGid(Request):
    cmd = Cmd.QUERY_GID
    port: int
    index: int


@dataclass(frozen=True)
class QueryPkey(Request):
    cmd = Cmd.QUERY_PKEY
    port: int
    index: int


@dataclass(frozen=True)
class GetAsyncEvent(Request):
    cmd = Cmd.GET_ASYNC_EVENT


@dataclass(frozen=True)
class AllocPd(Request):
    cmd = Cmd.ALLOC_PD


@dataclass(frozen=True)
class DeallocPd(Request):
    cmd = Cmd.DEALLOC_PD
    pd: int


@dataclass(frozen=True)
class AddressVector:
    """ibv_ah_attr as the kernel takes it (CREATE_AH)."""

    port: int
    is_global: int
    dgid: bytes | None
    sgid_index: int
    traffic_class: int
    hop_limit: int
    flow_label: int
    sl: int


@dataclass(frozen=True)
class CreateAh(Request):
    cmd = Cmd.CREATE_AH
    pd: int
    av: AddressVector


@dataclass(frozen=True)
class DestroyAh(Request):
    cmd = Cmd.DESTROY_AH
    ah: int


@dataclass(frozen=True)
class RegMr(Request):
    cmd = Cmd.REG_MR
    pd: int
    va: int
    length: int
    access: int


@dataclass(frozen=True)
class ReregMr(Request):
    cmd = Cmd.REREG_MR
    mr: int
    flags: int
    pd: int | None  # (IBV_REREG_MR_CHANGE_PD only)
    va: int
    length: int
    access: int


@dataclass(frozen=True)
class DeregMr(Request):
    cmd = Cmd.DEREG_MR
    mr: int


@dataclass(frozen=True)
class AdviseMr(Request):
    cmd = Cmd.ADVISE_MR
    pd: int
    advice: int
    flags: int
    sges: list[tuple[int, int, int]]  # (addr, length, lkey)


@dataclass(frozen=True)
class AllocMw(Request):
    cmd = Cmd.ALLOC_MW
    pd: int
    mw_type: int


@dataclass(frozen=True)
class DeallocMw(Request):
    cmd = Cmd.DEALLOC_MW
    mw: int


@dataclass(frozen=True)
class CreateCompChannel(Request):
    cmd = Cmd.CREATE_COMP_CHANNEL


@dataclass(frozen=True)
class DestroyCompChannel(Request):
    cmd = Cmd.DESTROY_COMP_CHANNEL
    channel: int


@dataclass(frozen=True)
class GetCqEvent(Request):
    cmd = Cmd.GET_CQ_EVENT
    channel: int


@dataclass(frozen=True)
class CreateCq(Request):
    cmd = Cmd.CREATE_CQ
    cqe: int
    channel: int | None = None


@dataclass(frozen=True)
class QueryCq(Request):
    cmd = Cmd.QUERY_CQ
    cq: int


@dataclass(frozen=True)
class ResizeCq(Request):
    cmd = Cmd.RESIZE_CQ
    cq: int
    cqe: int


@dataclass(frozen=True)
class DestroyCq(Request):
    cmd = Cmd.DESTROY_CQ
    cq: int


@dataclass(frozen=True)
class CreateSrq(Request):
    cmd = Cmd.CREATE_SRQ
    pd: int
    max_wr: int
    max_sge: int
    limit: int


@dataclass(frozen=True)
class ModifySrq(Request):
    cmd = Cmd.MODIFY_SRQ
    srq: int
    max_wr: int | None  # None: not in the attribute mask
    limit: int | None


@dataclass(frozen=True)
class QuerySrq(Request):
    cmd = Cmd.QUERY_SRQ
    srq: int


@dataclass(frozen=True)
class DestroySrq(Request):
    cmd = Cmd.DESTROY_SRQ
    srq: int


@dataclass(frozen=True)
class CreateQp(Request):
    cmd = Cmd.CREATE_QP
    pd: int
    qp_type: int
    send_cq: int
    recv_cq: int
    cap: tuple[int, int, int, int, int]  # max send/recv WRs, send/recv SGEs, inline data
    srq: int | None = None


@dataclass(frozen=True)
class ModifyQp(Request):
    cmd = Cmd.MODIFY_QP
    qp: int
    attrs: Qpc
    mask: int
    cur_state: int | None = None
    pkey_index: int = 0
    port: int = 1


@dataclass(frozen=True)
class QueryQp(Request):
    cmd = Cmd.QUERY_QP
    qp: int


@dataclass(frozen=True)
class AttachMcast(Request):
    cmd = Cmd.ATTACH_MCAST
    qp: int
    gid: bytes
    lid: int


@dataclass(frozen=True)
class DetachMcast(Request):
    cmd = Cmd.DETACH_MCAST
    qp: int
    gid: bytes
    lid: int


@dataclass(frozen=True)
class DestroyQp(Request):
    cmd = Cmd.DESTROY_QP
    qp: int


# -- responses ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContextResp:
    """What opening the device tells the provider of it (the ucontext response of a real
    provider's ABI, such as mlx5's): here, whether it has atomics (DevCap.NO_ATOMICS)."""

    atomics: bool = True


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
    # log2 of the bytes per ring slot: 5 (32-byte CQEs), or 6 on a device that scatters
    # small SENDs to the CQE (hwif.cqe_stride; mlx5 tells its provider the CQE size too)
    log_stride: int = 5


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
