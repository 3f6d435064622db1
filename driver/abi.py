"""The user/kernel ABI of the nsnic verbs (what include/uapi/rdma/ib_user_verbs.h and a
provider's ABI header are to rdma-core): the uverbs command numbers, the records the kernel
answers commands with, the error a command returns, and the doorbell page the process maps.
Both the kernel (nicsim.driver.kernel.uverbs) and user space (the verbs library and the ring
code, nicsim.driver.rings) use it; neither imports the other for it."""

from __future__ import annotations

import errno
from dataclasses import dataclass
from enum import IntEnum

from nicsim.hwif import UarReg, uar_offset


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
