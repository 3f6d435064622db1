"""Address translation: key -> MPT -> MTT -> physical pages, with an on-NIC cache.

The MPT and MTT tables live in host memory (set up by INIT_HCA, written by WRITE_MPT and
WRITE_MTT). The NIC keeps a small cache of entries; a miss fetches the entry by a DMA read and
costs that read's time. `check_and_split` is the pure rule the RTL translation unit is held to.

Translations held across time. A message in flight keeps the physical segments it was given
when its key was checked (its first packet, or the WQE's start), because a NIC does not walk
the tables again for every packet. Deregistration must not leave those segments usable: once
Deregister Memory Region returns, the region's keys are invalid and its pages may be reused
(IBA Vol. 1 11.2.8, memory management verbs; an access through an invalid key is an L_Key or
R_Key violation, 10.6.3 / 9.7.5.2). The NIC meets this the way rxe's rxe_recheck_mr does, in
hardware terms:

- every holder of a translation (a responder message, a send WQE, a READ response stream, a
  READ's destination) records the keys it used and the protection epoch it checked them at;
- INVALIDATE_MPT and WRITE_MPT revoke the MPT index at once (`revoke`), advancing the epoch;
  changes of a QP's access rights advance it too (`bump`);
- every access through a held translation first compares its epoch with the current one
  (one integer compare on the per-packet path), and on a difference re-validates its keys
  (`held_valid`): a revoked key ends the message with the protection error hardware reports;
- the command that invalidates does not complete until every DMA write the NIC issued before
  it has landed (the command processor's fence), so when the driver unpins and frees the
  pages, no access to them is in flight and none can start.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from nicsim.hwif import (
    MPT_SIZE,
    MTT_ENTRY_SIZE,
    Access,
    Mpt,
    MptFlags,
    VendorErr,
    XlateStatus,
    key_index,
)

Segments = list[tuple[int, int]]  # (physical address, length)
_VALID = int(MptFlags.VALID)
_MW = int(MptFlags.MW)
_MW_TYPE2 = int(MptFlags.MW_TYPE2)
_ODP = int(MptFlags.ODP)
_REMOTE = int(Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC)
MTT_LINE = 8  # MTT entries fetched per miss: one 64-byte line
# The vendor error of a local key check that failed, by what failed.
XLATE_VENDOR = {
    XlateStatus.BAD_KEY: VendorErr.BAD_LKEY,
    XlateStatus.PD_MISMATCH: VendorErr.LKEY_PD_MISMATCH,
    XlateStatus.ACCESS: VendorErr.LKEY_ACCESS,
    XlateStatus.BOUNDS: VendorErr.LKEY_BOUNDS,
    XlateStatus.MTT_FAULT: VendorErr.MTT_FAULT,
    XlateStatus.ODP_ERROR: VendorErr.ODP_FAULT,
}
_MTT_LINE_FMT = struct.Struct(f"<{MTT_LINE}Q")


def check(mpt: Mpt | None, key: int, pd: int, access: int, va: int, length: int,
          qpn: int = 0) -> XlateStatus:
    """The protection checks, in hardware order: key, PD, access rights, bounds. `qpn`: the
    QP a remote access arrived on (a type 2 window answers only on the QP that bound it)."""
    if mpt is None or not (mpt.flags & _VALID) or mpt.key != key:
        return XlateStatus.BAD_KEY
    if mpt.flags & _MW:
        if not access & _REMOTE:
            return XlateStatus.BAD_KEY  # a window's key is an R_Key only (IBA 10.6.7)
        if mpt.flags & _MW_TYPE2 and mpt.qpn != qpn:
            return XlateStatus.BAD_KEY  # IBA 10.6.7.2.1; rxe_lookup_mw: mw->qp != qp
    if mpt.pd != pd:
        return XlateStatus.PD_MISMATCH
    if int(access) & ~mpt.access:
        return XlateStatus.ACCESS
    if va < mpt.start or va + length > mpt.start + mpt.length or length < 0:
        return XlateStatus.BOUNDS
    return _OK


def mtt_in_range(mpt: Mpt, va: int, length: int, entries: int) -> bool:
    """Whether the MTT entries of [va, va+length) of a checked MR lie in a table of
    `entries` (MTT_FAULT otherwise: a bad MPT must not reach another MR's pages)."""
    return not length or mpt.mtt_index + ((va + length - 1) >> mpt.page_shift) - \
        (mpt.start >> mpt.page_shift) < entries


def split(mpt: Mpt, mtt: Mapping[int, int], va: int, length: int) -> Segments:
    """Physical segments for [va, va+length) of an MR, split at page boundaries and merged
    where consecutive pages are physically contiguous. `mtt[i]` is MTT entry i."""
    if length <= 0:
        return []
    shift = mpt.page_shift
    mask = (1 << shift) - 1
    base = mpt.mtt_index - (mpt.start >> shift)
    end = va + length
    p0, p1 = va >> shift, (end - 1) >> shift
    if p0 == p1:
        return [(mtt[base + p0] + (va & mask), length)]
    # First (possibly partial) page, the full pages between, the last (possibly partial).
    start, n = mtt[base + p0] + (va & mask), (mask + 1) - (va & mask)
    out: Segments = []
    for page in range(p0 + 1, p1 + 1):
        pa = mtt[base + page]
        if pa != start + n:
            out.append((start, n))
            start, n = pa, 0
        n += mask + 1 if page != p1 else end - (p1 << shift)
    out.append((start, n))
    return out


def check_and_split(mpt: Mpt | None, mtt: Mapping[int, int], key: int, pd: int,
                    access: int, va: int, length: int, mtt_entries: int | None = None
                    ) -> tuple[XlateStatus, Segments]:
    """check, the MTT range (with `mtt_entries`: a table of that many), then split."""
    st = check(mpt, key, pd, access, va, length)
    if st is not XlateStatus.OK:
        return st, []
    assert mpt is not None
    if mtt_entries is not None and not mtt_in_range(mpt, va, length, mtt_entries):
        return XlateStatus.MTT_FAULT, []
    return st, split(mpt, mtt, va, length)


class _MttLines(OrderedDict):
    """Cached MTT entries by index. A missing entry fetches its whole aligned line of
    MTT_LINE entries with one read (the NIC reads a 64-byte line), evicting the oldest."""

    def __init__(self, fetch: Callable[[int], tuple[int, ...]], capacity: int) -> None:
        super().__init__()
        self.fetch = fetch
        self.capacity = capacity
        self.misses = 0

    def __missing__(self, i: int) -> int:
        self.misses += 1
        first = i & ~(MTT_LINE - 1)
        for j, v in enumerate(self.fetch(first)):
            self[first + j] = v
        while len(self) > self.capacity:
            self.popitem(last=False)
        return self.get(i, 0)


CHUNK = 64 << 10  # bytes of a buffer walked through the MTT at a time
_SEGS_MEMO = 4096  # chunks whose segments the walk remembers
_OK = XlateStatus.OK  # (bound once: see nicsim.nic.nic's _RC)


class Walk:
    """The physical segments of a buffer made of checked pieces (MPT entry, virtual address,
    length), walked through the MTT a chunk at a time as the message advances, as a NIC
    translates ahead of its DMA, rather than all at once when the message starts: the first
    packet of a 64 MiB WRITE does not wait for 16,384 page lookups. The keys were checked
    (rights, bounds) for the whole buffer up front. `segs` only grows, so positions into it
    stay valid; `covered` is how many bytes of the buffer it holds."""

    __slots__ = ("segs", "covered", "total", "_todo")

    def __init__(self, pieces: list[tuple[Mpt, int, int]] | None = None) -> None:
        self.segs: Segments = []
        self.covered = 0
        self._todo = [p for p in pieces or () if p[2]]
        self.total = sum(p[2] for p in self._todo)


@dataclass(slots=True)
class Held:
    """A translation held across time: the keys it came from and the protection epoch they
    were last checked at. (Responder and requester contexts carry the same two fields.)"""

    keys: tuple[int, ...] = ()
    epoch: int = 0


class TranslationCache:
    """LRU caches of MPT and MTT entries in front of the tables in host memory.

    `read(pa, n) -> bytes` fetches from host memory; the caller charges the DMA time for
    every miss reported in the returned miss count.
    """

    def __init__(self, read: Callable[[int, int], bytes], mpt_entries: int,
                 mtt_entries: int) -> None:
        self._read = read
        self.mpt_base = 0
        self.mtt_base = 0
        self.mpt_entries = 0  # table sizes, from INIT_HCA: indices beyond them are faults
        self.mtt_entries = 0
        self.mpt_capacity = mpt_entries
        self._mpt: OrderedDict[int, Mpt] = OrderedDict()
        self._mtt = _MttLines(self._fetch_line, mtt_entries)
        self._mtt_gen = 0  # MTT invalidations
        # Walk chunks' segments: (MTT index, region start, page shift, va, length) ->
        # (MTT misses, generation) when worked out, and the segments. See walk.
        self._segs: dict[tuple[int, int, int, int, int], tuple[int, int, Segments]] = {}
        self.mpt_hits = self.mpt_misses = self.mtt_hits = 0
        # Protection epoch (see the module docstring): advanced by every change that can
        # invalidate a translation someone holds; MPT index -> epoch of its last revocation.
        self.epoch = 0
        self._revoked_at: dict[int, int] = {}
        self.revocations = 0
        # The last PAGE_FAULT: (MPT index, first page not present counted from the region's
        # first page, pages from there the access needs).
        self.fault: tuple[int, int, int] | None = None

    @property
    def mtt_misses(self) -> int:
        return self._mtt.misses

    def _fetch_line(self, first: int) -> tuple[int, ...]:
        return _MTT_LINE_FMT.unpack(self._read(self.mtt_base + first * MTT_ENTRY_SIZE,
                                               MTT_LINE * MTT_ENTRY_SIZE))

    def invalidate_mpt(self, index: int) -> None:
        """The MPT entry at `index` changed: drop it from the cache and revoke every
        translation held through it."""
        self._mpt.pop(index, None)
        self.epoch += 1
        self._revoked_at[index] = self.epoch
        self.revocations += 1

    def update_mpt(self, index: int, e: Mpt) -> None:
        """The NIC changed a field of its own in entry `index` (a window count): the cached
        copy follows, and nothing held through the entry is revoked."""
        if index in self._mpt:
            self._mpt[index] = e

    def bump(self) -> None:
        """A protection attribute other than an MPT entry changed (a QP's access rights):
        holders re-validate at their next access."""
        self.epoch += 1

    def held_valid(self, keys: tuple[int, ...], since: int) -> bool:
        """Whether translations through `keys`, checked at epoch `since`, still stand."""
        revoked = self._revoked_at
        return all(revoked.get(key_index(k), -1) <= since for k in keys)

    def recheck(self, held: Held) -> bool:
        """For a holder whose epoch is behind: whether its keys still stand; if they do, it
        is brought up to the current epoch."""
        if self.held_valid(held.keys, held.epoch):
            held.epoch = self.epoch
            return True
        return False

    def invalidate_mtt(self, first: int, count: int) -> None:
        for i in range(first, first + count):
            self._mtt.pop(i, None)
        self._mtt_gen += 1

    def mpt(self, key: int) -> tuple[Mpt | None, int]:
        """The MPT entry for `key`'s index (None beyond the table), and 1 if it was a miss."""
        idx = key_index(key)
        if idx >= self.mpt_entries:
            return None, 0
        e = self._mpt.get(idx)
        if e is not None:
            self._mpt.move_to_end(idx)
            self.mpt_hits += 1
            return e, 0
        self.mpt_misses += 1
        e = Mpt.unpack(self._read(self.mpt_base + idx * MPT_SIZE, MPT_SIZE))
        self._mpt[idx] = e
        if len(self._mpt) > self.mpt_capacity:
            self._mpt.popitem(last=False)
        return e, 1

    def check_key(self, key: int, pd: int, access: int, va: int, length: int,
                  qpn: int = 0) -> tuple[XlateStatus, Mpt | None, int]:
        """The protection checks for a whole range, and that its MTT entries lie in the
        table; returns (status, the MPT entry, cache misses). Walk the range afterwards.
        `qpn`: the QP a remote access arrived on (see `check`)."""
        mpt, misses = self.mpt(key)
        st = check(mpt, key, pd, access, va, length, qpn)
        if st is not _OK:
            return st, None, misses
        assert mpt is not None
        if not mtt_in_range(mpt, va, length, self.mtt_entries):
            return XlateStatus.MTT_FAULT, None, misses
        if mpt.flags & _ODP and length:
            st, more = self._present(mpt, va, length)
            if st is not _OK:
                return st, None, misses + more
            misses += more
        return st, mpt, misses

    def _present(self, mpt: Mpt, va: int, length: int) -> tuple[XlateStatus, int]:
        """An on-demand paging region: whether every page of the range is present (its MTT
        entry is not 0), and the MTT lines that took. A page not present is a PAGE_FAULT,
        described in `fault`."""
        shift = mpt.page_shift
        first = mpt.start >> shift
        base = mpt.mtt_index - first
        p0, p1 = va >> shift, (va + length - 1) >> shift
        mtt = self._mtt
        before = mtt.misses
        for p in range(p0, p1 + 1):
            if not mtt[base + p]:
                self.fault = (key_index(mpt.key), p - first, min(p1 - p + 1, 0xFFFF))
                new = mtt.misses - before
                self.mtt_hits += p - p0 + 1 - new
                return XlateStatus.PAGE_FAULT, new
        new = mtt.misses - before
        self.mtt_hits += p1 - p0 + 1 - new
        return XlateStatus.OK, new

    def walk(self, w: Walk, upto: int) -> int:
        """Extend w.segs to cover at least `upto` bytes (whole chunks); returns the MTT cache
        misses it took."""
        mtt = self._mtt
        before = mtt.misses
        todo, segs = w._todo, w.segs
        memo = self._segs
        while w.covered < upto and todo:
            mpt, va, n = todo[0]
            k = min(n, CHUNK - (va & (CHUNK - 1)))  # up to the next chunk boundary
            shift = mpt.page_shift
            self.mtt_hits += ((va + k - 1) >> shift) - (va >> shift) + 1
            # (Segments of one chunk are merged where contiguous, never with the last one
            # already there: a consumer may have moved past its end.)
            # A chunk's segments depend only on MTT entries: when no line has come into the
            # cache, left it or been invalidated since they were last worked out (the same
            # miss count and generation), every entry is still there and the same, and so
            # are the segments, with no miss.
            key = (mpt.mtt_index, mpt.start, shift, va, k)
            got = memo.get(key)
            if got is not None and got[0] == mtt.misses and got[1] == self._mtt_gen:
                segs += got[2]
            else:
                part = split(mpt, mtt, va, k)
                segs += part
                if len(memo) >= _SEGS_MEMO:
                    memo.clear()
                memo[key] = (mtt.misses, self._mtt_gen, part)
            w.covered += k
            if k == n:
                del todo[0]
            else:
                todo[0] = (mpt, va + k, n - k)
        new = self._mtt.misses - before
        self.mtt_hits -= new
        return new

    def translate(self, key: int, pd: int, access: int, va: int, length: int,
                  qpn: int = 0) -> tuple[XlateStatus, Segments, int]:
        """Check and translate; returns (status, segments, number of cache misses)."""
        mpt, misses = self.mpt(key)
        st = check(mpt, key, pd, access, va, length, qpn)
        if st is not XlateStatus.OK:
            return st, [], misses
        assert mpt is not None
        if not length:
            return st, [], misses
        shift = mpt.page_shift
        pages = ((va + length - 1) >> shift) - (va >> shift) + 1
        if not mtt_in_range(mpt, va, length, self.mtt_entries):
            return XlateStatus.MTT_FAULT, [], misses
        if mpt.flags & _ODP:
            st, more = self._present(mpt, va, length)
            misses += more
            if st is not XlateStatus.OK:
                return st, [], misses
        before = self._mtt.misses
        segs = split(mpt, self._mtt, va, length)
        new = self._mtt.misses - before
        self.mtt_hits += pages - new
        return st, segs, misses + new
