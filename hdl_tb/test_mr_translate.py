"""cocotb testbench for hdl_tb/rtl/mr_translate.v (MPT/MTT address translation).

The tables are written through the command port with hwif.Mpt records and MTT page addresses;
every expected response comes from nicsim.nic.translation (check, split, check_and_split). The
RTL splits at every page boundary while `split` merges physically contiguous pages, so the
expected per-page segments are `split` applied to each page piece of the request, and the RTL's
segments merged by the Python rule must equal `check_and_split`'s.

The command, request and response ports are valid/ready buses driven by cocotbext-axi stream
models (`define_stream`; the request and response ports' in hdl_tb/streams.py, shared with
roce_nic's bench).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi.stream import define_stream

from hdl_tb.streams import MrReqBus, MrReqSource, MrReqTransaction, MrRspBus, MrRspSink
from nicsim import hwif
from nicsim.nic import translation

CmdBus, CmdTransaction, CmdSource, _, _ = define_stream(
    "MrCmd", signals=["valid", "ready", "op", "index", "data"])

OP_WRITE_MPT, OP_WRITE_MTT, OP_INVALIDATE_MPT = 0, 1, 2
LATENCY = 7  # documented in mr_translate.v: request handshake -> first response handshake

Seg = tuple[int, int, int, int]  # (status, pa, len, last)


def page_pieces(mpt: hwif.Mpt, va: int, length: int) -> list[tuple[int, int]]:
    """[va, va+length) cut at the MR's page boundaries."""
    psize = 1 << mpt.page_shift
    out = []
    while length > 0:
        n = min(psize - (va & (psize - 1)), length)
        out.append((va, n))
        va += n
        length -= n
    return out


def expected_segments(mpt: hwif.Mpt | None, mtt, st: hwif.XlateStatus, va: int,
                      length: int) -> list[Seg]:
    """The RTL's responses for one request whose status nicsim gives as `st`
    (translation.check_and_split): nicsim's split applied to each page piece (so that
    physically contiguous pages are not merged)."""
    if st is not hwif.XlateStatus.OK or length == 0:
        return [(int(st), 0, 0, 1)]
    assert mpt is not None
    segs: list[tuple[int, int]] = []
    for pva, n in page_pieces(mpt, va, length):
        piece = translation.split(mpt, mtt, pva, n)
        assert len(piece) == 1
        segs += piece
    return [(int(st), pa, n, int(i == len(segs) - 1)) for i, (pa, n) in enumerate(segs)]


