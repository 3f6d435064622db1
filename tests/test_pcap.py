"""PcapTap output and check_pcap, read and cross-checked with scapy."""

from __future__ import annotations

import gzip
import struct
import subprocess
import sys
import tempfile
from pathlib import Path as FsPath

import pytest
import scapy.contrib.roce  # noqa: F401  (binds BTH to UDP 4791)
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.utils import RawPcapReader, RawPcapWriter, wrpcapng

from nicsim.fabric.pcap import (
    PcapError,
    PcapReport,
    PcapTap,
    check_pcap,
    pcap_check_main,
)
from nicsim.testing.wire_cases import FrameSpec, frame_specs
from nicsim.wire import (
    Ecn,
    FrameBuilder,
    Opcode,
    Path,
    aeth,
    atomic_eth,
    immdt,
    reth,
)

V4 = Path(bytes.fromhex("020000000001"), bytes.fromhex("020000000002"), bytes([10, 0, 0, 1]),
          bytes([10, 0, 0, 2]), 0xC123, dscp=26, ecn=Ecn.ECT0)
V6 = Path(bytes.fromhex("020000000001"), bytes.fromhex("020000000002"),
          bytes.fromhex("fd000000000000000000000000000001"),
          bytes.fromhex("fd000000000000000000000000000002"), 0xC456, dscp=26, ecn=Ecn.CE,
          flow_label=0xABCDE)


def good_frames() -> list[bytes]:
    """A small mixed capture: a WRITE, its ACK, a SEND with immediate, a READ response,
    an atomic, over IPv4 and IPv6."""
    out = []
    for path in (V4, V6):
        fb = FrameBuilder(path)
        out += [
            fb.build(Opcode.RC_RDMA_WRITE_ONLY, 0x11, 7, reth(0x1000, 0x55, 100), bytes(100),
                     ackreq=True),
            fb.build(Opcode.RC_ACKNOWLEDGE, 0x22, 7, aeth(0, 3)),
            fb.build(Opcode.RC_SEND_ONLY_WITH_IMMEDIATE, 0x11, 8, immdt(0xDEADBEEF), b"hello"),
            fb.build(Opcode.RC_RDMA_READ_RESPONSE_MIDDLE, 0x22, 9, b"", bytes(range(64))),
            fb.build(Opcode.RC_FETCH_ADD, 0x11, 10, atomic_eth(0x2000, 0x66, 1, 0)),
        ]
    return out


def write_records(path: FsPath, records: list[tuple[bytes, int | None]]) -> None:
    """Write records with scapy directly, so a record can claim a different original length."""
    w = RawPcapWriter(str(path), linktype=1, nano=True)
    w.write_header(None)
    for i, (data, wirelen) in enumerate(records):
        w.write_packet(data, sec=1, usec=i, caplen=len(data), wirelen=wirelen)
    w.close()


def with_udp_checksum(frame: bytes) -> bytes:
    """The frame with a real (nonzero) UDP checksum, computed by scapy."""
    pkt = Ether(frame)
    pkt[UDP].chksum = None
    out = raw(pkt)
    assert out[-4:] == frame[-4:], "the ICRC masks the UDP checksum"
    return out


def udp_csum_offset(frame: bytes) -> int:
    return 14 + (40 if frame[12:14] == b"\x86\xdd" else 20) + 6


# --- PcapTap ----------------------------------------------------------------------------------


