"""A NIC's services with no Nic around them (nicsim.nic.services), for unit tests of one block:
host memory holding the MPT and MTT tables and a CQ ring, helpers that write an MR, a CQ and
a QP context the way the firmware's commands would, and a cable whose far end records every
frame the port sends. A test builds the one block it tests on these."""

from __future__ import annotations

from nicsim.fabric.link import Link, LinkConfig
from nicsim.host.memory import PhysMem
from nicsim.hwif import (
    CQE_SIZE,
    MPT_SIZE,
    MTT_ENTRY_SIZE,
    PAGE_SHIFT,
    PAGE_SIZE,
    Cqe,
    GidType,
    Mpt,
    MptFlags,
    QpState,
    QpType,
)
from nicsim.nic.config import NicConfig
from nicsim.nic.cq import CqCtx
from nicsim.nic.qp import QpCtx
from nicsim.nic.services import Services
from nicsim.sim import Sim
from nicsim.wire import FrameBuilder, Path
from nicsim.wire.packet import Unbuilt

PEER_MAC = bytes.fromhex("02000000000b")
PEER_IP = bytes([10, 0, 0, 2])
MPT_ENTRIES, MTT_ENTRIES = 64, 1024


class Bench(Services):
    """The services of a NIC at 10.0.0.1 (NicConfig's defaults unless `cfg`), over 64 MiB of
    host memory; `sent` holds (time, bytes) of every frame its port put on the cable."""

    def __init__(self, cfg: NicConfig | None = None) -> None:
        cfg = cfg or NicConfig()
        env = Sim()
        self.mem = PhysMem(64 << 20, env=env)
        self.arrived: list[bytes] = []
        super().__init__(env, "bench", cfg, self.mem, self.arrived.append)
        link = Link(env, LinkConfig(100.0, 0.0), "bench")
        self.port.connect(link)
        self.sent: list[tuple[float, bytes]] = []
        link.attach(self._record, unbuilt=True)
        x = self.xlate
        x.mpt_base = self.mem.alloc_contig(MPT_ENTRIES * MPT_SIZE)
        x.mtt_base = self.mem.alloc_contig(MTT_ENTRIES * MTT_ENTRY_SIZE)
        x.mpt_entries, x.mtt_entries = MPT_ENTRIES, MTT_ENTRIES
        self._next_mpt, self._next_mtt = 1, 0

    def _record(self, frame: bytes | Unbuilt) -> None:
        self.sent.append((self.env.now, frame.build() if isinstance(frame, Unbuilt)
                          else bytes(frame)))

    def add_mr(self, pd: int, length: int, access: int, va: int = 0x7F00_0000_0000
               ) -> tuple[int, int, list[int]]:
        """Register `length` bytes at `va` on fresh, scattered pages, as WRITE_MPT and
        WRITE_MTT would leave the tables: (key, va, physical page of each virtual page)."""
        pages = [self.mem.alloc_page() for _ in range(-(-(va % PAGE_SIZE + length)
                                                         // PAGE_SIZE))]
        first = self._next_mtt
        for i, pa in enumerate(pages):
            self.mem.write(self.xlate.mtt_base + (first + i) * MTT_ENTRY_SIZE,
                           pa.to_bytes(MTT_ENTRY_SIZE, "little"))
        self._next_mtt += len(pages)
        index = self._next_mpt
        self._next_mpt += 1
        key = index << 8 | 0x5A
        mpt = Mpt(key, pd, va, length, first, access, MptFlags.VALID, PAGE_SHIFT)
        self.mem.write(self.xlate.mpt_base + index * MPT_SIZE, mpt.pack())
        return key, va, pages

    @staticmethod
    def _pieces(pages: list[int], va0: int, va: int, n: int) -> list[tuple[int, int]]:
        """The (physical address, length) pieces of [va, va + n) of an MR (its pages, and
        `va0` the virtual address of its first byte)."""
        out = []
        while n:
            off = va - (va0 & ~(PAGE_SIZE - 1))
            k = min(n, PAGE_SIZE - (off & (PAGE_SIZE - 1)))
            out.append((pages[off >> PAGE_SHIFT] + (off & (PAGE_SIZE - 1)), k))
            va, n = va + k, n - k
        return out

    def read_va(self, pages: list[int], va0: int, va: int, n: int) -> bytes:
        """`n` bytes of an MR at `va`, as the host sees them (see _pieces)."""
        self.mem.sync()
        return b"".join(self.mem.read(pa, k) for pa, k in self._pieces(pages, va0, va, n))

    def write_va(self, pages: list[int], va0: int, va: int, data: bytes) -> None:
        """The host writes `data` into an MR at `va` (see _pieces)."""
        at = 0
        for pa, k in self._pieces(pages, va0, va, len(data)):
            self.mem.write(pa, data[at:at + k])
            at += k

    def add_cq(self, cqn: int, log_size: int = 6) -> CqCtx:
        """A CQ with its ring and doorbell record in host memory, as CREATE_CQ makes it."""
        base = self.mem.alloc_contig((CQE_SIZE << log_size) + PAGE_SIZE)
        cq = self.cq.cqs[cqn] = CqCtx(cqn, log_size, base, base + (CQE_SIZE << log_size))
        return cq

    def cqes(self, cq: CqCtx) -> list[Cqe]:
        """The CQEs the NIC has written to `cq`'s ring so far, in order."""
        self.mem.sync()
        return [Cqe.unpack(self.mem.read(cq.base + i * CQE_SIZE, CQE_SIZE))
                for i in range(cq.pi)]

    def rc_qp(self, qpn: int, dest_qpn: int, cq: CqCtx, pd: int = 1, access: int = 0,
              mtu: int = 1024, sq_log_size: int = 4, stride_log: int = 6) -> QpCtx:
        """An RC QP in RTS towards the peer at 10.0.0.2, its send ring in host memory: what
        CREATE_QP and the MODIFY_QPs to RTS leave behind."""
        sq = self.mem.alloc_contig(PAGE_SIZE << max(0, sq_log_size + stride_log - PAGE_SHIFT))
        qp = QpCtx(qpn, QpType.RC, pd, cq.cqn, cq.cqn, sq, sq_log_size, stride_log, 0, 0, 4)
        qp.state, qp.access, qp.mtu, qp.dest_qpn = QpState.RTS, access, mtu, dest_qpn
        qp.dmac = PEER_MAC
        qp.dgid = bytes(10) + b"\xff\xff" + PEER_IP
        # the port's RoCE v2 entry of its IPv4 address (as the driver's roce_v2_gid picks it)
        qp.sgid, qp.sgid_index = next((g, i) for i, (g, kind) in enumerate(self.framing.gids)
                                      if kind is GidType.ROCE_V2 and g[:2] == bytes(2))
        qp.builder = self.framing.builder_for(qp)
        path = qp.builder.path
        qp.rx_addrs = path.dip + path.sip
        return qp

    def peer_builder(self, qp: QpCtx) -> FrameBuilder:
        """Frames from the peer's end of `qp`'s path (what arrives at this NIC)."""
        p = qp.builder.path  # type: ignore[union-attr]
        return FrameBuilder(Path(p.dmac, p.smac, p.dip, p.sip, p.sport, p.dscp, p.ecn))
