"""Memory windows (IBA 10.6.7): BIND_MW and LOCAL_INV work requests, and the invalidation a
SEND with invalidate asks for.

A window is an MPT entry the driver allocated (flags MW, and MW_TYPE2 for a type 2 window,
not VALID). Binding it, which the send queue executes in order like any WQE, writes the entry
as a view of part of an MR: its start and length, the remote rights asked for, the window's
PD, and the MTT index of the MR's page holding the window's start, so translation through
the window walks the MR's pages. The window's new R_Key keeps its MPT index and takes the
variant byte the consumer chose. A zero-length bind unbinds (type 1); LOCAL_INV and SEND with
invalidate free a bound type 2 window. The NIC writes the entry into the MPT table in host
memory and drops its cached copy, revoking whatever was translated through the old binding.

A window never outlives the translation it points to. The NIC keeps, in the entries'
NIC-owned fields (hwif.Mpt), which MR each bound window is a view of and how many windows are
bound to each MR, and refuses to invalidate or rewrite an MR while any are (the driver's
dereg_mr and rereg_mr then fail, as rxe_dereg_mr does while num_mw > 0). Windows are never
bound over an on-demand paging MR: its MTT entries may be "not present" (0), which a window's
translation would take for physical page 0 (mlx5 refuses windows over implicit ODP MRs the
same way). A type 2 window is bound to the QP that bound it: it answers only on that QP (IBA
10.6.7.2.1, rxe_lookup_mw's `mw->qp != qp`), and destroying the QP invalidates it (as qed's
destroy_qp invalidates the QP's bound windows), so a later QP given the same number finds it
gone.
"""

from __future__ import annotations

from nicsim.hwif import (
    MPT_SIZE,
    Access,
    CqeStatus,
    Mpt,
    MptFlags,
    SendWqeCtrl,
    key_index,
)
from nicsim.nic.counters import Counters, bump, new_counters
from nicsim.nic.dma import Dma
from nicsim.nic.translation import TranslationCache

_REMOTE_WRITES = int(Access.REMOTE_WRITE | Access.REMOTE_ATOMIC)
_RIGHTS = int(Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC)
_MW_TYPE_2 = 2
_BOUND_TYPE2 = MptFlags.VALID | MptFlags.MW | MptFlags.MW_TYPE2


