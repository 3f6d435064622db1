"""The nsnic device as its driver reaches it: the probe (the device's identity, features and
capabilities, the host memory of its tables given with INIT_HCA), the command mailbox, the
event queues, and the numbers and table ranges the driver hands out. The verbs' objects
(nicsim.driver.kernel.hw.nsnic) and on-demand paging (nicsim.driver.kernel.hw.odp) are built
on it.
"""

from __future__ import annotations

import errno
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
from nicsim.driver.kernel.query import FIRST_QPN

from nicsim.host.host import Host, PciFunction
from nicsim.host.memory import Extents
from nicsim.hwif import (
    BF_MAX,
    CMD_BUSY,
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
    DevFeature,
    DeviceCaps,
    Eqc,
    Eqe,
    HcaInit,
    Mpt,
    MptFlags,
    Reg,
    pack_mtt,
)

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
# Freed QPNs and MPT indices wait in quarantine before reuse, so a packet or rkey still in
# flight for the old object can never reach a new one.
QUARANTINE = 64



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


class NsnicDevice:
    """One bound device (the `probe` of a PCI driver), before any verbs object."""

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

    # -- command mailbox --------------------------------------------------------------------

    def cmd(self, op: CmdOpcode, data: bytes = b"", mod: int = 0, out_size: int = 0) -> bytes:
        """Run one mailbox command and wait for it (the driver polls CMD_STATUS over MMIO)."""
        if len(data) > PAGE_SIZE * 16:
            raise HwError("command input too large", errno.EINVAL)
        self.wait_mailbox()
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

    def wait_mailbox(self) -> None:
        """Wait (from a program's call) until no SimPy process holds the mailbox: the ODP
        worker holds it from its sequence check through its MTT writes."""
        while self._mbox_busy:
            self.host.spend(500.0)

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

    # -- keys and their table entries ---------------------------------------------------

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
