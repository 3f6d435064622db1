"""nsnic: the vendor hardware driver. Programs the NIC only through its BAR and host memory.

Like mlx4/mlx5, it owns the device's resources: QP and CQ numbers, MPT indices and their key
variants, MTT ranges, and the host memory the device uses for its tables (set up once with
INIT_HCA, like ICM). Every object change is a mailbox command (hwif.CmdOpcode).
"""

from __future__ import annotations

import errno
import ipaddress
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field

import simpy
from nicsim.driver.kernel.hw.objects import (
    MTT_PER_CMD,
    HwCq,
    HwEq,
    HwError,
    HwMr,
    HwQp,
    HwSrq,
)
from nicsim.driver.kernel.hw.odp import OdpHandler
from nicsim.driver.kernel.query import FIRST_QPN, GID_TABLE_LEN

from nicsim.host.host import Host, PciFunction
from nicsim.host.memory import AddressSpace, Extents, MemoryError_, PhysMem
from nicsim.hwif import (
    BF_MAX,
    CMD_BUSY,
    CQE_SIZE,
    DEV_ID,
    EQE_OWNER_OFFSET,
    EQE_SIZE,
    FEATURES_BF_SHIFT,
    MPT_SIZE,
    MTT_ENTRY_SIZE,
    PAGE_SHIFT,
    PAGE_SIZE,
    CmdOpcode,
    CmdStatus,
    Cqc,
    CqState,
    DevFeature,
    DeviceCaps,
    Eqc,
    Eqe,
    HcaInit,
    Mpt,
    MptFlags,
    PortInfo,
    Qpc,
    QpType,
    Reg,
    Srqc,
    pack_mtt,
    recv_wqe_stride,
    send_wqe_stride,
)
from nicsim.wire import is_multicast_ip, multicast_mac

# Command status -> errno, as mlx5's cmd_status_to_err maps firmware statuses; a command the
# device does not have is EOPNOTSUPP (the driver issues none that the device's capabilities
# leave out: hwif.device_commands).
_CMD_ERRNO = {
    CmdStatus.BAD_OPCODE: errno.EOPNOTSUPP,
    CmdStatus.BAD_PARAM: errno.EINVAL,
    CmdStatus.BAD_RESOURCE: errno.EINVAL,
    CmdStatus.BAD_STATE: errno.EINVAL,
    CmdStatus.BUSY: errno.EBUSY,
    CmdStatus.EXCEED_LIM: errno.ENOMEM,
}
DBREC_SIZE = 64  # a CQ's doorbell record: a u32, on its own cache line
# Freed QPNs and MPT indices wait in quarantine before reuse, so a packet or rkey still in
# flight for the old object can never reach a new one.
QUARANTINE = 64


def _mem(fn):  # noqa: ANN001, ANN202
    """Host memory exhaustion, as the driver reports it."""
    try:
        return fn()
    except MemoryError_ as e:
        raise HwError(str(e), e.errno) from None


class Allocator:
    """Numbers from [lo, hi), recycled only after QUARANTINE others were freed."""

    def __init__(self, lo: int, hi: int) -> None:
        self._next = lo
        self._hi = hi
        self._free: deque[int] = deque()

    def alloc(self) -> int:
        if len(self._free) > QUARANTINE:
            return self._free.popleft()
        if self._next >= self._hi:
            if self._free:
                return self._free.popleft()
            raise HwError("resource exhausted", errno.ENOMEM)
        n = self._next
        self._next += 1
        return n

    def free(self, n: int) -> None:
        self._free.append(n)


