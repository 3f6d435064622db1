"""Generated RTL sources are what their generators write today (the Python tables are the
single source of truth)."""

from __future__ import annotations

from hdl_tb.gen_opcode_table import OUT, render


def test_opcode_table_current() -> None:
    stale = "rtl/roce_opcodes.vh is stale: python -m hdl_tb.gen_opcode_table"
    assert OUT.read_text() == render(), stale
