"""The Lua dissector for the RoCEv2 opcodes Wireshark lacks (wireshark/nicsim-roce.lua): with
it, tshark names every frame of the shipped examples' captures (CNPs were "Unknown OpCode"),
and decodes FLUSH and ATOMIC WRITE packets field by field."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nicsim.fabric.pcap import PcapTap
from nicsim.wire import FrameBuilder, Opcode
from nicsim.wire import Path as WirePath
from nicsim.wire.packet import feth, reth

ROOT = Path(__file__).resolve().parents[1]
LUA = ROOT / "wireshark" / "nicsim-roce.lua"
EXAMPLES = ["incast", "pfc-storm", "rtl", "websearch"]

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None,
                                reason="needs tshark (make test installs it)")


def _tshark(pcap: Path, *args: str, lua: bool = True) -> str:
    cmd = ["tshark", "-r", str(pcap), *args]
    if lua:
        cmd[1:1] = ["-X", f"lua_script:{LUA}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("name", ["default", *EXAMPLES])
def test_every_frame_of_the_examples_is_named(name: str, tmp_path: Path) -> None:
    args = [] if name == "default" else [str(ROOT / "examples" / f"{name}.yaml")]
    if name == "websearch":
        args += ["--set", "flows[0].count=100"]
    r = subprocess.run([sys.executable, "-m", "nicsim", "run", *args, "--quiet", "--pcap",
                        str(tmp_path / "run.pcap")], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode in (0, 1), r.stderr  # (1: the PFC storm's victims fail, by design)
    pcaps = sorted(tmp_path.glob("*.pcap"))
    assert pcaps
    for pcap in pcaps:
        lines = _tshark(pcap).splitlines()
        assert lines and not [ln for ln in lines if "Unknown" in ln], pcap.name
    if name == "incast":  # the CNPs: what Wireshark alone cannot name
        without = _tshark(tmp_path / "run.h0.eth0.pcap", lua=False)
        assert "Unknown OpCode" in without
        assert " CNP QP=" in _tshark(tmp_path / "run.h0.eth0.pcap")


def test_flush_and_atomic_write_are_decoded(tmp_path: Path) -> None:
    fb = FrameBuilder(WirePath(b"\x02" * 6, b"\x04" * 6, bytes([10, 0, 0, 1]),
                               bytes([10, 0, 0, 2]), 0xC000))
    pcap = tmp_path / "mpe.pcap"
    with PcapTap(pcap) as tap:
        tap.write(fb.build(Opcode.RC_FLUSH, 0x12, 5, feth(0, 1, 2) + reth(0x1000, 0x4242, 64),
                           ackreq=True), 1000)
        tap.write(fb.build(Opcode.RC_ATOMIC_WRITE, 0x12, 6, reth(0x2000, 0x4343, 8),
                           (0x1122334455667788).to_bytes(8, "big"), ackreq=True), 2000)
    out = _tshark(pcap, "-T", "fields", "-e", "nicsim_roce.opcode", "-e",
                  "nicsim_roce.reth.va", "-e", "nicsim_roce.reth.rkey", "-e",
                  "nicsim_roce.feth.placement", "-e", "nicsim_roce.atomic_write.data")
    assert out.splitlines() == [
        "RC FLUSH\t0x0000000000001000\t0x00004242\t0x02\t",
        "RC ATOMIC WRITE\t0x0000000000002000\t0x00004343\t\t0x1122334455667788"]
    assert "Unknown" not in _tshark(pcap)
