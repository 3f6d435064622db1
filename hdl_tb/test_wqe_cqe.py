"""cocotb testbenches for hdl_tb/rtl/wqe_fetch.v and hdl_tb/rtl/cqe_write.v.

Host memory is cocotbext-axi's AxiRamRead / AxiRamWrite (with random pauses on its channels
for AXI latency and backpressure). The SQ rings are filled with hwif.SendWqeCtrl(...).pack()
and hwif.Sge(...).pack() at the hwif.send_wqe_stride layout, and doorbells carry the hwif
UarReg.SQ_DB value split into (qpn, pi); the fetched fields must equal the records written.
Completions go in, and the CQ rings must hold hwif.Cqe(...).pack() with the owner bit of
hwif.cqe_owner(index, log_size), byte for byte, with nothing else in memory changed.

Both modules are tested from this file: each cocotb test runs only under its own toplevel.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Event, RisingEdge
from cocotbext.axi import AxiRamRead, AxiRamWrite, AxiReadBus, AxiWriteBus
from cocotbext.axi.stream import define_stream

from hdl_tb.streams import CqeInBus, CqeInSource, CqeInTransaction, WqeBus, WqeSink
from nicsim import hwif
from nicsim.cosim.dma import pauses

TOPLEVEL = os.environ.get("COCOTB_TOPLEVEL", "")

WqeCfgBus, WqeCfgTransaction, WqeCfgSource, _, _ = define_stream(
    "WqeCfg", signals=["valid", "qpn", "enable", "base", "log_size", "log_stride", "index"])
DbBus, DbTransaction, DbSource, _, _ = define_stream(
    "SqDb", signals=["valid", "qpn", "pi"])
CqCfgBus, CqCfgTransaction, CqCfgSource, _, _ = define_stream(
    "CqCfg", signals=["valid", "cqn", "enable", "base", "log_size", "index"])

CTRL_FIELDS = ["opcode", "flags", "num_sge", "imm_inv", "remote_addr", "rkey", "inline_len",
               "compare_add", "swap", "dest_qpn", "qkey"]
MEM_SIZE = 1 << 20



def bench_line(block: str, data_width: int, frame_bytes: int, packets: int, cycles: int,
               ideal: int) -> None:
    out = os.environ.get("HDL_BENCH_OUT")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"block": block, "data_width": data_width,
                                "frame_bytes": frame_bytes, "packets": packets,
                                "cycles": cycles, "ideal_cycles": ideal}) + "\n")


async def reset(dut) -> None:
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)


# ================================================================ wqe_fetch


@dataclass
class SendQueue:
    """The provider's view of one SQ (what libibverbs' post_send keeps)."""

    qpn: int
    base: int
    log_size: int
    max_sge: int
    max_inline: int = 0
    start: int = 0  # initial 16-bit index
    posted: int = 0  # WQEs posted (unwrapped)
    fetched: int = 0  # WQEs seen on the unit's output
    expected: list = field(default_factory=list)  # (index, SendWqeCtrl, [Sge]) in order

    @property
    def stride(self) -> int:
        return hwif.send_wqe_stride(self.max_sge, self.max_inline)

    @property
    def size(self) -> int:
        return 1 << self.log_size

    def slot_addr(self, index: int) -> int:
        return self.base + (index & (self.size - 1)) * self.stride


class WqeTB:
    def __init__(self, dut, seed: int) -> None:
        self.dut = dut
        self.rng = random.Random(seed)
        self.width = len(dut.m_axi_rdata)
        self.max_sge = len(dut.m_wqe_sge_addr) // 64
        self.num_qp = len(dut.sq_ci) // 16
        Clock(dut.clk, 4, unit="ns").start()
        dut.rw_valid.value = 0  # no go-back here (the requester's, tested in roce_nic)
        self.ram = AxiRamRead(AxiReadBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst,
                              size=MEM_SIZE)
        self.cfg = WqeCfgSource(WqeCfgBus.from_prefix(dut, "cfg"), dut.clk, dut.rst)
        self.db = DbSource(DbBus.from_prefix(dut, "db"), dut.clk, dut.rst)
        self.out = WqeSink(WqeBus.from_prefix(dut, "m_wqe"), dut.clk, dut.rst)
        self.sqs: dict[int, SendQueue] = {}
        self.progress = Event()
        self.received = 0
        self.cycle = 0
        self.ar_cycles: list[int] = []
        self.out_cycles: list[int] = []
        cocotb.start_soon(self._stamp())

    async def _stamp(self) -> None:
        d = self.dut
        while True:
            await RisingEdge(d.clk)
            self.cycle += 1
            if d.m_axi_arvalid.value == 1 and d.m_axi_arready.value == 1:
                self.ar_cycles.append(self.cycle)
            if d.m_wqe_valid.value == 1 and d.m_wqe_ready.value == 1:
                self.out_cycles.append(self.cycle)

    async def configure(self, sq: SendQueue, enable: int = 1) -> None:
        await self.cfg.send(WqeCfgTransaction(
            qpn=sq.qpn, enable=enable, base=sq.base, log_size=sq.log_size,
            log_stride=sq.stride.bit_length() - 1, index=sq.start))
        await self.cfg.wait()
        self.sqs[sq.qpn] = sq
        sq.posted = sq.fetched = 0
        sq.expected.clear()

    def random_wqe(self, sq: SendQueue) -> tuple[hwif.SendWqeCtrl, list[hwif.Sge], bytes]:
        """A random WQE for `sq` and the bytes of its slot (garbage after the used part)."""
        rng = self.rng
        flags = rng.randrange(16)
        inline = bool(flags & hwif.WqeFlags.INLINE) and sq.max_inline > 0
        if not inline:
            flags &= ~hwif.WqeFlags.INLINE
        num_sge = 0 if inline else rng.randint(0, sq.max_sge)
        fits = (sq.stride - hwif.SEND_WQE_CTRL_SIZE) // hwif.SGE_SIZE  # SGEs the slot holds
        if not inline and fits < self.max_sge and rng.random() < 0.1:
            # malformed: claims more SGEs than the slot holds; the unit reads only the slot,
            # the SGEs beyond it read as zero
            num_sge = rng.randint(fits + 1, self.max_sge)
        ctrl = hwif.SendWqeCtrl(
            opcode=int(rng.choice(list(hwif.WqeOpcode))), flags=flags, num_sge=num_sge,
            imm_inv=rng.getrandbits(32), remote_addr=rng.getrandbits(64),
            rkey=rng.getrandbits(32),
            inline_len=rng.randint(1, sq.max_inline) if inline else 0,
            compare_add=rng.getrandbits(64), swap=rng.getrandbits(64),
            dest_qpn=rng.getrandbits(24), qkey=rng.getrandbits(32))
        sges = [hwif.Sge(rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(32))
                for _ in range(min(num_sge, fits))]
        body = ctrl.pack() + b"".join(s.pack() for s in sges)
        slot = bytearray(rng.randbytes(sq.stride))
        slot[:len(body)] = body
        return ctrl, sges, bytes(slot)

    async def post(self, sq: SendQueue, count: int) -> None:
        """Write `count` WQEs into the ring and ring the doorbell once."""
        for _ in range(count):
            index = (sq.start + sq.posted) & hwif.WQE_INDEX_MASK
            ctrl, sges, slot = self.random_wqe(sq)
            addr = sq.slot_addr(index)
            self.ram.write(addr, slot)
            # the slot decodes back to the records (the layout the unit must read)
            assert hwif.SendWqeCtrl.unpack(self.ram.read(addr, hwif.SEND_WQE_CTRL_SIZE)) == ctrl
            sq.expected.append((index, ctrl, sges))
            sq.posted += 1
        db = (sq.qpn << 32) | ((sq.start + sq.posted) & hwif.WQE_INDEX_MASK)  # UarReg.SQ_DB
        await self.db.send(DbTransaction(qpn=db >> 32, pi=db & hwif.WQE_INDEX_MASK))

    def check(self, w) -> None:
        qpn = int(w.qpn)
        assert qpn in self.sqs, f"WQE for unknown QP {qpn}"
        sq = self.sqs[qpn]
        assert sq.expected, f"unexpected WQE on QP {qpn}"
        index, ctrl, sges = sq.expected.pop(0)
        assert int(w.err) == 0
        assert int(w.index) == index, f"QP {qpn}: index {int(w.index):#x} != {index:#x}"
        for name in CTRL_FIELDS:
            got, exp = int(getattr(w, name)), getattr(ctrl, name)
            assert got == exp, f"QP {qpn} WQE {index:#x}: {name} {got:#x} != {exp:#x}"
        addr, length, lkey = int(w.sge_addr), int(w.sge_len), int(w.sge_lkey)
        for j in range(self.max_sge):
            exp = sges[j] if j < len(sges) else hwif.Sge(0, 0, 0)
            got = hwif.Sge((addr >> 64 * j) & (2**64 - 1), (length >> 32 * j) & (2**32 - 1),
                           (lkey >> 32 * j) & (2**32 - 1))
            assert got == exp, f"QP {qpn} WQE {index:#x} SGE {j}: {got} != {exp}"
        sq.fetched += 1
        self.received += 1

    async def consume(self) -> None:
        while True:
            w = await self.out.recv()
            self.check(w)
            self.progress.set()

    async def produce(self, sq: SendQueue, total: int, max_gap: int) -> None:
        """Post `total` WQEs in random batches, never overwriting a slot not yet fetched."""
        while sq.posted < total:
            free = sq.size - (sq.posted - sq.fetched)
            if free == 0:
                self.progress.clear()
                await self.progress.wait()
                continue
            await self.post(sq, self.rng.randint(1, min(free, total - sq.posted)))
            await ClockCycles(self.dut.clk, self.rng.randint(0, max_gap))

    async def drain(self, timeout_cycles: int = 20000) -> None:
        for _ in range(timeout_cycles):
            if all(sq.fetched == sq.posted for sq in self.sqs.values()):
                break
            await RisingEdge(self.dut.clk)
        else:
            raise AssertionError("WQEs not fetched: " + ", ".join(
                f"QP {q}: {s.fetched}/{s.posted}" for q, s in self.sqs.items()))
        await ClockCycles(self.dut.clk, 20)
        assert self.out.empty()
        for q, sq in self.sqs.items():
            ci = (int(self.dut.sq_ci.value) >> 16 * q) & 0xFFFF
            assert ci == (sq.start + sq.posted) & hwif.WQE_INDEX_MASK


@cocotb.test(skip=TOPLEVEL != "wqe_fetch")
async def test_wqe_random(dut):
    """Four SQs with different strides, ring wraps and a 16-bit index wrap, random doorbell
    batches, random AXI latency/backpressure and output backpressure."""
    tb = WqeTB(dut, seed=11)
    await reset(dut)
    rng = tb.rng
    tb.ram.ar_channel.set_pause_generator(pauses(rng, 0.3))
    tb.ram.r_channel.set_pause_generator(pauses(rng, 0.3))
    tb.out.set_pause_generator(pauses(rng, 0.3))
    layouts = [  # (max_sge, max_inline, log_size, initial index)
        (1, 0, 3, 0),
        (tb.max_sge, 0, 2, 0xFFF0),
        (2, 128, 4, 0xFFFA),
        (min(3, tb.max_sge), 0, 0, 0x7FFF),
    ]
    sqs = []
    for q in range(tb.num_qp):
        max_sge, max_inline, log_size, start = layouts[q % len(layouts)]
        max_sge = min(max_sge, tb.max_sge)
        sq = SendQueue(q, 0x10000 + q * 0x2000, log_size, max_sge, max_inline, start)
        await tb.configure(sq)
        sqs.append(sq)
    cocotb.start_soon(tb.consume())
    total = 200 if tb.width > 64 else 150
    producers = [cocotb.start_soon(tb.produce(sq, total, 30)) for sq in sqs]
    for p in producers:
        await p
    await tb.drain()
    for sq in sqs:
        assert sq.fetched == total
        wrapped = ((sq.start + total) & 0xFFFF) < sq.start
        dut._log.info("QP %d: stride %d, %d slots, %d WQEs, index %#06x..%#06x%s", sq.qpn,
                      sq.stride, sq.size, total, sq.start, (sq.start + total) & 0xFFFF,
                      " (16-bit wrap)" if wrapped else "")

    # doorbells for a QP number beyond NUM_QP and for a disabled QP are ignored
    await tb.db.send(DbTransaction(qpn=tb.num_qp, pi=5))
    await tb.configure(sqs[0], enable=0)
    await tb.db.send(DbTransaction(qpn=0, pi=3))
    await ClockCycles(dut.clk, 200)
    assert tb.out.empty() and tb.received == total * tb.num_qp

    # re-enabled, the QP works again from its new initial index
    sqs[0].start = 0xFFFE
    await tb.configure(sqs[0])
    await tb.produce(sqs[0], 12, 5)
    await tb.drain()


@cocotb.test(skip=TOPLEVEL != "wqe_fetch")
async def test_wqe_full_rate(dut):
    """One doorbell for a full ring of each stride, no backpressure: cycles per WQE."""
    tb = WqeTB(dut, seed=12)
    await reset(dut)
    cocotb.start_soon(tb.consume())
    beat = tb.width // 8
    for max_sge in sorted({1, tb.max_sge}):
        sq = SendQueue(0, 0x40000, 6, max_sge)
        await tb.configure(sq)
        tb.ar_cycles.clear()
        tb.out_cycles.clear()
        await tb.post(sq, sq.size)
        await tb.drain()
        n = sq.size
        fetch = min(sq.stride, hwif.SEND_WQE_CTRL_SIZE + hwif.SGE_SIZE * tb.max_sge)
        beats = -(-fetch // beat)
        # the first WQE's own beats plus the spacing of the outputs
        cycles = tb.out_cycles[-1] - tb.out_cycles[0] + beats
        latency = tb.out_cycles[0] - tb.ar_cycles[0]
        dut._log.info("stride %d (%d beats/WQE): %d WQEs in %d cycles = %.2f cycles/WQE "
                      "(ideal %d), AR->first WQE %d cycles", sq.stride, beats, n, cycles,
                      cycles / n, beats, latency)
        bench_line("wqe_fetch", tb.width, fetch, n, cycles, n * beats)
        # bursts back to back: the R channel never idles (AxiRam sends one beat per cycle)
        assert cycles == n * beats, "bubble between WQE fetches"


# ================================================================ cqe_write


@dataclass
class CompletionQueue:
    cqn: int
    base: int
    log_size: int
    count: int = 0  # CQEs produced (unwrapped)

    @property
    def size(self) -> int:
        return 1 << self.log_size


class CqeTB:
    def __init__(self, dut, seed: int) -> None:
        self.dut = dut
        self.rng = random.Random(seed)
        self.width = len(dut.m_axi_wdata)
        self.num_cq = len(dut.cq_pi) // 32
        Clock(dut.clk, 4, unit="ns").start()
        self.ram = AxiRamWrite(AxiWriteBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst,
                               size=MEM_SIZE)
        self.cfg = CqCfgSource(CqCfgBus.from_prefix(dut, "cfg"), dut.clk, dut.rst)
        self.src = CqeInSource(CqeInBus.from_prefix(dut, "s_cqe"), dut.clk, dut.rst)
        self.cqs: dict[int, CompletionQueue] = {}
        # host memory image expected: background pattern + every CQE written
        self.lo, self.hi = 0x20000, 0x30000
        self.shadow = bytearray(self.rng.randbytes(self.hi - self.lo))
        self.ram.write(self.lo, bytes(self.shadow))
        self.cycle = 0
        self.in_cycles: list[int] = []
        cocotb.start_soon(self._stamp())

    async def _stamp(self) -> None:
        d = self.dut
        while True:
            await RisingEdge(d.clk)
            self.cycle += 1
            if d.s_cqe_valid.value == 1 and d.s_cqe_ready.value == 1:
                self.in_cycles.append(self.cycle)

    async def configure(self, cq: CompletionQueue, enable: int = 1, index: int = 0) -> None:
        await self.cfg.send(CqCfgTransaction(cqn=cq.cqn, enable=enable, base=cq.base,
                                             log_size=cq.log_size, index=index))
        await self.cfg.wait()
        cq.count = index
        if enable:
            self.cqs[cq.cqn] = cq
        else:
            self.cqs.pop(cq.cqn, None)

    def random_cqe(self) -> hwif.Cqe:
        rng = self.rng
        return hwif.Cqe(
            qpn=rng.getrandbits(24), wqe_index=rng.getrandbits(16),
            opcode=int(rng.choice(list(hwif.CqeOpcode))),
            status=int(rng.choice(list(hwif.CqeStatus))), byte_len=rng.getrandbits(32),
            imm_inv=rng.getrandbits(32), src_qp=rng.getrandbits(24),
            flags=rng.randrange(8), vendor_err=int(rng.choice(list(hwif.VendorErr))))

    async def complete(self, cqn: int, cqe: hwif.Cqe) -> None:
        """Send one completion; update the expected memory image if the CQ is enabled."""
        await self.src.send(CqeInTransaction(
            cqn=cqn, qpn=cqe.qpn, wqe_index=cqe.wqe_index, opcode=cqe.opcode,
            status=cqe.status, byte_len=cqe.byte_len, imm_inv=cqe.imm_inv, src_qp=cqe.src_qp,
            flags=cqe.flags, vendor_err=cqe.vendor_err))
        cq = self.cqs.get(cqn)
        if cq is None:
            return
        cqe.owner = hwif.cqe_owner(cq.count, cq.log_size)
        addr = cq.base + (cq.count & (cq.size - 1)) * hwif.CQE_SIZE - self.lo
        self.shadow[addr:addr + hwif.CQE_SIZE] = cqe.pack()
        cq.count += 1

    def pi(self, cqn: int) -> int:
        return (int(self.dut.cq_pi.value) >> 32 * cqn) & 0xFFFFFFFF

    async def settle(self, timeout_cycles: int = 20000) -> None:
        """Wait until every CQ's producer index reached its count; check memory and pi."""
        await self.src.wait()
        for _ in range(timeout_cycles):
            if all(self.pi(c) == cq.count for c, cq in self.cqs.items()):
                break
            await RisingEdge(self.dut.clk)
        else:
            raise AssertionError("CQE writes not acknowledged: " + ", ".join(
                f"CQ {c}: {self.pi(c)}/{cq.count}" for c, cq in self.cqs.items()))
        await ClockCycles(self.dut.clk, 10)
        for c, cq in self.cqs.items():
            assert self.pi(c) == cq.count
        assert int(self.dut.wr_error.value) == 0
        got = self.ram.read(self.lo, self.hi - self.lo)
        if got != bytes(self.shadow):
            bad = next(i for i in range(len(got)) if got[i] != self.shadow[i])
            raise AssertionError(f"memory differs at {self.lo + bad:#x}: got "
                                 f"{got[bad & ~31:(bad & ~31) + 32].hex()}, expected "
                                 f"{bytes(self.shadow[bad & ~31:(bad & ~31) + 32]).hex()}")


