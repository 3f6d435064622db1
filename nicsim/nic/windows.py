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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nicsim.hwif import (
    MPT_SIZE,
    Access,
    CqeStatus,
    Mpt,
    MptFlags,
    SendWqeCtrl,
    key_index,
)
from nicsim.nic.counters import bump

if TYPE_CHECKING:
    from nicsim.nic.nic import Nic

_REMOTE_WRITES = int(Access.REMOTE_WRITE | Access.REMOTE_ATOMIC)
_RIGHTS = int(Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC)
_MW_TYPE_2 = 2


class MemoryWindows:
    def __init__(self, nic: Nic) -> None:
        self.nic = nic
        self.counters = nic.requester.counters  # (binds, bind errors, invalidations)

    def _entry(self, key: int) -> Mpt | None:
        """The MPT entry of `key`'s index as the table holds it now (not the cache)."""
        idx = key_index(key)
        if idx >= self.nic.mpt_entries:
            return None
        x = self.nic.xlate
        return Mpt.unpack(self.nic.dma.peek(x.mpt_base + idx * MPT_SIZE, MPT_SIZE))

    def _write(self, e: Mpt) -> None:
        idx = key_index(e.key)
        x = self.nic.xlate
        self.nic.dma.write(x.mpt_base + idx * MPT_SIZE, e.pack())
        x.invalidate_mpt(idx)

    def bind(self, pd: int, c: SendWqeCtrl) -> CqeStatus:
        """Execute a BIND_MW WQE of a QP in PD `pd` (IBA 10.6.7.2: the checks, in order)."""
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
        shift = mr.page_shift
        mtt = mr.mtt_index + (va >> shift) - (mr.start >> shift)
        flags = mw.flags & (MptFlags.MW | MptFlags.MW_TYPE2)
        if length:
            flags |= MptFlags.VALID
        self._write(Mpt(new_key, mw.pd, va, length, mtt if length else 0, rights, flags,
                        shift))
        bump(cnt, "mw_binds")
        return CqeStatus.SUCCESS

    def invalidate(self, pd: int, key: int) -> bool:
        """Free the bound type 2 window `key` of PD `pd` (LOCAL_INV, SEND with invalidate,
        IBA 10.6.7.2.6); False if `key` names no such window."""
        e = self._entry(key)
        if e is None or e.key != key or e.pd != pd or \
                e.flags & (MptFlags.VALID | MptFlags.MW | MptFlags.MW_TYPE2) != \
                MptFlags.VALID | MptFlags.MW | MptFlags.MW_TYPE2:
            bump(self.counters, "mw_invalidate_errors")
            return False
        e.flags &= ~MptFlags.VALID
        self._write(e)
        bump(self.counters, "mw_invalidations")
        return True
