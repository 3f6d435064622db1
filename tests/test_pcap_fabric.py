"""The pcap checker on fabric traffic: PFC and 802.3x PAUSE frames, RoCEv2 inside 802.1Q and
QinQ tags; captures written by nicsim.fabric.pcap.PcapTap, some from a switch's PFC incast,
and tshark's reading of the PFC frames the switch sends."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path as FsPath

import pytest

from nicsim.fabric.pcap import BAD_PFC, PcapReport, PcapTap, check_pcap, pcap_check_main
from nicsim.fabric.pfc import (
    MAX_QUANTA,
    PAUSE_OPCODE,
    PFC_DMAC,
    PFC_LEN,
    parse_pfc,
    pfc_frame,
)
from nicsim.testing.switch_world import World, incast
from nicsim.wire import Ecn, FrameBuilder, Opcode, Path, reth
from nicsim.wire.packet import ETH_MIN_FRAME

TSHARK = shutil.which("tshark")
MAC = bytes.fromhex("02aa00000001")
V4 = Path(bytes.fromhex("020000000001"), bytes.fromhex("020000000002"), bytes([10, 0, 0, 1]),
          bytes([10, 0, 0, 2]), 0xC123, dscp=26, ecn=Ecn.ECT0)
V6 = Path(bytes.fromhex("020000000001"), bytes.fromhex("020000000002"),
          bytes.fromhex("fd000000000000000000000000000001"),
          bytes.fromhex("fd000000000000000000000000000002"), 0xC456, dscp=26)


def tag(frame: bytes, *tpids: int, pcp: int = 3, vid: int = 100) -> bytes:
    """`frame` with 802.1Q tags (TPID, PCP, VID) inserted after the MAC addresses."""
    tci = ((pcp << 13) | vid).to_bytes(2, "big")
    return frame[:12] + b"".join(t.to_bytes(2, "big") + tci for t in tpids) + frame[12:]


def roce(path: Path = V4, psn: int = 1) -> bytes:
    return FrameBuilder(path).build(Opcode.RC_RDMA_WRITE_ONLY, 0x11, psn,
                                    reth(0x1000, 0x55, 64), bytes(range(64)), ackreq=True)


def pause_8023x(quanta: int) -> bytes:
    return (PFC_DMAC + MAC + b"\x88\x08" + PAUSE_OPCODE.to_bytes(2, "big")
            + quanta.to_bytes(2, "big")).ljust(ETH_MIN_FRAME, b"\0")


def write_pcap(path: FsPath, frames: list[bytes]) -> None:
    with PcapTap(path) as tap:
        for i, f in enumerate(frames):
            tap.write(f, 1000 * i)


def mixed_capture() -> tuple[list[bytes], PcapReport]:
    """A capture of every kind of frame the checker tells apart, and the report it should
    give (frame numbers are 1-based)."""
    bad_icrc = bytearray(tag(roce(psn=3), 0x8100))
    bad_icrc[-10] ^= 0x40  # a payload byte
    bad_ttl = bytearray(tag(roce(psn=4), 0x8100))
    bad_ttl[4 + 22] -= 1  # TTL changed, header checksum not
    good_pfc = pfc_frame(MAC, {3: MAX_QUANTA})
    wrong_dst = bytes.fromhex("0180c2000002") + good_pfc[6:]
    reserved_bits = good_pfc[:16] + b"\x01\x08" + good_pfc[18:]
    padding = good_pfc[:PFC_LEN] + b"\x01" + good_pfc[PFC_LEN + 1:]
    arp = b"\xff" * 6 + MAC + b"\x08\x06" + bytes(46)
    mpcp = PFC_DMAC + MAC + b"\x88\x08\x00\x02" + bytes(44)  # EPON GATE: other traffic
    frames = [
        roce(),  # 1
        tag(roce(psn=2), 0x8100),  # 2
        tag(roce(V6, psn=2), 0x88A8, 0x8100),  # 3: QinQ, IPv6
        bytes(bad_icrc),  # 4
        good_pfc,  # 5
        pfc_frame(MAC, {3: 0}),  # 6
        pfc_frame(MAC, {0: 100, 3: MAX_QUANTA, 7: 5}),  # 7
        pause_8023x(MAX_QUANTA),  # 8
        wrong_dst,  # 9
        reserved_bits,  # 10
        padding,  # 11
        good_pfc[:30],  # 12
        tag(arp, 0x8100),  # 13
        tag(good_pfc, 0x8100),  # 14
        (b"\xff" * 6 + MAC + b"\x81\x00\x60"),  # 15: the tag is cut short
        mpcp,  # 16
        bytes(bad_ttl),  # 17
    ]
    rep = PcapReport(frames=17, roce_frames=6, skipped_non_roce=2, pfc_frames=8, pause_frames=1,
                     vlan_frames=4)
    rep.bad = [(4, "bad_icrc", ""), (9, BAD_PFC, "01:80:c2:00:00:02"),
               (10, BAD_PFC, "reserved bits"), (11, BAD_PFC, "padding"),
               (12, BAD_PFC, "shorter than a minimum frame"), (14, BAD_PFC, "VLAN tag"),
               (15, "truncated", "802.1Q tag 1 cut short"), (17, "bad_ip_checksum", "")]
    return frames, rep


def test_check_pcap_counts_pfc_and_checks_tagged_roce(tmp_path: FsPath) -> None:
    frames, want = mixed_capture()
    f = tmp_path / "mixed.pcap"
    write_pcap(f, frames)
    rep = check_pcap(f)
    got_bad = [(n, r) for n, r, _ in rep.bad]
    assert got_bad == [(n, r) for n, r, _ in want.bad]
    for (_, _, detail), (_, _, part) in zip(rep.bad, want.bad, strict=True):
        assert part in detail
    rep.bad = want.bad = []
    assert rep == want


def test_main_summary_names_pfc_frames(tmp_path: FsPath,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    frames, want = mixed_capture()
    f = tmp_path / "mixed.pcap"
    write_pcap(f, frames)
    assert pcap_check_main(str(f)) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(":")[0] for ln in lines[:-1]] == [f"frame {n}" for n, _, _ in want.bad]
    assert lines[-1] == (f"{want.frames} frames, {want.roce_frames} RoCEv2, "
                         f"{want.pfc_frames} PFC, {want.pause_frames} PAUSE, "
                         f"{len(want.bad)} bad")


def test_good_tagged_capture_is_clean(tmp_path: FsPath,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    frames = [tag(roce(psn=i), 0x8100, pcp=i % 8) for i in range(5)] + \
        [pfc_frame(MAC, {3: MAX_QUANTA}), pfc_frame(MAC, {3: 0})]
    f = tmp_path / "clean.pcap"
    write_pcap(f, frames)
    assert pcap_check_main(str(f)) == 0
    assert capsys.readouterr().out == "7 frames, 5 RoCEv2, 2 PFC, 0 bad\n"


def incast_with_taps(tmp_path: FsPath) -> tuple[World, list[FsPath]]:
    """The switch's PFC incast (tests/test_switch.py) with a tap on every link."""
    paths: list[FsPath] = []
    taps: list[PcapTap] = []

    def setup(w: World) -> None:
        for i, link in enumerate(w.links):
            paths.append(tmp_path / f"l{i}.pcap")
            taps.append(PcapTap(paths[-1]))
            link.taps.append(taps[-1])

    w, _ = incast(True, senders=4, frames=120, setup=setup)
    for link, tap in zip(w.links, taps, strict=True):
        link.flush_taps()
        tap.close()
    return w, paths