def test_tap_round_trip_bytes_and_nanosecond_times(tmp_path: FsPath) -> None:
    frames = good_frames()
    times = [0, 1, 999_999_999, 1_000_000_000, 1_000_000_001, 123_456_789_012,
             (2**32 - 1) * 10**9 + 999_999_999, 5, 6, 7]
    written = times[:-1] + [6.9999999]  # a float simulated time is rounded to the nanosecond
    f = tmp_path / "tap.pcap"
    with PcapTap(f) as tap:
        for frame, t in zip(frames, written, strict=True):
            tap.write(frame, t)  # type: ignore[arg-type]
        assert tap.frames == len(frames)
    raw_file = f.read_bytes()
    # Nanosecond pcap magic (native byte order), version 2.4, LINKTYPE_ETHERNET.
    magic, vmaj, vmin, _tz, _sig, snaplen, linktype = struct.unpack("=IHHIIII", raw_file[:24])
    assert (magic, vmaj, vmin, linktype) == (0xA1B23C4D, 2, 4, 1)
    assert snaplen >= max(map(len, frames))
    reader = RawPcapReader(str(f))
    try:
        assert reader.nano and reader.linktype == 1
        got = list(reader)
    finally:
        reader.close()
    assert [data for data, _ in got] == frames
    for (data, meta), t in zip(got, times, strict=True):
        assert meta.sec * 10**9 + meta.usec == t
        assert meta.caplen == meta.wirelen == len(data)


def test_tap_is_read_by_scapy_as_roce(tmp_path: FsPath) -> None:
    from scapy.contrib.roce import BTH
    from scapy.utils import rdpcap

    f = tmp_path / "tap.pcap"
    with PcapTap(str(f)) as tap:  # str paths work as well as pathlib
        tap.write(good_frames()[0], 1_500)
    (pkt,) = rdpcap(str(f))
    assert pkt[BTH].opcode == Opcode.RC_RDMA_WRITE_ONLY and pkt[BTH].psn == 7
    assert pkt.time * 10**9 == 1_500


def test_tap_empty_capture_and_double_close(tmp_path: FsPath) -> None:
    f = tmp_path / "empty.pcap"
    tap = PcapTap(f)
    tap.flush()
    assert f.stat().st_size == 24  # the global header is there before any frame
    tap.close()
    tap.close()
    rep = check_pcap(f)
    assert (rep.frames, rep.roce_frames, rep.bad) == (0, 0, [])


# --- check_pcap: clean captures ---------------------------------------------------------------


def test_check_clean_capture_with_other_traffic(tmp_path: FsPath) -> None:
    others = [
        raw(Ether() / ARP()),
        raw(Ether() / IP(dst="10.0.0.9") / TCP()),
        raw(Ether() / IP(dst="10.0.0.9") / UDP(dport=53) / b"query"),
        raw(Ether() / IPv6(dst="fd00::9") / ICMPv6EchoRequest()),
        raw(Ether(type=0x8808) / bytes(46)),  # a PFC pause frame
        # Not RoCE, so not checked: a TCP segment with a broken IP checksum.
        raw(Ether() / IP(dst="10.0.0.9", chksum=0x1234) / TCP()),
    ]
    roce = good_frames() + [with_udp_checksum(good_frames()[0]),
                            with_udp_checksum(good_frames()[6])]
    f = tmp_path / "clean.pcap"
    with PcapTap(f) as tap:
        for i, frame in enumerate(roce + others):
            tap.write(frame, i * 1000)
    rep = check_pcap(f)
    assert rep == PcapReport(frames=len(roce) + len(others), roce_frames=len(roce), bad=[],
                             skipped_non_roce=len(others))
    assert rep.ok


@settings(max_examples=30, deadline=None)
@given(st.lists(frame_specs(max_payload=300), min_size=1, max_size=20),
       st.lists(st.booleans(), min_size=20, max_size=20))
def test_check_random_clean_captures(specs: list[FrameSpec], csum: list[bool]) -> None:
    frames = [with_udp_checksum(s.build()) if c else s.build()
              for s, c in zip(specs, csum, strict=False)]
    with tempfile.TemporaryDirectory() as d:
        f = FsPath(d) / "r.pcap"
        with PcapTap(f) as tap:
            for i, frame in enumerate(frames):
                tap.write(frame, i)
        rep = check_pcap(f)
    assert (rep.frames, rep.roce_frames, rep.bad, rep.skipped_non_roce) == (
        len(frames), len(frames), [], 0)


def test_check_accepts_microsecond_and_gzip_pcaps(tmp_path: FsPath) -> None:
    frames = good_frames()
    f = tmp_path / "usec.pcap"
    w = RawPcapWriter(str(f), linktype=1)  # classic microsecond magic
    for frame in frames:
        w.write(frame)
    w.close()
    assert check_pcap(f).frames == len(frames)
    gz = tmp_path / "usec.pcap.gz"
    gz.write_bytes(gzip.compress(f.read_bytes()))
    rep = check_pcap(gz)
    assert (rep.frames, rep.bad) == (len(frames), [])