def merge_contiguous(segs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The merge rule of translation.split, applied to the RTL's per-page segments."""
    out: list[tuple[int, int]] = []
    for pa, n in segs:
        if out and out[-1][0] + out[-1][1] == pa:
            out[-1] = (out[-1][0], out[-1][1] + n)
        else:
            out.append((pa, n))
    return out


def param(dut, name: str, default: int) -> int:
    try:
        return int(getattr(dut, name).value)
    except (AttributeError, ValueError, TypeError):
        return default


class TB:
    def __init__(self, dut, seed: int) -> None:
        self.dut = dut
        self.rng = random.Random(seed)
        self.mpt_depth = param(dut, "MPT_DEPTH", 256)
        self.mtt_depth = param(dut, "MTT_DEPTH", 1024)
        self.pa_width = len(dut.rsp_pa)
        self.tag_width = len(dut.rsp_tag)
        self.len_width = len(dut.req_len)
        Clock(dut.clk, 4, unit="ns").start()
        self.cmd = CmdSource(CmdBus.from_prefix(dut, "cmd"), dut.clk, dut.rst)
        self.req = MrReqSource(MrReqBus.from_prefix(dut, "req"), dut.clk, dut.rst)
        self.rsp = MrRspSink(MrRspBus.from_prefix(dut, "rsp"), dut.clk, dut.rst)
        # the model of the device's tables: MPT index -> Mpt (None: never written)
        self.mpt: dict[int, hwif.Mpt] = {}
        self.mtt: dict[int, int] = {}
        self.keys: list[int] = []  # keys of the MRs written
        self.stats: dict[str, int] = {}
        self.cycle = 0
        self.req_cycles: list[int] = []
        self.rsp_cycles: list[int] = []
        cocotb.start_soon(self._stamp())

    async def _stamp(self) -> None:
        """Record the cycle of every request and response handshake."""
        d = self.dut
        while True:
            await RisingEdge(d.clk)
            self.cycle += 1
            if d.req_valid.value == 1 and d.req_ready.value == 1:
                self.req_cycles.append(self.cycle)
            if d.rsp_valid.value == 1 and d.rsp_ready.value == 1:
                self.rsp_cycles.append(self.cycle)

    async def reset(self) -> None:
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)

    # -- command port
    async def write_mpt(self, index: int, mpt: hwif.Mpt) -> None:
        data = int.from_bytes(mpt.sw_part(), "little")
        await self.cmd.send(CmdTransaction(op=OP_WRITE_MPT, index=index, data=data))
        if index < self.mpt_depth:
            self.mpt[index] = mpt

    async def write_mtt(self, index: int, pa: int) -> None:
        data = int.from_bytes(pa.to_bytes(hwif.MTT_ENTRY_SIZE, "little"), "little")
        await self.cmd.send(CmdTransaction(op=OP_WRITE_MTT, index=index, data=data))
        self.mtt[index] = pa

    async def invalidate_mpt(self, index: int) -> None:
        await self.cmd.send(CmdTransaction(op=OP_INVALIDATE_MPT, index=index, data=0))
        if index in self.mpt:
            self.mpt[index] = dataclasses.replace(self.mpt[index], flags=0)

    async def cmd_idle(self) -> None:
        await self.cmd.wait()
        await ClockCycles(self.dut.clk, 2)

    # -- tables
    def random_pa(self) -> int:
        return self.rng.randrange(0, 1 << (self.pa_width - hwif.PAGE_SHIFT)) << hwif.PAGE_SHIFT

    async def build_tables(self, n_mr: int, max_pages: int = 9) -> None:
        rng = self.rng
        next_mtt = 0
        indexes = rng.sample(range(self.mpt_depth), min(n_mr, self.mpt_depth))
        for n, idx in enumerate(indexes):
            if n == 0:
                # an MR ending exactly at 2**64: va + len must not wrap in the bounds check
                length = 3 * hwif.PAGE_SIZE - 123
                start = (1 << 64) - length
            else:
                start = rng.randrange(0, 1 << 48)
                length = rng.randint(1, max_pages * hwif.PAGE_SIZE - (start & 0xFFF))
            pages = ((start + length - 1) >> hwif.PAGE_SHIFT) - (start >> hwif.PAGE_SHIFT) + 1
            if next_mtt + pages > self.mtt_depth:
                break
            key = (idx << 8) | rng.randrange(256)
            access = rng.randrange(16)
            flags = hwif.MptFlags.VALID if rng.random() < 0.9 else 0
            mpt = hwif.Mpt(key, rng.randrange(1 << 32), start, length, next_mtt, access, flags)
            pa = self.random_pa()
            for p in range(pages):
                if p and rng.random() < 0.4 and pa + hwif.PAGE_SIZE < (1 << self.pa_width):
                    pa += hwif.PAGE_SIZE  # physically contiguous with the previous page
                else:
                    pa = self.random_pa()
                await self.write_mtt(next_mtt + p, pa)
            await self.write_mpt(idx, mpt)
            self.keys.append(key)
            next_mtt += pages
        # an MPT entry with a page size the unit does not implement is stored invalid
        free = [i for i in range(self.mpt_depth) if i not in self.mpt]
        if free:
            i = free[0]
            odd = hwif.Mpt((i << 8) | 1, 0, 0, hwif.PAGE_SIZE, 0, 0xF, hwif.MptFlags.VALID,
                           page_shift=16)
            await self.cmd.send(CmdTransaction(op=OP_WRITE_MPT, index=i,
                                               data=int.from_bytes(odd.sw_part(), "little")))
            self.mpt[i] = dataclasses.replace(odd, flags=0)
        await self.cmd_idle()

    async def add_mrs_past_the_mtt(self) -> None:
        """Two MRs whose MTT entries run past the table: one from its last two entries on
        (its first two pages translate, the rest is MTT_FAULT), one whose MTT index is
        beyond the table (its high bits would wrap onto entry 5 if dropped)."""
        free = [i for i in range(self.mpt_depth) if i not in self.mpt]
        for idx, first in zip(free[:2], (self.mtt_depth - 2, self.mtt_depth + 5), strict=False):
            start = self.rng.randrange(0, 1 << 40) << hwif.PAGE_SHIFT
            mpt = hwif.Mpt((idx << 8) | 7, 0x55, start, 4 * hwif.PAGE_SIZE, first, 0xF,
                           hwif.MptFlags.VALID)
            for i in range(first, min(first + 4, self.mtt_depth)):
                await self.write_mtt(i, self.random_pa())
            await self.write_mpt(idx, mpt)
            self.keys.append(mpt.key)
        await self.cmd_idle()

    # -- requests
    def random_request(self) -> tuple[int, int, int, int, int, str]:
        """(key, pd, access, va, len, kind): an in-bounds request of a random MR, perturbed."""
        rng = self.rng
        key = rng.choice(self.keys)
        mpt = self.mpt[key >> 8]
        pd = mpt.pd
        access = mpt.access & rng.randrange(16)
        end = mpt.start + mpt.length
        va = rng.randrange(mpt.start, end)
        pages = rng.randint(1, 5)
        room = pages * hwif.PAGE_SIZE - (va & 0xFFF)
        length = rng.randint(0, min(end - va, room, (1 << self.len_width) - 1))
        if rng.random() < 0.05:
            length = 0
        kind = rng.choice(["ok"] * 6 + ["variant", "pd", "access", "low", "high", "wrap",
                                        "combo", "unwritten", "index"])
        kinds = {kind} if kind != "combo" else set(rng.sample(["variant", "pd", "access",
                                                               "high"], 2))
        if "variant" in kinds:
            key ^= rng.randint(1, 255)
        if "pd" in kinds:
            pd ^= 1 << rng.randrange(32)
        if "access" in kinds:
            missing = ~mpt.access & 0xFF
            access |= 1 << rng.choice([b for b in range(8) if missing >> b & 1])
        if "low" in kinds and mpt.start > 0:
            va = mpt.start - rng.randint(1, min(mpt.start, 3 * hwif.PAGE_SIZE))
            length = rng.randint(0, 2 * hwif.PAGE_SIZE)
        if "high" in kinds:
            length = end - va + rng.randint(1, 2 * hwif.PAGE_SIZE)
        if "wrap" in kinds:
            va = (1 << 64) - rng.randint(1, 2 * hwif.PAGE_SIZE)
            length = rng.randint(2 * hwif.PAGE_SIZE, 3 * hwif.PAGE_SIZE)
        if "unwritten" in kinds:
            free = [i for i in range(self.mpt_depth) if i not in self.mpt]
            if free:
                key = (rng.choice(free) << 8) | rng.randrange(256)
        if "index" in kinds:
            key = (rng.randrange(self.mpt_depth, 1 << 24) << 8) | rng.randrange(256)
        length = min(length, (1 << self.len_width) - 1)
        return key, pd, access, va, length, kind

    async def run_requests(self, reqs: list[tuple[int, int, int, int, int]]) -> int:
        """Send `reqs`, check every response; return the number of segments received.
        `self.stats` counts the statuses and the segments per request seen."""
        expected = []
        for i, (key, pd, access, va, length) in enumerate(reqs):
            tag = i % (1 << self.tag_width)
            mpt = self.mpt.get(key >> 8) if (key >> 8) < self.mpt_depth else None
            ref = translation.check_and_split(mpt, self.mtt, key, pd, access, va,
                                              length, self.mtt_depth)
            exp = expected_segments(mpt, self.mtt, ref[0], va, length)
            expected.append((tag, exp, ref, (hex(key), hex(va), length)))
            await self.req.send(MrReqTransaction(key=key, pd=pd, access=access, va=va,
                                                 len=length, tag=tag))
        nseg = 0
        for tag, exp, (st, merged), what in expected:
            got: list[Seg] = []
            while True:
                r = await self.rsp.recv()
                assert int(r.tag) == tag, f"tag {int(r.tag)} != {tag} for {what}"
                got.append((int(r.status), int(r.pa), int(r.len), int(r.last)))
                if int(r.last):
                    break
            assert got == exp, f"request {what}: got {got}, expected {exp}"
            # the RTL's per-page segments, merged by the Python rule, are check_and_split's
            assert got[0][0] == int(st)
            assert merge_contiguous([(pa, n) for _, pa, n, _ in got if n]) == merged
            nseg += len(got)
            name = hwif.XlateStatus(got[0][0]).name
            self.stats[name] = self.stats.get(name, 0) + 1
            if got[0][0] == hwif.XlateStatus.OK:
                k = f"{len(got)}seg"
                self.stats[k] = self.stats.get(k, 0) + 1
        assert self.rsp.empty()
        return nseg


