"""A test oracle for the protection model: every DMA access a NIC makes is checked against what
its host's driver says the device may reach at that moment.

The device may reach the pages of a live registration (an MR the driver has not deregistered;
for an on-demand paging MR, the pages the driver has mapped for it and not invalidated),
the rings and doorbell records of live QPs and CQs, its own tables (MPT, MTT) and the command
mailbox. An access anywhere else is a violation, however it came about: a translation held
past deregistration, a ring used after destroy, a stale page list. And no page may go back to
the allocator while a device write to it is still on its way: that write would land in the
next owner's memory.

Installed on a World (after boot), it wraps the NICs' DMA engines and the hosts' memory; it
only observes. `violations` lists what went wrong; `checked` counts the accesses seen, so a
test can show the audit ran.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nicsim.hwif import EQE_SIZE, MPT_SIZE, MTT_ENTRY_SIZE, PAGE_SHIFT, PAGE_SIZE
from nicsim.world import World


def _pfns(pa: int, n: int) -> range:
    return range(pa >> PAGE_SHIFT, (pa + max(n, 1) - 1 >> PAGE_SHIFT) + 1)


class DmaAudit:
    def __init__(self, world: World) -> None:
        self.world = world
        self.violations: list[str] = []
        self.checked = 0
        for name, host in world.hosts.items():
            nic = world.nics[name]
            drv = next(iter(host.kernel.devices.values())).hw  # type: ignore[attr-defined]
            allowed = self._allowed_fn(drv)
            dma, mem = nic.dma, host.mem
            dma.read = self._wrap_read(name, dma.read, allowed)  # type: ignore[method-assign]
            dma.read_at = self._wrap_read_at(name, dma.read_at, allowed)  # type: ignore
            # (post gives each piece of a transfer to post1: every device write passes here)
            mem.post1 = self._wrap_post1(name, mem.post1, allowed)  # type: ignore
            mem._release = self._wrap_release(name, mem, mem._release)  # type: ignore

    # -- what the device may reach ------------------------------------------------------------

    @staticmethod
    def _allowed_fn(drv: Any) -> Callable[[], set[int]]:
        """The page numbers the device may reach now, recomputed when the driver's objects
        change."""
        cache: dict[str, Any] = {"sig": None, "pfns": set()}
        fixed: set[int] = set()
        for pa, n in ((drv.cmd_in_pa, PAGE_SIZE * 16), (drv.cmd_out_pa, PAGE_SIZE),
                      (drv.mpt_pa, MPT_SIZE << drv.lim.log_mpt),
                      (drv.mtt_pa, MTT_ENTRY_SIZE << drv.lim.log_mtt)):
            fixed.update(_pfns(pa, n))

        def allowed() -> set[int]:
            # (an MR re-registered in place keeps its key but not its pages)
            # (an on-demand paging MR: the pages the driver has mapped for the device now)
            sig = (tuple((i, m.key, m.mtt_start, m.npages, m.seq, len(m.present))
                         for i, m in drv.mrs.items()),
                   tuple(drv.qps), tuple(drv.eqs),
                   # (a resize moves a CQ's or SRQ's ring)
                   tuple((n, c.ring_pa, c.next_ring) for n, c in drv.cqs.items()),
                   tuple((n, s.ring_pa, s.next_ring) for n, s in drv.srqs.items()))
            if sig != cache["sig"]:
                pfns = set(fixed)
                for m in drv.mrs.values():
                    pfns.update(pa >> PAGE_SHIFT for pa in m.pages)
                    pfns.update(pa >> PAGE_SHIFT for pa in m.present.values())
                for q in drv.qps.values():
                    pfns.update(_pfns(q.sq_pa, q.sq_bytes))
                    pfns.update(_pfns(q.rq_pa, q.rq_bytes))
                for c in drv.cqs.values():
                    pfns.update(_pfns(c.ring_pa, c.ring_bytes))
                    pfns.update(_pfns(c.dbrec_pa, 64))
                    if c.next_ring is not None:
                        pfns.update(_pfns(*c.next_ring))
                for srq in drv.srqs.values():
                    pfns.update(_pfns(srq.ring_pa, srq.ring_bytes))
                    if srq.next_ring is not None:
                        pfns.update(_pfns(*srq.next_ring))
                for eq in drv.eqs.values():  # the EQ ring and its MSI-X word
                    pfns.update(_pfns(eq.ring_pa, EQE_SIZE << eq.log_size))
                    pfns.update(_pfns(eq.msi_pa, 4))
                cache["sig"], cache["pfns"] = sig, pfns
            return cache["pfns"]

        return allowed

    def _check(self, host: str, what: str, pa: int, n: int,
               allowed: Callable[[], set[int]]) -> None:
        self.checked += 1
        ok = allowed()
        bad = [p for p in _pfns(pa, n) if p not in ok]
        if bad:
            t = self.world.env.now
            self.violations.append(f"{host}: device {what} of {n} bytes at 0x{pa:x} at "
                                   f"{t:.1f} ns reaches page 0x{bad[0]:x}, which is no live "
                                   "registration, ring or table")

    # -- wrappers ------------------------------------------------------------------------------

    def _wrap_read(self, host: str, read: Callable, allowed: Callable[[], set[int]]
                   ) -> Callable:
        def audited(pa: int, n: int, not_before: float = 0.0) -> Any:
            self._check(host, "read", pa, n, allowed)
            return read(pa, n, not_before)
        return audited

    def _wrap_read_at(self, host: str, read_at: Callable, allowed: Callable[[], set[int]]
                      ) -> Callable:
        def audited(segs: list[tuple[int, int]], pos: tuple[int, int], n: int,
                    not_before: float = 0.0) -> Any:
            si, so = pos
            left = n
            while left and si < len(segs):
                pa, ln = segs[si]
                k = min(ln - so, left)
                if k:  # (a position at the end of a segment reads nothing there)
                    self._check(host, "read", pa + so, k, allowed)
                left -= k
                si, so = si + 1, 0
            return read_at(segs, pos, n, not_before)
        return audited

    def _wrap_post1(self, host: str, post1: Callable, allowed: Callable[[], set[int]]
                    ) -> Callable:
        def audited(t: float, pa: int, d: Any) -> None:
            self._check(host, "write", pa, len(d), allowed)
            post1(t, pa, d)
        return audited

    def _wrap_release(self, host: str, mem: Any, release: Callable) -> Callable:
        def audited(pa: int, size: int) -> None:
            now = self.world.env.now
            for t, wpa, d in mem.posted:
                if t > now and wpa < pa + size and pa < wpa + len(d):
                    self.violations.append(
                        f"{host}: page 0x{pa >> PAGE_SHIFT:x} freed at {now:.1f} ns with "
                        f"a device write to 0x{wpa:x} still landing at {t:.1f} ns")
            release(pa, size)
        return audited