class RingPool:
    """The ring memory of one process (ucontext): rings and doorbell records are sized to what
    they hold, and those smaller than a page share pages, but only with rings of the same
    process, because a page is mapped into the process whole. Rings of a page or more get
    their own contiguous pages. Every page is mapped into the process when it is taken and
    unmapped when its last ring goes, before it is freed (mlx5 packs doorbell records per
    process the same way)."""

    def __init__(self, mem: PhysMem, aspace: AddressSpace) -> None:
        self.mem = mem
        self.aspace = aspace
        self._va: dict[int, int] = {}  # page (or contiguous run) -> its VA in the process
        self._free: dict[int, dict[int, set[int]]] = {}  # slot size -> page -> free offsets
        self._used: dict[int, int] = {}  # shared page -> slots in use

    def alloc(self, size: int) -> int:
        """Physically contiguous memory of `size` bytes (a power of two), aligned to it."""
        if size >= PAGE_SIZE:
            pa = self.mem.alloc_contig(size)
            self._va[pa] = self.aspace.map_phys(pa, size)
            return pa
        pages = self._free.setdefault(size, {})
        page = next((p for p, offs in pages.items() if offs), None)
        if page is None:
            page = self.mem.alloc_contig(PAGE_SIZE)
            self._va[page] = self.aspace.map_phys(page, PAGE_SIZE)
            pages[page] = set(range(0, PAGE_SIZE, size))
            self._used[page] = 0
        off = min(pages[page])
        pages[page].discard(off)
        self._used[page] += 1
        return page + off

    def va(self, pa: int) -> int:
        """Where the process sees the memory at `pa`."""
        base = pa if pa in self._va else pa & ~(PAGE_SIZE - 1)
        return self._va[base] + (pa - base)

    def free(self, pa: int, size: int) -> None:
        """Give a ring back (after the NIC has stopped using it)."""
        if size >= PAGE_SIZE:
            self.aspace.unmap_phys(self._va.pop(pa), size)
            self.mem.free_contig(pa, size)
            return
        page = pa & ~(PAGE_SIZE - 1)
        self._free[size][page].add(pa - page)
        self._used[page] -= 1
        if not self._used[page]:
            del self._used[page], self._free[size][page]
            self.aspace.unmap_phys(self._va.pop(page), PAGE_SIZE)
            self.mem.free_contig(page, PAGE_SIZE)


EQ_LOG_SIZE = 10  # 1024 EQEs: a CQ has at most one completion event outstanding
# Interrupt moderation: at most one interrupt per EQ per this many ns (mlx5's default EQ
# period is a few microseconds).
EQ_MODERATION_NS = 2000


@dataclass
class Limits:
    log_mpt: int = 0  # table sizes the driver gave the NIC at INIT_HCA
    log_mtt: int = 0
    commands: int = 0
    command_log: list[str] = field(default_factory=list)


