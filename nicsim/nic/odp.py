"""On-demand paging: the NIC's side of a page fault.

An ODP region (MptFlags.ODP) is registered without pinning: its MTT entries start not
present (0) and the driver fills them as pages are needed. When translation meets a page not
present (XlateStatus.PAGE_FAULT), the NIC

- writes a PAGE_FAULT EQE (hwif.PageFaultEqe: the region's MPT index, the first missing page,
  how many pages the access needs) to ODP_EQN, whose interrupt runs the driver's handler; one
  fault per region is outstanding at a time, later accesses that fault on it join it;
- holds the work that faulted: a send WQE (requester, UD send) is not started and its QP waits
  for the region's RESUME_PAGE_FAULT, which gives it its turn again. A responder does not wait
  with the wire: it answers the request with an RNR NAK (IBA 9.7.5.2.8), so the requester
  sends it again after the RNR timer, by when the page is normally present; that is how
  ConnectX handles responder page faults with ODP. A UD receive that faults is dropped
  (there is no RNR for UD, o10-5.2.1), the fault still raised for the datagrams after it;
- remembers a region whose fault the driver could not resolve (RESUME_FAILED, e.g. the
  process unmapped the memory): accesses to its missing pages then fail as protection errors
  (VendorErr.ODP_FAULT) until the region is written again.
"""

from __future__ import annotations

from collections.abc import Callable

from nicsim.hwif import ODP_EQN, EqeType, FaultFlags, PageFaultEqe
from nicsim.nic.counters import new_counters
from nicsim.nic.eq import EventQueues
from nicsim.nic.qp import QpCtx


class PageFaults:
    def __init__(self, eqs: EventQueues, kick: Callable[[QpCtx], None]) -> None:
        self.eqs = eqs
        self.kick = kick
        self.pending: dict[int, list[QpCtx]] = {}  # MPT index -> QPs whose send work waits
        self.failed: set[int] = set()  # regions whose last fault the driver could not resolve
        self.counters = new_counters("page_faults", "faults_joined", "wqe_waits", "rnr_naks",
                                     "ud_drops", "resumes", "resume_failed")

    def fault(self, fault: tuple[int, int, int], write: bool, t: float) -> None:
        """Raise the fault `fault` ((MPT index, first page, pages), as
        TranslationCache.fault), found at `t`, unless one is outstanding for the region."""
        idx, page, npages = fault
        if idx in self.pending:
            self.counters["faults_joined"] += 1
            return
        self.pending[idx] = []
        self.counters["page_faults"] += 1
        flags = int(FaultFlags.WRITE) if write else 0
        self.eqs.post_record(ODP_EQN, lambda owner: PageFaultEqe(
            EqeType.PAGE_FAULT, flags, npages, idx, page, owner).pack(), t)

    def wait(self, qp: QpCtx, idx: int) -> None:
        """`qp`'s next send WQE waits for region `idx`'s fault to be resolved."""
        waiters = self.pending.setdefault(idx, [])
        if all(w is not qp for w in waiters):  # (identity: QpCtx compares by fields)
            waiters.append(qp)
        qp.odp_wait = True
        self.counters["wqe_waits"] += 1

    def resume(self, idx: int, failed: bool) -> None:
        """RESUME_PAGE_FAULT: the driver has written the region's MTT entries (or could not):
        the work that waited tries again."""
        self.counters["resumes"] += 1
        if failed:
            self.counters["resume_failed"] += 1
            self.failed.add(idx)
        else:
            self.failed.discard(idx)
        self._wake(idx)

    def forget(self, idx: int) -> None:
        """The MPT entry was written or invalidated: a new registration starts clean, and
        work waiting on the old one tries again (and meets the new entry)."""
        self.failed.discard(idx)
        self._wake(idx)

    def drop(self, qp: QpCtx) -> None:
        """`qp` was reset or destroyed: it waits for nothing any more."""
        if qp.odp_wait:
            qp.odp_wait = False
            for idx, waiters in self.pending.items():
                self.pending[idx] = [w for w in waiters if w is not qp]

    def _wake(self, idx: int) -> None:
        for qp in self.pending.pop(idx, ()):
            qp.odp_wait = False
            self.kick(qp)
