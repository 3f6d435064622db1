"""The nsnic driver's records of what it created on the device (MRs, CQs, QPs, SRQs, EQs),
and the error its calls raise: shared by the driver (nicsim.driver.kernel.hw.nsnic) and its
on-demand paging handler (nicsim.driver.kernel.hw.odp)."""

from __future__ import annotations

from dataclasses import dataclass, field

from nicsim.host.memory import AddressSpace
from nicsim.hwif import CQE_SIZE, PAGE_SIZE, Qpc

MTT_PER_CMD = 4096  # page addresses per WRITE_MTT (its input block is 64 KiB)


class HwError(Exception):
    def __init__(self, msg: str, errno_: int) -> None:
        super().__init__(msg)
        self.errno = errno_


@dataclass
class HwMr:
    key: int
    index: int
    mtt_start: int
    npages: int
    va: int
    length: int
    pages: list[int]  # the pinned physical pages handed to the NIC (none: ODP)
    aspace: AddressSpace
    odp: bool = False  # on-demand paging: nothing pinned, pages mapped as the NIC faults
    # ODP: the pages mapped for the device, by page number from the region's first page
    present: dict[int, int] = field(default_factory=dict)
    seq: int = 0  # ODP: advanced by every invalidation (mmu_interval_notifier's sequence)
    dead: bool = False  # deregistered: a fault being resolved for it is abandoned

    @property
    def first_va(self) -> int:
        return self.va & ~(PAGE_SIZE - 1)


@dataclass
class HwCq:
    cqn: int
    log_size: int
    ring_pa: int
    ring_bytes: int
    dbrec_pa: int
    stride: int = CQE_SIZE  # bytes per CQE slot (hwif.cqe_stride of the device)
    # A ring being resized to (pa, bytes): the NIC writes it during RESIZE_CQ.
    next_ring: tuple[int, int] | None = None


@dataclass
class HwQp:
    qpn: int
    sq_pa: int
    sq_bytes: int
    sq_log_size: int
    sq_log_stride: int
    rq_pa: int
    rq_bytes: int
    rq_log_size: int
    rq_log_stride: int
    qpc: Qpc | None = None


@dataclass
class HwSrq:
    srqn: int
    ring_pa: int
    ring_bytes: int
    log_size: int
    log_stride: int
    max_sge: int
    next_ring: tuple[int, int] | None = None  # as HwCq's, during RESIZE_SRQ


@dataclass
class HwEq:
    """An event queue: its ring, and the word its MSI-X message writes (the interrupt)."""

    eqn: int
    log_size: int
    ring_pa: int
    msi_pa: int
    ci: int = 0  # EQEs taken by the interrupt handler (not wrapped)

    @property
    def size(self) -> int:
        return 1 << self.log_size