@cocotb.test(skip=TOPLEVEL != "cqe_write")
async def test_cqe_random(dut):
    """Completions to several CQs of different sizes over several ring wraps, random AXI
    backpressure and source idle cycles; the rings must equal hwif.Cqe.pack() with the owner
    bit of hwif.cqe_owner, and no other byte may change."""
    tb = CqeTB(dut, seed=21)
    dut.hold.value = 0
    await reset(dut)
    rng = tb.rng
    tb.ram.aw_channel.set_pause_generator(pauses(rng, 0.3))
    tb.ram.w_channel.set_pause_generator(pauses(rng, 0.3))
    tb.ram.b_channel.set_pause_generator(pauses(rng, 0.3))
    tb.src.set_pause_generator(pauses(rng, 0.3))
    log_sizes = [1, 2, 3, 4]
    cqs = []
    for c in range(tb.num_cq):
        # CQ 1's ring starts in the upper half of a 64-byte word (a lane offset on wide buses)
        base = tb.lo + 0x1000 * c + (32 if c == 1 else 0)
        cq = CompletionQueue(c, base, log_sizes[c % len(log_sizes)])
        await tb.configure(cq)
        cqs.append(cq)
    rounds = 30
    for r in range(rounds):
        # per round at most one ring's worth per CQ, so every CQE is checked before reuse
        order = [c for c in range(tb.num_cq)
                 for _ in range(rng.randint(cqs[c].size // 2, cqs[c].size))]
        rng.shuffle(order)
        if r == 2:
            order += [tb.num_cq, tb.num_cq + 5]  # CQ numbers beyond NUM_CQ: dropped
        for c in order:
            await tb.complete(c, tb.random_cqe())
        await tb.settle()
    for cq in cqs:
        dut._log.info("CQ %d: %d entries, %d CQEs (%d passes)", cq.cqn, cq.size, cq.count,
                      -(-cq.count // cq.size))
        assert cq.count >= 3 * cq.size

    # a disabled CQ drops completions; re-enabled it starts again at index 0 (owner 1)
    await tb.configure(cqs[0], enable=0)
    for _ in range(3):
        await tb.complete(0, tb.random_cqe())
    await tb.settle()
    await tb.configure(cqs[0])
    for _ in range(3 * cqs[0].size):
        await tb.complete(0, tb.random_cqe())
        if cqs[0].count % cqs[0].size == 0:
            await tb.settle()
    await tb.settle()


@cocotb.test(skip=TOPLEVEL != "cqe_write")
async def test_cqe_full_rate(dut):
    """Back-to-back completions, no backpressure: cycles per CQE."""
    tb = CqeTB(dut, seed=22)
    dut.hold.value = 0
    await reset(dut)
    cq = CompletionQueue(0, tb.lo + 0x4000, 7)
    await tb.configure(cq)
    n = cq.size
    for _ in range(n):
        await tb.complete(0, tb.random_cqe())
    await tb.settle()
    beats = max(1, hwif.CQE_SIZE // (tb.width // 8))
    cycles = tb.in_cycles[-1] - tb.in_cycles[0] + beats
    dut._log.info("%d CQEs accepted in %d cycles = %.2f cycles/CQE (ideal %d)", n, cycles,
                  cycles / n, beats)
    bench_line("cqe_write", tb.width, hwif.CQE_SIZE, n, cycles, n * beats)
    assert cycles == n * beats, "bubble between CQE writes"


@cocotb.test(skip=TOPLEVEL != "cqe_write")
async def test_cqe_hold_index(dut):
    """RESIZE_CQ's hooks: `hold` stops taking completions (busy falls once the accepted ones
    are acknowledged, none is written while held), and a configuration with an index
    continues there: slot index mod size, owner bit of that index (wrapped passes too)."""
    tb = CqeTB(dut, seed=23)
    dut.hold.value = 0
    await reset(dut)
    tb.ram.b_channel.set_pause_generator(pauses(tb.rng, 0.5))
    cq = CompletionQueue(1, tb.lo + 0x2000, 3)
    await tb.configure(cq)
    for _ in range(3):
        await tb.complete(1, tb.random_cqe())
    await tb.src.wait()
    dut.hold.value = 1
    await RisingEdge(dut.clk)
    assert int(dut.busy.value) == 1, "busy before the B responses"
    before = tb.ram.read(cq.base, cq.size * hwif.CQE_SIZE)
    await tb.complete(1, tb.random_cqe())  # queued: it waits while held
    for _ in range(200):
        await RisingEdge(dut.clk)
        assert int(dut.s_cqe_ready.value) == 0
    assert int(dut.busy.value) == 0 and tb.pi(1) == 3
    assert tb.ram.read(cq.base, cq.size * hwif.CQE_SIZE)[3 * hwif.CQE_SIZE:] == \
        before[3 * hwif.CQE_SIZE:], "a CQE was written while held"
    dut.hold.value = 0
    await tb.settle()
    for index in (5, 8 + 6, 0xFFFF_FFFE):  # owner 1, owner 0 (second pass), 32-bit wrap
        cq.base = tb.lo + 0x3000
        await tb.configure(cq, index=index)
        await ClockCycles(dut.clk, 2)
        assert tb.pi(1) == index
        for _ in range(4):
            await tb.complete(1, tb.random_cqe())
        cq.count &= 0xFFFF_FFFF
        await tb.settle()


# ================================================================ pytest entry points


@pytest.mark.parametrize("data_width", [64, 512])
def test_wqe_fetch(data_width):
    from hdl_tb.cocotb_run import run

    run("wqe_fetch", ["wqe_fetch.v", "fifo_fwft.v"], "test_wqe_cqe", {"AXI_DATA_WIDTH": data_width})


@pytest.mark.parametrize("data_width", [64, 512])
def test_cqe_write(data_width):
    from hdl_tb.cocotb_run import run

    run("cqe_write", ["cqe_write.v"], "test_wqe_cqe", {"AXI_DATA_WIDTH": data_width})