def bench_line(block: str, frame_bytes: int, packets: int, cycles: int, ideal: int) -> None:
    out = os.environ.get("HDL_BENCH_OUT")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"block": block, "data_width": None, "frame_bytes": frame_bytes,
                                "packets": packets, "cycles": cycles,
                                "ideal_cycles": ideal}) + "\n")


@cocotb.test()
async def test_random_lookups(dut):
    """Random tables and requests of every kind, random idle cycles and backpressure; then
    invalidate and rewrite entries (new key variant) and check again."""
    tb = TB(dut, seed=1)
    await tb.reset()
    await tb.build_tables(n_mr=40)
    await tb.add_mrs_past_the_mtt()
    rng = tb.rng
    tb.req.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    tb.rsp.set_pause_generator(iter(lambda: rng.random() < 0.4, None))
    kinds: dict[str, int] = {}
    reqs = []
    for _ in range(1500):
        *r, kind = tb.random_request()
        kinds[kind] = kinds.get(kind, 0) + 1
        reqs.append(tuple(r))
    nseg = await tb.run_requests(reqs)
    dut._log.info("phase 1: %d requests, %d segments, kinds %s", len(reqs), nseg, kinds)
    dut._log.info("responses: %s", tb.stats)
    for st in hwif.XlateStatus:
        if st in (hwif.XlateStatus.PAGE_FAULT, hwif.XlateStatus.ODP_ERROR):
            continue  # on-demand paging: the model's, the RTL has none (no MptFlags.ODP)
        assert tb.stats.get(st.name, 0) > 0, f"no request ended with {st.name}"
    for n in range(1, 6):
        assert tb.stats.get(f"{n}seg", 0) > 0, f"no OK request spanning {n} pages"

    # invalidate some entries, re-register others under a new key variant
    written = [k >> 8 for k in tb.keys]
    for idx in rng.sample(written, len(written) // 4):
        await tb.invalidate_mpt(idx)
    for idx in rng.sample(written, len(written) // 4):
        old = tb.mpt[idx]
        new = dataclasses.replace(old, key=(idx << 8) | ((old.key + 1) & 0xFF),
                                  flags=hwif.MptFlags.VALID)
        await tb.write_mpt(idx, new)
        tb.keys.append(new.key)
    await tb.cmd_idle()
    reqs = [tuple(tb.random_request()[:5]) for _ in range(1000)]
    nseg = await tb.run_requests(reqs)
    dut._log.info("phase 2: %d requests, %d segments", len(reqs), nseg)


@cocotb.test()
async def test_full_rate(dut):
    """Back-to-back requests, no backpressure: single-page lookups run at one per cycle with a
    fixed latency; multi-page requests emit one segment per cycle without gaps."""
    tb = TB(dut, seed=2)
    await tb.reset()
    await tb.build_tables(n_mr=24)
    rng = tb.rng
    valid_keys = [k for k in tb.keys if tb.mpt[k >> 8].flags & hwif.MptFlags.VALID]

    def request(max_pages: int) -> tuple[int, int, int, int, int]:
        while True:
            key = rng.choice(valid_keys)
            m = tb.mpt[key >> 8]
            va = rng.randrange(m.start, m.start + m.length)
            room = max_pages * hwif.PAGE_SIZE - (va & 0xFFF)
            length = rng.randint(1, min(m.start + m.length - va, room))
            pieces = len(page_pieces(m, va, length))
            if pieces == max_pages or max_pages == 1:
                return key, m.pd, m.access, va, length

    for pages in (1, 2, 5):
        reqs = [request(pages) for _ in range(64)]
        tb.req_cycles.clear()
        tb.rsp_cycles.clear()
        nseg = await tb.run_requests(reqs)
        assert nseg == len(reqs) * pages
        first_req, last_req = tb.req_cycles[0], tb.req_cycles[-1]
        first_rsp, last_rsp = tb.rsp_cycles[0], tb.rsp_cycles[-1]
        latency = first_rsp - first_req
        cycles = last_rsp - first_rsp + 1
        dut._log.info("%d-page requests: latency %d cycles, %d segments in %d cycles "
                      "(%.3f requests/cycle)", pages, latency, nseg, cycles, len(reqs) / cycles)
        assert latency == LATENCY
        assert cycles == nseg, "a segment gap in back-to-back operation"
        if pages == 1:
            assert last_req - first_req + 1 == len(reqs), "request side not at 1 per cycle"
        mean_len = sum(r[4] for r in reqs) // len(reqs)
        bench_line("mr_translate", mean_len, len(reqs), cycles, nseg)


@pytest.mark.parametrize("params", [
    {"MPT_DEPTH": 64, "MTT_DEPTH": 256, "TAG_WIDTH": 8, "PA_WIDTH": 64},
    {"MPT_DEPTH": 1024, "MTT_DEPTH": 4096, "TAG_WIDTH": 12, "PA_WIDTH": 52, "LEN_WIDTH": 20},
], ids=["small", "large"])
def test_mr_translate(params):
    from hdl_tb.cocotb_run import run

    run("mr_translate", ["mr_translate.v"], "test_mr_translate", params)