# --- check_pcap: broken frames ----------------------------------------------------------------


def broken_capture() -> tuple[list[tuple[bytes, int | None]], list[tuple[int, str]]]:
    """Good frames with one broken frame after each; returns the records and the expected
    (frame number, reason) list."""
    fb4, fb6 = FrameBuilder(V4), FrameBuilder(V6)
    write = fb4.build(Opcode.RC_RDMA_WRITE_ONLY, 0x11, 7, reth(0x1000, 0x55, 64), bytes(64))
    broken: list[tuple[str, bytes, int | None]] = []

    f = bytearray(write)
    f[-1] ^= 0x01
    broken.append(("bad_icrc", bytes(f), None))

    f = bytearray(fb6.build(Opcode.RC_SEND_ONLY, 0x11, 8, b"", b"payload!"))
    f[-12] ^= 0x40  # a payload bit
    broken.append(("bad_icrc", bytes(f), None))

    f = bytearray(write)
    f[24] ^= 0xFF  # IPv4 header checksum
    broken.append(("bad_ip_checksum", bytes(f), None))

    f = bytearray(write)
    f[34 + 4:34 + 6] = struct.pack("!H", len(write) - 34 - 2)  # UDP length 2 short of IP's
    broken.append(("bad_udp_length", bytes(f), None))

    for frame in (write, fb6.build(Opcode.RC_ACKNOWLEDGE, 0x22, 7, aeth(0, 1))):
        f = bytearray(with_udp_checksum(frame))
        off = udp_csum_offset(frame)
        f[off + 1] ^= 0x04
        broken.append(("bad_udp_checksum", bytes(f), None))

    # Headers the opcode requires but the frame does not carry (lengths and ICRC all valid).
    broken.append(("short_headers", fb4.build(Opcode.RC_RDMA_WRITE_ONLY, 0x11, 9), None))
    broken.append(("short_headers", fb4.build(Opcode.RC_COMPARE_SWAP, 0x11, 9, bytes(8)), None))
    broken.append(("short_headers", fb6.build(Opcode.RC_ACKNOWLEDGE, 0x11, 9, bytes(2)), None))
    broken.append(("unknown_opcode", fb4.build(0x15, 0x11, 9, b"", b"abcd"), None))

    broken.append(("truncated_capture", write[:60], len(write)))
    broken.append(("bad_capture_length", write, len(write) - 4))

    good = good_frames()
    records: list[tuple[bytes, int | None]] = []
    expected: list[tuple[int, str]] = []
    for i, (reason, frame, wirelen) in enumerate(broken):
        records.append((good[i % len(good)], None))
        records.append((frame, wirelen))
        expected.append((len(records), reason))
    records.append((good[0], None))
    return records, expected


def test_check_reports_exactly_the_broken_frames(tmp_path: FsPath) -> None:
    records, expected = broken_capture()
    f = tmp_path / "broken.pcap"
    write_records(f, records)
    rep = check_pcap(f)
    assert rep.frames == len(records)
    assert rep.roce_frames == len(records) and rep.skipped_non_roce == 0
    assert [(n, reason) for n, reason, _ in rep.bad] == expected
    assert all(detail for _, _, detail in rep.bad)
    assert not rep.ok