class NsnicDriver:
    """One bound device (the `probe` of a PCI driver)."""

    def __init__(self, host: Host, fn: PciFunction, name: str, ifindex: int = 2) -> None:
        self.host = host
        self.ifindex = ifindex  # the netdev's interface index (lo is 1)
        self.fn = fn
        self.bar = fn.bar
        self.name = name
        self.lim = Limits()
        self._mbox_busy = False  # the command mailbox is taken (a program or the ODP worker)
        self.dev_id = self.bar.read64(Reg.DEV_ID)
        if self.dev_id != DEV_ID:
            raise HwError(f"{name}: not an nsnic device", errno.ENODEV)
        # Optional features (hwif Reg.FEATURES; a device without the register reads 0).
        feat = self.bar.read64(Reg.FEATURES)
        bf = (feat >> FEATURES_BF_SHIFT) & 0xFFFF
        self.bf_size = bf if feat & DevFeature.BLUEFLAME and 16 <= bf <= BF_MAX else 0
        self.features = DevFeature(feat & 0xFFFF)
        mem = host.mem
        self.cmd_in_pa = mem.alloc_contig(PAGE_SIZE * 16)
        self.cmd_out_pa = mem.alloc_contig(PAGE_SIZE)
        self.caps = DeviceCaps.unpack(self.cmd(CmdOpcode.QUERY_DEVICE, out_size=DeviceCaps.size()))
        # MPT entries (keys) and MTT entries (pages) two per page of this host's memory, up
        # to the NIC's tables: enough to register all of it twice over (the tables cost
        # memory only where used, and a small host is not filled by a table it cannot use).
        log_pages = ((mem.size >> PAGE_SHIFT) - 1).bit_length() + 1
        log_mpt = min((self.caps.max_mpt - 1).bit_length(), log_pages)
        log_mtt = min((self.caps.max_mtt - 1).bit_length(), log_pages)
        self.lim.log_mpt, self.lim.log_mtt = log_mpt, log_mtt
        self.mpt_pa = mem.alloc_contig(MPT_SIZE << log_mpt)
        self.mtt_pa = mem.alloc_contig(MTT_ENTRY_SIZE << log_mtt)
        self.cmd(CmdOpcode.INIT_HCA, HcaInit(self.mpt_pa, self.mtt_pa, log_mpt, log_mtt).pack())
        self.qpns = Allocator(FIRST_QPN, self.caps.max_qp)  # QPNs 0 and 1 are special (IBA 10.2.4)
        self.cqns = Allocator(1, self.caps.max_cq)
        self.uars = Allocator(1, self.caps.max_uar + 1)  # doorbell pages, one per process
        self.mpts = Allocator(1, 1 << log_mpt)
        self.mtt = Extents(0, 1 << log_mtt)
        self._variant: dict[int, int] = {}
        # What the device may reach now, by MPT index / QPN / CQN (as /sys would list it).
        self.mrs: dict[int, HwMr] = {}
        self.qps: dict[int, HwQp] = {}
        self.cqs: dict[int, HwCq] = {}
        self.eqs: dict[int, HwEq] = {}
        self.srqs: dict[int, HwSrq] = {}
        self.mws: set[int] = set()  # MPT indices of memory windows
        self.srqns = Allocator(1, self.caps.max_srq)
        self.odp = OdpHandler(self)

    # -- command mailbox --------------------------------------------------------------------

    def cmd(self, op: CmdOpcode, data: bytes = b"", mod: int = 0, out_size: int = 0) -> bytes:
        """Run one mailbox command and wait for it (the driver polls CMD_STATUS over MMIO)."""
        if len(data) > PAGE_SIZE * 16:
            raise HwError("command input too large", errno.EINVAL)
        while self._mbox_busy:  # the ODP worker has the mailbox: wait for it
            self.host.spend(500.0)
        self._mbox_busy = True
        try:
            self._post_cmd(op, data, mod, cpu=True)
            self.host.spend(self.fn.pcie.cfg.latency_ns)  # let GO reach the device
            while True:
                st = self.bar.read64(Reg.CMD_STATUS)
                if not st & CMD_BUSY:
                    break
                self.host.spend(500.0)
            return self._cmd_result(op, st, out_size)
        finally:
            self._mbox_busy = False

    def _post_cmd(self, op: CmdOpcode, data: bytes, mod: int, cpu: bool) -> None:
        self.host.mem.write(self.cmd_in_pa, data)
        bar = self.bar
        for reg, value in ((Reg.CMD_OPCODE, op), (Reg.CMD_IN, self.cmd_in_pa),
                           (Reg.CMD_OUT, self.cmd_out_pa), (Reg.CMD_MOD, mod), (Reg.CMD_GO, 1)):
            bar.write64(reg, value, cpu=cpu)

    def _cmd_result(self, op: CmdOpcode, st: int, out_size: int) -> bytes:
        self.lim.commands += 1
        self.lim.command_log.append(op.name)
        status = CmdStatus(st & 0xFF)
        if status is not CmdStatus.OK:
            raise HwError(f"{op.name} failed: {status.name}", _CMD_ERRNO[status])
        return self.host.mem.read(self.cmd_out_pa, out_size) if out_size else b""

    def mailbox(self) -> Generator[simpy.Event, None, None]:
        """Take the command mailbox from a SimPy process (the ODP worker); give it back
        with `release_mailbox`."""
        while self._mbox_busy:
            yield self.host.env.timeout(500.0)
        self._mbox_busy = True

    def release_mailbox(self) -> None:
        self._mbox_busy = False

    def cmd_in_process(self, op: CmdOpcode, data: bytes = b"", mod: int = 0
                       ) -> Generator[simpy.Event, None, None]:
        """`cmd` from a SimPy process that holds the mailbox: its MMIO writes and status
        polls cost the process the time they cost a program."""
        env = self.host.env
        self._post_cmd(op, data, mod, cpu=False)
        yield env.timeout(5 * self.host.costs.mmio_write + self.fn.pcie.cfg.latency_ns)
        while True:
            st = yield from self.bar.read64_in_process(Reg.CMD_STATUS)
            if not st & CMD_BUSY:
                break
            yield env.timeout(500.0)
        self._cmd_result(op, st, 0)

    # -- memory registration ----------------------------------------------------------------

    def reg_mr(self, aspace: AddressSpace, va: int, length: int, access: int, pd: int,
               odp: bool = False) -> HwMr:
        if length <= 0:
            raise HwError("zero-length MR", errno.EINVAL)
        if odp:
            return self.odp.reg_mr(aspace, va, length, access, pd)
        pages = aspace.pin(va, length)  # get_user_pages: fails with EFAULT if unmapped
        try:
            idx = self.mpts.alloc()
        except HwError:
            self.host.mem.unpin(pages)
            raise
        mtt_start = self.mtt.alloc(len(pages))
        if mtt_start is None:
            self.mpts.free(idx)
            self.host.mem.unpin(pages)
            raise HwError(f"out of MTT entries for {len(pages)} pages (the largest free run "
                          f"is {self.mtt.largest} of {1 << self.lim.log_mtt})", errno.ENOMEM)
        key = self._next_key(idx)
        self._write_mr(key, idx, mtt_start, pages, va, length, access, pd)
        mr = HwMr(key, idx, mtt_start, len(pages), va, length, pages, aspace)
        self.mrs[idx] = mr
        return mr

    def _next_key(self, idx: int) -> int:
        """A new key for MPT entry `idx`: its index and the next 8-bit variant."""
        variant = (self._variant.get(idx, 0) + 1) & 0xFF
        self._variant[idx] = variant
        return (idx << 8) | variant

    def _write_mr(self, key: int, idx: int, mtt_start: int, pages: list[int], va: int,
                  length: int, access: int, pd: int, flags: MptFlags = MptFlags.VALID) -> None:
        for i in range(0, len(pages), MTT_PER_CMD):
            chunk = pages[i:i + MTT_PER_CMD]
            self.cmd(CmdOpcode.WRITE_MTT, pack_mtt(chunk), mod=mtt_start + i)
        mpt = Mpt(key, pd, va, length, mtt_start, access, flags, PAGE_SHIFT)
        self.cmd(CmdOpcode.WRITE_MPT, mpt.sw_part(), mod=idx)

    def _invalidate_mr(self, mr: HwMr) -> None:
        """INVALIDATE_MPT of a registered MR. The NIC refuses it (BUSY) while memory windows
        are bound to the MR: a window is a view of the MR's pages and must never outlive
        them. nsnic refuses as rxe does (rxe_dereg_mr: EINVAL while num_mw > 0; IBA
        10.6.7.2.6 lets a CI refuse or invalidate the windows); the MR is left as it was."""
        try:
            self.cmd(CmdOpcode.INVALIDATE_MPT, mod=mr.index)
        except HwError as e:
            if e.errno == errno.EBUSY:
                raise HwError(f"MR 0x{mr.key:x} has memory windows bound to it",
                              errno.EINVAL) from None
            raise

    def rereg_mr(self, mr: HwMr, va: int, length: int, access: int, pd: int) -> None:
        """Re-register in place, keeping the key (as mlx5 and rxe do, so a peer that holds
        the rkey keeps using it): INVALIDATE_MPT fences messages in flight under the old
        translation, then the new pages' MTT entries and the MPT are written. A failure
        after that leaves the MR invalid (its key matches nothing), as ibv_rereg_mr may; an
        MR with windows bound is refused before anything changes (EINVAL, IBA 11.2.8: a
        window must not keep pointing at the old translation)."""
        self._invalidate_mr(mr)
        if mr.odp:
            self.odp.rereg(mr, va, length, access, pd)
            return
        if (va, length) != (mr.va, mr.length):
            pages = mr.aspace.pin(va, length)
            start = self.mtt.alloc(len(pages))
            if start is None:
                self.host.mem.unpin(pages)
                raise HwError(f"out of MTT entries for {len(pages)} pages", errno.ENOMEM)
            self.mtt.free(mr.mtt_start, mr.npages)
            self.host.mem.unpin(mr.pages)
            mr.mtt_start, mr.npages, mr.pages, mr.va, mr.length = \
                start, len(pages), pages, va, length
        self._write_mr(mr.key, mr.index, mr.mtt_start, mr.pages, va, length, access, pd)

    def alloc_mw(self, pd: int, type2: bool) -> int:
        """A memory window: an MPT entry marked as a window of `pd`, not yet valid (a BIND_MW
        WQE makes it so). Returns its key."""
        idx = self.mpts.alloc()
        key = self._next_key(idx)
        flags = MptFlags.MW | (MptFlags.MW_TYPE2 if type2 else 0)
        try:
            self.cmd(CmdOpcode.WRITE_MPT,
                     Mpt(key, pd, 0, 0, 0, 0, flags, PAGE_SHIFT).sw_part(), mod=idx)
        except HwError:
            self.mpts.free(idx)
            raise
        self.mws.add(idx)
        return key

    def dealloc_mw(self, key: int) -> None:
        """INVALIDATE_MPT is fenced: no access through the window is in flight after it."""
        idx = key >> 8
        self.cmd(CmdOpcode.INVALIDATE_MPT, mod=idx)
        self.mws.discard(idx)
        self.mpts.free(idx)

    def dereg_mr(self, mr: HwMr) -> None:
        """INVALIDATE_MPT is fenced in the NIC: when it completes, the key is revoked for
        messages in flight too and no DMA write through it is still on its way, so the
        pages can be unpinned (and freed by their owner) at once. While windows are bound
        to the MR, nothing is done (EINVAL: see _invalidate_mr)."""
        self._invalidate_mr(mr)
        del self.mrs[mr.index]
        if mr.odp:
            self.odp.forget(mr)
        self.mtt.free(mr.mtt_start, mr.npages)
        self.mpts.free(mr.index)
        self.host.mem.unpin(mr.pages)

    # -- event queues -----------------------------------------------------------------------

    def create_eq(self, eqn: int = 0) -> HwEq:
        """The device's event queue, made the first time a process asks for events. A device
        with fewer event queues (DeviceCaps.max_eq; none: no events at all) is not asked:
        EOPNOTSUPP, as for an operation the device does not have."""
        if eqn >= self.caps.max_eq:
            raise HwError(f"{self.name}: the device has no event queue {eqn} (max_eq "
                          f"{self.caps.max_eq})", errno.EOPNOTSUPP)
        mem = self.host.mem
        ring = mem.alloc_contig(EQE_SIZE << EQ_LOG_SIZE)
        msi = mem.alloc_contig(PAGE_SIZE)
        try:
            self.cmd(CmdOpcode.CREATE_EQ, Eqc(eqn, EQ_LOG_SIZE, ring, msi, 1 + eqn,
                                              EQ_MODERATION_NS).pack())
        except HwError:
            mem.free_contig(ring, EQE_SIZE << EQ_LOG_SIZE)
            mem.free_contig(msi, PAGE_SIZE)
            raise
        eq = HwEq(eqn, EQ_LOG_SIZE, ring, msi)
        self.eqs[eqn] = eq
        self.bar.write64(Reg.EQ_DB, (eqn << 32) | (1 << 31))  # armed: interrupt on an EQE
        return eq

    def take_eqes(self, eq: HwEq) -> list[Eqe]:
        """The interrupt handler's loop: the EQEs the device wrote since the last call (by
        their owner bit), then the consumer index reported and the EQ re-armed (EQ_DB)."""
        out = [Eqe.unpack(raw) for raw in self.new_eqes(eq)]
        self.bar.write64(Reg.EQ_DB, self.eq_rearm_word(eq))
        return out

    def new_eqes(self, eq: HwEq) -> list[bytes]:
        """The raw EQEs the device wrote since the last call, by their owner bit."""
        mem = self.host.mem
        out = []
        while True:
            raw = mem.read(eq.ring_pa + (eq.ci & (eq.size - 1)) * EQE_SIZE, EQE_SIZE)
            if raw[EQE_OWNER_OFFSET] & 1 != ((eq.ci >> eq.log_size) & 1) ^ 1:
                break
            out.append(raw)
            eq.ci += 1
        return out

    @staticmethod
    def eq_rearm_word(eq: HwEq) -> int:
        """EQ_DB: the entries taken reported, and the EQ armed for its next interrupt."""
        return (eq.eqn << 32) | (1 << 31) | (eq.ci & 0x7FFFFFFF)

    # -- CQ ---------------------------------------------------------------------------------

    def create_cq(self, cqe: int, uar: int, pool: RingPool) -> HwCq:
        if cqe < 1 or cqe > self.caps.max_cqe:
            raise HwError(f"CQ size {cqe} out of range", errno.EINVAL)
        log = max(1, (cqe - 1).bit_length())
        ring_bytes = CQE_SIZE << log
        ring = _mem(lambda: pool.alloc(ring_bytes))
        try:
            dbrec = _mem(lambda: pool.alloc(DBREC_SIZE))
        except HwError:
            pool.free(ring, ring_bytes)
            raise
        cqn = self.cqns.alloc()
        try:
            self.cmd(CmdOpcode.CREATE_CQ, Cqc(cqn, log, CqState.OK, ring, dbrec, 0, uar).pack())
        except HwError:
            self.cqns.free(cqn)
            pool.free(ring, ring_bytes)
            pool.free(dbrec, DBREC_SIZE)
            raise
        cq = HwCq(cqn, log, ring, ring_bytes, dbrec)
        self.cqs[cqn] = cq
        return cq

    def destroy_cq(self, cq: HwCq) -> None:
        """Stop the NIC using the CQ (a fenced command). Its memory stays until free_cq:
        the caller first removes every mapping of it."""
        self.cmd(CmdOpcode.DESTROY_CQ, mod=cq.cqn)
        del self.cqs[cq.cqn]
        self.cqns.free(cq.cqn)

    def resize_cq(self, cq: HwCq, cqe: int, pool: RingPool) -> None:
        """A new ring of at least `cqe` entries (the same size: nothing to do, as mlx5); the
        NIC moves the unpolled CQEs into it (RESIZE_CQ, fenced), then the old ring goes.
        More unpolled CQEs than the new ring holds: EINVAL, and the CQ is as it was."""
        if cqe < 1 or cqe > self.caps.max_cqe:
            raise HwError(f"CQ size {cqe} out of range 1..{self.caps.max_cqe}", errno.EINVAL)
        log = max(1, (cqe - 1).bit_length())
        if log == cq.log_size:
            return
        ring_bytes = CQE_SIZE << log
        ring = _mem(lambda: pool.alloc(ring_bytes))
        cq.next_ring = (ring, ring_bytes)
        try:
            self.cmd(CmdOpcode.RESIZE_CQ, Cqc(cq.cqn, log, CqState.OK, ring, cq.dbrec_pa, 0,
                                              0).pack(), mod=cq.cqn)
        except HwError as e:
            cq.next_ring = None
            pool.free(ring, ring_bytes)
            if e.errno == errno.EINVAL:
                raise HwError(f"CQ {cq.cqn} holds more unpolled completions than {1 << log}",
                              errno.EINVAL) from None
            raise
        pool.free(cq.ring_pa, cq.ring_bytes)  # the NIC has left it (a fenced command)
        cq.ring_pa, cq.ring_bytes, cq.log_size, cq.next_ring = ring, ring_bytes, log, None

    def query_cq(self, cqn: int) -> Cqc:
        return Cqc.unpack(self.cmd(CmdOpcode.QUERY_CQ, mod=cqn, out_size=Cqc.size()))

    @staticmethod
    def free_cq(cq: HwCq, pool: RingPool) -> None:
        pool.free(cq.ring_pa, cq.ring_bytes)
        pool.free(cq.dbrec_pa, DBREC_SIZE)

    # -- QP ---------------------------------------------------------------------------------

    def create_qp(self, qp_type: int, pd: int, uar: int, pool: RingPool, send_cqn: int,
                  recv_cqn: int, max_send_wr: int, max_recv_wr: int, max_send_sge: int,
                  max_recv_sge: int, max_inline: int, srqn: int = 0,
                  special_qpn: int = 0) -> HwQp:
        """A QP; with `srqn` it receives from that SRQ (its own RQ is the smallest ring).
        `special_qpn`: one of the QPNs the allocator keeps back (IBA 10.2.4: QP1 is the GSI
        QP), for the kernel's own QPs."""
        if special_qpn and (special_qpn >= FIRST_QPN or special_qpn in self.qps):
            raise HwError(f"QPN {special_qpn} is not a free special QPN", errno.EINVAL)
        if srqn:
            max_recv_wr = max_recv_sge = 0
        c = self.caps
        if (max_send_wr > c.max_qp_wr or max_recv_wr > c.max_qp_wr or max_send_sge > c.max_sge
                or max_recv_sge > c.max_sge or max_inline > c.max_inline):
            raise HwError("QP capabilities beyond the device's", errno.EINVAL)
        sq_log = max(1, (max(max_send_wr, 1) - 1).bit_length())
        rq_log = max(1, (max(max_recv_wr, 1) - 1).bit_length())
        sq_stride = send_wqe_stride(max_send_sge, max_inline, ud=qp_type == QpType.UD)
        rq_stride = recv_wqe_stride(max_recv_sge)
        sq_bytes, rq_bytes = sq_stride << sq_log, rq_stride << rq_log
        sq = _mem(lambda: pool.alloc(sq_bytes))
        try:
            rq = _mem(lambda: pool.alloc(rq_bytes))
        except HwError:
            pool.free(sq, sq_bytes)
            raise
        try:
            qpn = special_qpn or self.qpns.alloc()
        except HwError:
            pool.free(sq, sq_bytes)
            pool.free(rq, rq_bytes)
            raise
        qpc = Qpc.unpack(bytes(Qpc.size()))
        qpc.qpn, qpc.type, qpc.pd, qpc.uar = qpn, qp_type, pd, uar
        qpc.send_cqn, qpc.recv_cqn = send_cqn, recv_cqn
        qpc.sq_base, qpc.rq_base = sq, rq
        qpc.sq_log_size, qpc.sq_log_stride = sq_log, sq_stride.bit_length() - 1
        qpc.rq_log_size, qpc.rq_log_stride = rq_log, rq_stride.bit_length() - 1
        try:
            self.cmd(CmdOpcode.CREATE_QP, qpc.pack(), mod=srqn)
        except HwError:
            if not special_qpn:
                self.qpns.free(qpn)
            pool.free(sq, sq_bytes)
            pool.free(rq, rq_bytes)
            raise
        qp = HwQp(qpn, sq, sq_bytes, sq_log, qpc.sq_log_stride, rq, rq_bytes, rq_log,
                  qpc.rq_log_stride, qpc)
        self.qps[qpn] = qp
        return qp

    def modify_qp(self, qpc: Qpc) -> None:
        self.cmd(CmdOpcode.MODIFY_QP, qpc.pack())

    def query_qp(self, qpn: int) -> Qpc:
        return Qpc.unpack(self.cmd(CmdOpcode.QUERY_QP, mod=qpn, out_size=Qpc.size()))

    def destroy_qp(self, qp: HwQp) -> None:
        """Stop the NIC using the QP (a fenced command). Its rings stay until free_qp: the
        caller first removes every mapping of them."""
        self.cmd(CmdOpcode.DESTROY_QP, mod=qp.qpn)
        del self.qps[qp.qpn]
        if qp.qpn >= FIRST_QPN:  # (a special QPN is not the allocator's)
            self.qpns.free(qp.qpn)

    @staticmethod
    def free_qp(qp: HwQp, pool: RingPool) -> None:
        pool.free(qp.sq_pa, qp.sq_bytes)
        pool.free(qp.rq_pa, qp.rq_bytes)

    # -- SRQ --------------------------------------------------------------------------------

    @property
    def has_srq(self) -> bool:
        """The device has SRQs (DeviceCaps.max_srq): its SRQ commands exist."""
        return self.caps.max_srq > 0

    def create_srq(self, pd: int, uar: int, pool: RingPool, max_wr: int, max_sge: int,
                   limit: int) -> HwSrq:
        c = self.caps
        if not self.has_srq:
            raise HwError(f"{self.name}: the device has no SRQs", errno.EOPNOTSUPP)
        if not 0 < max_wr <= c.max_qp_wr or not 0 < max_sge <= c.max_sge or \
                not 0 <= limit <= max_wr:
            raise HwError(f"SRQ max_wr {max_wr} / max_sge {max_sge} / limit {limit} beyond "
                          "the device's", errno.EINVAL)
        # One slot more than asked for: a full ring is told from an empty one by the count.
        log = max(1, max_wr.bit_length())
        stride = recv_wqe_stride(max_sge)
        nbytes = stride << log
        ring = _mem(lambda: pool.alloc(nbytes))
        try:
            srqn = self.srqns.alloc()
        except HwError:
            pool.free(ring, nbytes)
            raise
        try:
            self.cmd(CmdOpcode.CREATE_SRQ, Srqc(srqn, pd, ring, log, stride.bit_length() - 1,
                                                limit, uar).pack())
        except HwError:
            self.srqns.free(srqn)
            pool.free(ring, nbytes)
            raise
        srq = HwSrq(srqn, ring, nbytes, log, stride.bit_length() - 1, max_sge)
        self.srqs[srqn] = srq
        return srq

    def modify_srq(self, srq: HwSrq, limit: int) -> None:
        self.cmd(CmdOpcode.MODIFY_SRQ, Srqc(srq.srqn, 0, 0, 0, 0, limit, 0).pack(),
                 mod=srq.srqn)

    def resize_srq(self, srq: HwSrq, max_wr: int, pool: RingPool) -> None:
        """Grow the SRQ's ring to hold at least `max_wr` WQEs (RESIZE_SRQ, fenced: the NIC
        copies the WQEs it has not taken). A ring is never made smaller (WQEs taken and not
        completed keep their slots until their completions are polled): a max_wr it already
        holds leaves it as it is."""
        if not 0 < max_wr <= self.caps.max_qp_wr:
            raise HwError(f"SRQ max_wr {max_wr} out of range 1..{self.caps.max_qp_wr}",
                          errno.EINVAL)
        log = max(1, max_wr.bit_length())  # one slot spare, as create_srq
        if log <= srq.log_size:
            return
        nbytes = srq.ring_bytes << (log - srq.log_size)
        ring = _mem(lambda: pool.alloc(nbytes))
        srq.next_ring = (ring, nbytes)
        try:
            self.cmd(CmdOpcode.RESIZE_SRQ, Srqc(srq.srqn, 0, ring, log, srq.log_stride, 0,
                                                0).pack(), mod=srq.srqn)
        except HwError:
            srq.next_ring = None
            pool.free(ring, nbytes)
            raise
        pool.free(srq.ring_pa, srq.ring_bytes)
        srq.ring_pa, srq.ring_bytes, srq.log_size, srq.next_ring = ring, nbytes, log, None

    def query_srq(self, srq: HwSrq) -> Srqc:
        return Srqc.unpack(self.cmd(CmdOpcode.QUERY_SRQ, mod=srq.srqn, out_size=Srqc.size()))

    def destroy_srq(self, srq: HwSrq) -> None:
        self.cmd(CmdOpcode.DESTROY_SRQ, mod=srq.srqn)
        del self.srqs[srq.srqn]
        self.srqns.free(srq.srqn)

    # -- port -------------------------------------------------------------------------------

    def query_port(self, port: int = 1) -> PortInfo:
        """The port's state, rate and largest MTU (QUERY_PORT). A device without the command
        (BAD_OPCODE) cannot say: EOPNOTSUPP."""
        try:
            return PortInfo.unpack(self.cmd(CmdOpcode.QUERY_PORT, mod=port,
                                            out_size=PortInfo.size()))
        except HwError as e:
            if e.errno == errno.EOPNOTSUPP:  # BAD_OPCODE
                raise HwError(f"{self.name}: the device cannot report its port",
                              errno.EOPNOTSUPP) from None
            raise

    # -- multicast --------------------------------------------------------------------------

    def attach_mcast(self, qpn: int, gid: bytes, attach: bool = True) -> None:
        if DevFeature.MULTICAST not in self.features:
            raise HwError("the device has no multicast", errno.EOPNOTSUPP)
        self.cmd(CmdOpcode.ATTACH_MCAST if attach else CmdOpcode.DETACH_MCAST, gid, mod=qpn)

    # -- addressing -------------------------------------------------------------------------

    def gid(self, index: int = 0) -> bytes:
        """GID table: entry 0 is the netdev's IPv4 address, IPv4-mapped, used as a RoCEv2 GID
        (Annex A17.4.5.1); the other entries of the table are empty (ENODATA, as
        ib_get_cached_gid answers for an empty entry)."""
        if not 0 <= index < GID_TABLE_LEN:
            raise HwError(f"GID index {index} is outside the table", errno.EINVAL)
        if index != 0:
            raise HwError(f"no GID at index {index}", errno.ENODATA)
        ip = ipaddress.ip_address(self.fn.netdev.ip)
        if ip.version == 4:
            return bytes(10) + b"\xff\xff" + ip.packed
        return ip.packed

    def resolve_dmac(self, dgid: bytes) -> bytes:
        """The neighbour table lookup ib_resolve_eth_dmac does at RTR. The device's own
        address resolves to its own MAC, as a local route does in Linux: traffic to it loops
        back inside the NIC."""
        if is_multicast_ip(dgid):  # a group: its Ethernet group address (ip_eth_mc_map)
            return multicast_mac(dgid)
        ip = ipaddress.IPv6Address(dgid)
        addr = str(ip.ipv4_mapped) if ip.ipv4_mapped else str(ip)
        netdev = self.fn.netdev
        mac = netdev.mac if addr == netdev.ip else self.host.neighbours.get(addr)
        if mac is None:
            raise HwError(f"no neighbour entry for {addr}", errno.EHOSTUNREACH)
        return bytes(int(x, 16) for x in mac.split(":"))