class MemoryWindows:
    def __init__(self, dma: Dma, xlate: TranslationCache) -> None:
        self.dma = dma
        self.xlate = xlate
        # Binds, bind errors, invalidations: counted when they happen (the NIC reports them
        # with the requester's, whose WQEs they are).
        self.counters: Counters = new_counters()
        # QPN -> MPT indices of the type 2 windows it has bound (for DESTROY_QP).
        self._by_qp: dict[int, set[int]] = {}

    def entry(self, idx: int) -> Mpt | None:
        """MPT entry `idx` as the table holds it now (not the cache); None beyond it."""
        x = self.xlate
        if not 0 <= idx < x.mpt_entries:
            return None
        return Mpt.unpack(self.dma.peek(x.mpt_base + idx * MPT_SIZE, MPT_SIZE))

    def _entry(self, key: int) -> Mpt | None:
        return self.entry(key_index(key))

    def write(self, idx: int, e: Mpt, revoke: bool = True) -> None:
        """Write entry `idx`. `revoke`: a protection change, which drops the cached copy and
        revokes what was translated through it; otherwise (a count of the NIC's own) the
        cached copy is brought up to date and nothing held through the entry changes."""
        x = self.xlate
        self.dma.write(x.mpt_base + idx * MPT_SIZE, e.pack())
        if revoke:
            x.invalidate_mpt(idx)
        else:
            x.update_mpt(idx, e)

    def _count(self, mr_idx: int, delta: int) -> None:
        """Add `delta` to the number of windows bound to the MR at `mr_idx`."""
        mr = self.entry(mr_idx)
        if mr is None or mr.flags & MptFlags.MW:
            return
        mr.windows = max(0, mr.windows + delta)
        self.write(mr_idx, mr, revoke=False)

    def _release(self, idx: int, e: Mpt) -> None:
        """Window `e` (at `idx`) stops being bound: its MR and its QP forget it."""
        if not e.flags & MptFlags.VALID:
            return
        self._count(e.mr_index, -1)
        if e.flags & MptFlags.MW_TYPE2:
            self._by_qp.get(e.qpn, set()).discard(idx)

    def bind(self, pd: int, qpn: int, c: SendWqeCtrl) -> CqeStatus:
        """Execute a BIND_MW WQE of QP `qpn` in PD `pd` (IBA 10.6.7.2: the checks, in
        order)."""
        new_key, mr_key, va, length = c.rkey, c.imm_inv, c.remote_addr, c.compare_add
        rights, mw_type = c.swap & 0xFF, (c.swap >> 8) & 0xFF
        mw, mr = self._entry(new_key), self._entry(mr_key)
        cnt = self.counters
        if mw is None or not mw.flags & MptFlags.MW or mw.pd != pd or \
                bool(mw.flags & MptFlags.MW_TYPE2) != (mw_type == _MW_TYPE_2) or \
                mw_type == _MW_TYPE_2 and mw.flags & MptFlags.VALID:
            bump(cnt, "mw_bind_errors")  # not a window of this PD, or a bound type 2 window
            return CqeStatus.MW_BIND_ERR
        if mr is None or not mr.flags & MptFlags.VALID or mr.flags & MptFlags.MW or \
                mr.key != mr_key or mr.pd != pd or not mr.access & Access.MW_BIND or \
                rights & ~_RIGHTS or \
                rights & _REMOTE_WRITES and not mr.access & Access.LOCAL_WRITE or \
                length and (va < mr.start or va + length > mr.start + mr.length):
            bump(cnt, "mw_bind_errors")  # the MR cannot carry this window (C10-70..74)
            return CqeStatus.MW_BIND_ERR
        if length and mr.flags & MptFlags.ODP:
            bump(cnt, "mw_bind_errors")  # see the module docstring
            return CqeStatus.MW_BIND_ERR
        idx, mr_idx = key_index(new_key), key_index(mr_key)
        self._release(idx, mw)  # (a bound type 1 window moves off its MR)
        shift = mr.page_shift
        flags = mw.flags & (MptFlags.MW | MptFlags.MW_TYPE2)
        if not length:  # a type 1 window unbound
            self.write(idx, Mpt(new_key, mw.pd, 0, 0, 0, 0, flags, shift))
            bump(cnt, "mw_binds")
            return CqeStatus.SUCCESS
        mtt = mr.mtt_index + (va >> shift) - (mr.start >> shift)
        type2 = mw_type == _MW_TYPE_2
        self.write(idx, Mpt(new_key, mw.pd, va, length, mtt, rights, flags | MptFlags.VALID,
                            shift, qpn if type2 else 0, mr_idx))
        self._count(mr_idx, +1)
        if type2:
            self._by_qp.setdefault(qpn, set()).add(idx)
        bump(cnt, "mw_binds")
        return CqeStatus.SUCCESS

    def invalidate(self, pd: int, key: int, qpn: int | None = None) -> bool:
        """Free the bound type 2 window `key` of PD `pd` (LOCAL_INV, IBA 10.6.7.2.6); with
        `qpn`, a SEND with invalidate that arrived on that QP, which may free only a window
        bound to it. False if `key` names no such window."""
        idx = key_index(key)
        e = self.entry(idx)
        if e is None or e.key != key or e.pd != pd or \
                e.flags & _BOUND_TYPE2 != _BOUND_TYPE2 or qpn is not None and e.qpn != qpn:
            bump(self.counters, "mw_invalidate_errors")
            return False
        self._unbind(idx, e)
        return True

    def _unbind(self, idx: int, e: Mpt) -> None:
        """Bound window `e` (at `idx`) becomes invalid."""
        self._release(idx, e)
        e.flags &= ~MptFlags.VALID
        e.qpn = e.mr_index = 0
        self.write(idx, e)
        bump(self.counters, "mw_invalidations")

    def busy(self, idx: int) -> bool:
        """Whether MPT entry `idx` is an MR that windows are bound to (the NIC refuses to
        invalidate or rewrite it)."""
        e = self.entry(idx)
        return e is not None and not e.flags & MptFlags.MW and e.windows > 0

    def forget(self, idx: int) -> None:
        """The driver invalidates or rewrites entry `idx`: if it is a bound window, it stops
        being bound (its MR's count drops)."""
        e = self.entry(idx)
        if e is not None and e.flags & MptFlags.MW:
            self._release(idx, e)

    def forget_qp(self, qpn: int) -> None:
        """QP `qpn` is destroyed: the type 2 windows it bound are invalidated."""
        for idx in sorted(self._by_qp.pop(qpn, ())):
            e = self.entry(idx)
            if e is not None and e.flags & _BOUND_TYPE2 == _BOUND_TYPE2 and e.qpn == qpn:
                self._unbind(idx, e)