def test_main_prints_bad_frames_and_summary(tmp_path: FsPath,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    records, expected = broken_capture()
    f = tmp_path / "broken.pcap"
    write_records(f, records)
    assert pcap_check_main(str(f)) == 1
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert len(lines) == len(expected) + 1
    for line, (num, reason) in zip(lines, expected, strict=False):
        assert line.startswith(f"frame {num}: {reason}: ")
    assert lines[0].startswith("frame 2: bad_icrc: ICRC 0x")
    assert lines[-1] == f"{len(records)} frames, {len(records)} RoCEv2, {len(expected)} bad"
    assert out.err == ""


def test_main_clean(tmp_path: FsPath, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "clean.pcap"
    with PcapTap(f) as tap:
        for i, frame in enumerate(good_frames()):
            tap.write(frame, i)
        tap.write(raw(Ether() / ARP()), 99)
    assert pcap_check_main(str(f)) == 0
    assert capsys.readouterr().out == "11 frames, 10 RoCEv2, 0 bad\n"


# --- check_pcap: broken files -----------------------------------------------------------------


def _valid_pcap_bytes(tmp_path: FsPath) -> bytes:
    f = tmp_path / "valid.pcap"
    with PcapTap(f) as tap:
        for i, frame in enumerate(good_frames()):
            tap.write(frame, i)
    return f.read_bytes()


def _corrupt_files(tmp_path: FsPath) -> dict[str, FsPath]:
    valid = _valid_pcap_bytes(tmp_path)
    files: dict[str, bytes] = {
        "garbage": b"this is not a capture file at all\n" * 10,
        "garbage_binary": bytes(range(256)) * 3,
        "empty": b"",
        "global_header_truncated": valid[:10],
        "global_header_only_magic": valid[:4],
        "record_header_truncated": valid + valid[24:24 + 7],
        "record_data_truncated": valid[:-5],
        "absurd_caplen": valid + struct.pack("=IIII", 0, 0, 0x7FFFFFFF, 0x7FFFFFFF) + bytes(64),
        "gzip_record_header_truncated": gzip.compress(valid + valid[24:30]),
        "gzip_garbage": b"\x1f\x8b" + bytes(100),
    }
    out = {}
    for name, data in files.items():
        out[name] = tmp_path / f"{name}.pcap"
        out[name].write_bytes(data)
    # A link type other than Ethernet.
    out["not_ethernet"] = tmp_path / "raw_ip.pcap"
    w = RawPcapWriter(str(out["not_ethernet"]), linktype=101, nano=True)
    w.write(b"\x45" + bytes(19))
    w.close()
    # pcapng is not read by the checker.
    out["pcapng"] = tmp_path / "x.pcapng"
    wrpcapng(str(out["pcapng"]), [Ether(good_frames()[0])])
    out["missing"] = tmp_path / "does_not_exist.pcap"
    out["directory"] = tmp_path
    return out


CORRUPT = ["garbage", "garbage_binary", "empty", "global_header_truncated",
           "global_header_only_magic", "record_header_truncated", "record_data_truncated",
           "absurd_caplen", "gzip_record_header_truncated", "gzip_garbage", "not_ethernet",
           "pcapng", "missing", "directory"]


@pytest.mark.parametrize("name", CORRUPT)
def test_corrupt_file_gives_pcap_error(tmp_path: FsPath, name: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    f = _corrupt_files(tmp_path)[name]
    with pytest.raises(PcapError) as exc:
        check_pcap(f)
    msg = str(exc.value)
    assert msg and "\n" not in msg and str(f) in msg
    capsys.readouterr()
    assert pcap_check_main(str(f)) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.count("\n") == 1 and out.err.startswith("error: ")
    assert "Traceback" not in out.err


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_check_survives_any_damage_to_the_file(data: st.DataObject) -> None:
    """Truncated, overwritten or extended captures (plain or gzip) give a report or a
    PcapError, never another exception."""
    with tempfile.TemporaryDirectory() as d:
        valid = _valid_pcap_bytes(FsPath(d))
        blob = bytearray(valid)
        for _ in range(data.draw(st.integers(0, 4))):
            i = data.draw(st.integers(0, len(blob) - 1))
            blob[i] = data.draw(st.integers(0, 255))
        blob = blob[:data.draw(st.integers(0, len(blob)))] + data.draw(st.binary(max_size=40))
        if data.draw(st.booleans()):
            blob = bytearray(gzip.compress(bytes(blob)))
            blob = blob[:data.draw(st.integers(0, len(blob)))]
        f = FsPath(d) / "damaged.pcap"
        f.write_bytes(bytes(blob))
        try:
            rep = check_pcap(f)
        except PcapError as e:
            assert "\n" not in str(e)
            return
        assert rep.frames >= 0 and rep.roce_frames + rep.skipped_non_roce == rep.frames


def test_tap_writes_what_scapy_writes(tmp_path: FsPath) -> None:
    """The tap packs pcap records itself (it is on the hot path); scapy's writer, given the
    same frames and times, writes the same bytes."""
    from scapy.utils import RawPcapWriter

    frames = good_frames()
    with PcapTap(tmp_path / "tap.pcap") as tap:
        for i, frame in enumerate(frames):
            tap.write(frame, 1_234_567_890 * i)
    w = RawPcapWriter(str(tmp_path / "scapy.pcap"), linktype=1, nano=True, snaplen=0xFFFF)
    w.write_header(None)
    for i, frame in enumerate(frames):
        sec, nsec = divmod(1_234_567_890 * i, 10**9)
        w.write_packet(frame, sec=sec, usec=nsec, caplen=len(frame), wirelen=len(frame))
    w.close()
    assert (tmp_path / "tap.pcap").read_bytes() == (tmp_path / "scapy.pcap").read_bytes()


def test_tap_survives_short_writes(tmp_path: FsPath, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel may take part of a gathered write (a signal, a full pipe): the capture is
    still every record whole and in order, more than one writev's worth of them."""
    import os

    real = os.writev
    calls = []

    def short(fd: int, bufs: list) -> int:
        calls.append(len(bufs))
        first = bytes(bufs[0])
        # Sometimes part of the first buffer, sometimes the first and part of the second.
        if len(calls) % 2 or len(bufs) == 1:
            return real(fd, [first[:max(1, len(first) // 3)]])
        return real(fd, [first, bytes(bufs[1])[:1]])

    monkeypatch.setattr(os, "writev", short)
    monkeypatch.setattr(PcapTap, "flush_at", 2000)  # all of them in one flush
    path = tmp_path / "short.pcap"
    frames = [bytes([i % 251]) * (60 + i % 300) for i in range(1500)]
    with PcapTap(path) as tap:
        for i, f in enumerate(frames):
            tap.write(f, 1000 * i)
    assert max(calls) == 1024  # one batch of buffers, the most one call takes
    got = [(bytes(d), meta.sec * 10**9 + meta.usec) for d, meta in RawPcapReader(str(path))]
    assert got == [(f, 1000 * i) for i, f in enumerate(frames)]


def test_a_write_error_names_the_capture(tmp_path: FsPath) -> None:
    """A write that fails (here the file size limit, as a full disk would) raises OSError
    naming the capture; the frames before it are in the file."""
    code = f"""
import errno, resource, signal
from nicsim.fabric.pcap import PcapTap
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
tap = PcapTap({str(tmp_path / 'big.pcap')!r})
try:
    for i in range(2000):
        tap.write(bytes(1000), i)
    tap.close()
except OSError as e:
    print(e.errno == errno.EFBIG, "big.pcap" in str(e))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]
    assert 0 < (tmp_path / "big.pcap").stat().st_size <= 200_000


@given(st.lists(st.tuples(st.floats(0, 1e9), st.integers(1, 9000)), min_size=1, max_size=40),
       st.sampled_from([(50.0, 0.08), (0.0, 0.32), (500.0, 0.02), (37.5, 8 / 400)]))
@settings(max_examples=50, deadline=None)
def test_bulk_records_carry_the_links_start_of_frame(tmp_path_factory, frames, clock) -> None:
    """What a link appends to a tap's bulk list (arrival, frame, clock) is written with the
    start of frame nicsim.fabric.link.sof gives (the tap works it out inline)."""
    from nicsim.fabric.link import sof

    path = tmp_path_factory.mktemp("bulk") / "b.pcap"
    with PcapTap(path) as tap:
        for t, n in frames:
            tap.bulk.append((t + 1e4, bytes(n), clock))
    got = [meta.sec * 10**9 + meta.usec for _d, meta in RawPcapReader(str(path))]
    assert got == [sof(t + 1e4, n, clock) for t, n in frames]
