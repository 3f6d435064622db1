"""nsnic: the vendor hardware driver. Programs the NIC only through its BAR and host memory.

Like mlx4/mlx5, it owns the device's resources: QP and CQ numbers, MPT indices and their key
variants, MTT ranges, and the host memory the device uses for its tables (set up once with
INIT_HCA, like ICM). Every object change is a mailbox command (hwif.CmdOpcode).
"""

from __future__ import annotations

import errno
import ipaddress

from nicsim.driver.kernel.hw.device import NsnicDevice
from nicsim.driver.kernel.hw.objects import (
    HwCq,
    HwError,
    HwMr,
    HwQp,
    HwSrq,
)
from nicsim.driver.kernel.hw.odp import OdpHandler
from nicsim.driver.kernel.query import FIRST_QPN, GID_TABLE_LEN

from nicsim.host.host import Host, PciFunction
from nicsim.host.memory import AddressSpace, MemoryError_, PhysMem
from nicsim.hwif import (
    PAGE_SHIFT,
    PAGE_SIZE,
    CmdOpcode,
    Cqc,
    CqState,
    DevFeature,
    GidType,
    Mpt,
    MptFlags,
    PortInfo,
    Qpc,
    QpType,
    Srqc,
    cqe_stride,
    gid_table,
    recv_wqe_stride,
    send_wqe_stride,
)
from nicsim.wire import is_multicast_ip, mac_bytes, multicast_mac

DBREC_SIZE = 64  # a CQ's doorbell record: a u32, on its own cache line
def _mem(fn):  # noqa: ANN001, ANN202
    """Host memory exhaustion, as the driver reports it."""
    try:
        return fn()
    except MemoryError_ as e:
        raise HwError(str(e), e.errno) from None


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


class NsnicDriver(NsnicDevice):
    """The verbs' objects on one bound device (MRs, windows, CQs, QPs, SRQs, multicast), and
    its on-demand paging."""

    def __init__(self, host: Host, fn: PciFunction, name: str, ifindex: int = 2) -> None:
        super().__init__(host, fn, name, ifindex)
        self.odp = OdpHandler(self)

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

    # -- CQ ---------------------------------------------------------------------------------

    def create_cq(self, cqe: int, uar: int, pool: RingPool) -> HwCq:
        if cqe < 1 or cqe > self.caps.max_cqe:
            raise HwError(f"CQ size {cqe} out of range", errno.EINVAL)
        log = max(1, (cqe - 1).bit_length())
        # Every CQ of a device that scatters to the CQE has its 64-byte slots (hwif.cqe_stride),
        # as libmlx5 makes 64-byte CQEs by default (MLX5_CQE_SIZE).
        stride = cqe_stride(self.caps.cqe_inline)
        ring_bytes = stride << log
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
        cq = HwCq(cqn, log, ring, ring_bytes, dbrec, stride)
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
        ring_bytes = cq.stride << log
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

    def gids(self) -> tuple[tuple[bytes, GidType], ...]:
        """The port's GID table as roce_gid_mgmt fills it from the netdev (hwif.gid_table):
        the link-local GID, then the netdev's address (IPv4-mapped, Annex A17.4.5.1), each
        as RoCE v1 and v2 if the device has v1 (FEATURES ROCE_V1), else as v2."""
        netdev = self.fn.netdev
        return gid_table(mac_bytes(netdev.mac), ipaddress.ip_address(netdev.ip).packed,
                         DevFeature.ROCE_V1 in self.features)

    def gid_index(self, gid: bytes, kind: GidType = GidType.ROCE_V2) -> int:
        """The index of the entry (gid, kind) (ibv_find_gid_index; rdma_cm takes the RoCE v2
        entry of the bound address, its default GID type). ENODATA if there is none."""
        try:
            return self.gids().index((gid, kind))
        except ValueError:
            raise HwError("no such GID in the table", errno.ENODATA) from None

    def gid(self, index: int = 0) -> tuple[bytes, GidType]:
        """GID table entry `index` and its type: EINVAL outside the table, ENODATA for an
        empty entry (as ib_get_cached_gid answers)."""
        if not 0 <= index < GID_TABLE_LEN:
            raise HwError(f"GID index {index} is outside the table", errno.EINVAL)
        table = self.gids()
        if index >= len(table):
            raise HwError(f"no GID at index {index}", errno.ENODATA)
        return table[index]

    def resolve_dmac(self, dgid: bytes) -> bytes:
        """The neighbour table lookup ib_resolve_eth_dmac does at RTR. The device's own
        address resolves to its own MAC, as a local route does in Linux: traffic to it loops
        back inside the NIC. A link-local GID carries its MAC (rdma_get_ll_mac: the
        modified EUI-64 interface identifier, RFC 4291)."""
        if is_multicast_ip(dgid):  # a group: its Ethernet group address (ip_eth_mc_map)
            return multicast_mac(dgid)
        if dgid[:8] == b"\xfe\x80" + bytes(6):
            if dgid[11:13] != b"\xff\xfe":
                raise HwError("a link-local GID without a MAC in it", errno.EHOSTUNREACH)
            return bytes((dgid[8] ^ 2,)) + dgid[9:11] + dgid[13:16]
        ip = ipaddress.IPv6Address(dgid)
        addr = str(ip.ipv4_mapped) if ip.ipv4_mapped else str(ip)
        netdev = self.fn.netdev
        mac = netdev.mac if addr == netdev.ip else self.host.neighbours.get(addr)
        if mac is None:
            raise HwError(f"no neighbour entry for {addr}", errno.EHOSTUNREACH)
        return bytes(int(x, 16) for x in mac.split(":"))