def test_switch_incast_capture_checks_clean(tmp_path: FsPath) -> None:
    w, paths = incast_with_taps(tmp_path)
    c = w.sw.counters()
    reports = [check_pcap(p) for p in paths]
    assert all(r.ok for r in reports), [r.bad[:3] for r in reports]
    sent_pfc = sum(c[f"p{i}.pause_sent"] + c[f"p{i}.resume_sent"] for i in range(5))
    assert sent_pfc > 0 and sum(r.pfc_frames for r in reports) == sent_pfc
    # Every data frame crosses two links: its sender's and the receiver's.
    delivered = len(w.hosts[0].rx)
    assert delivered == 4 * 120 and sum(r.roce_frames for r in reports) == 2 * delivered
    assert reports[0].pfc_frames == 0  # the receiver's link: nothing to pause


def run_tshark(pcap: FsPath, fields: list[str]) -> list[dict[str, str]]:
    assert TSHARK is not None
    cmd = [TSHARK, "-n", "-r", str(pcap), "-T", "fields", "-E", "separator=/t",
           "-E", "occurrence=a", "-E", "aggregator=,"]
    for fld in fields:
        cmd += ["-e", fld]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, f"tshark failed ({res.returncode}): {res.stderr}"
    return [dict(zip(fields, line.split("\t"), strict=True))
            for line in res.stdout.splitlines()]


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (apt-get install tshark)")
def test_tshark_decodes_switch_pfc_frames(tmp_path: FsPath) -> None:
    """tshark reads the PFC frames the switch sent as MAC Control class-based flow control,
    with the class-enable vector and pause times we put in, and nothing malformed; the
    802.3x PAUSE and the tagged RoCEv2 frames decode too."""
    w, paths = incast_with_taps(tmp_path)
    sent = [raw for h in w.hosts[1:] for _, _, raw in h.pfc_rx]
    assert sent
    f = tmp_path / "fc.pcap"
    extra = [pause_8023x(1234), tag(roce(), 0x8100, pcp=5), tag(roce(V6), 0x88A8, 0x8100)]
    write_pcap(f, sent + extra)
    fields = ["frame.protocols", "_ws.malformed", "_ws.expert.message", "macc.opcode",
              "macc.cbfc.enbv", "macc.pause_time"] + \
        [f"macc.cbfc.pause_time.c{c}" for c in range(8)] + \
        ["vlan.priority", "infiniband.bth.opcode"]
    rows = run_tshark(f, fields)
    assert len(rows) == len(sent) + len(extra)
    for row, raw in zip(rows, sent, strict=False):
        pf = parse_pfc(raw)
        assert row["frame.protocols"] == "eth:ethertype:macc"
        assert (row["_ws.malformed"], row["_ws.expert.message"]) == ("", "")
        assert int(row["macc.opcode"], 0) == 0x0101
        assert int(row["macc.cbfc.enbv"], 0) == pf.enable == 1 << 3
        assert [int(row[f"macc.cbfc.pause_time.c{c}"]) for c in range(8)] == list(pf.quanta)
    pause, vlan4, qinq6 = rows[len(sent):]
    assert int(pause["macc.opcode"], 0) == PAUSE_OPCODE and int(pause["macc.pause_time"]) == 1234
    assert vlan4["vlan.priority"] == "5" and int(vlan4["infiniband.bth.opcode"]) == 0x0A
    assert "vlan" in qinq6["frame.protocols"] and int(qinq6["infiniband.bth.opcode"]) == 0x0A
    for row in (pause, vlan4, qinq6):
        assert row["_ws.malformed"] == ""
