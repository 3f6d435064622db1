"""Pcap taps and the pcap checker.

`PcapTap` records the frames a link carries into a nanosecond-resolution pcap (magic 0xa1b23c4d,
LINKTYPE_ETHERNET) that Wireshark/tshark decode as RoCEv2 on UDP 4791. `check_pcap` reads a
capture back and validates every RoCEv2 frame in it: captured vs original length, IP/UDP lengths
and checksums, the BTH opcode's extension headers and the ICRC (which Wireshark does not check).
RoCEv2 inside one 802.1Q tag, or an 802.1ad service tag and a customer tag (QinQ), is checked
the same way once the tags are set aside, and so is RoCE v1 (EtherType 0x8915: GRH, BTH, ICRC
as Annex A16 masks it). MAC Control frames are recognised: PFC frames
(IEEE 802.1Qbb) have their layout checked (nicsim.fabric.pfc.parse_pfc; a bad one is reported
as `bad_pfc` with what is wrong) and are counted, 802.3x PAUSE frames are counted.

scapy does the pcap file I/O (RawPcapWriter / RawPcapReader); the frame checks use nicsim.wire,
the same parser the NIC model uses, plus the UDP checksum that the model itself never verifies.
"""

from __future__ import annotations

import logging
import os
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from scapy.error import Scapy_Exception
from scapy.utils import RawPcapNgReader, RawPcapReader

from nicsim.fabric.pfc import (
    PAUSE_OPCODE,
    PFC_OPCODE,
    PfcFormatError,
    is_mac_control,
    parse_pfc,
)
from nicsim.wire.packet import (
    ETH_FCS,
    ETH_HLEN,
    ETH_MIN_FRAME,
    ETH_P_IPV4,
    ETH_P_IPV6,
    ETH_P_ROCE_V1,
    IPV4_HLEN,
    IPV6_HLEN,
    ROCE_UDP_PORT,
    ParseError,
    Unbuilt,
    WireError,
    compute_icrc,
    frame_end,
    parse,
)

LINKTYPE_ETHERNET = 1
_MAGIC_NS = 0xA1B23C4D  # pcap with nanosecond timestamps
_PCAP_GLOBAL = struct.Struct("<IHHiIII")
_PCAP_RECORD = struct.Struct("<IIII")
PCAP_SNAPLEN = 0xFFFF
_NS_PER_S = 1_000_000_000
_PCAP_GLOBAL_HLEN = 24
_PCAP_RECORD_HLEN = 16
# scapy's reader reads at most this much of one record (MTU * 4) and silently skips the rest;
# libpcap refuses records above 256 KiB as corrupt, so a larger caplen means a broken file.
_MAX_CAPLEN = 0xFFFF * 4

# Reasons check_pcap reports on top of nicsim.wire.ParseError's values.
TRUNCATED_CAPTURE = "truncated_capture"
BAD_CAPTURE_LENGTH = "bad_capture_length"
BAD_PFC = "bad_pfc"

ETH_P_8021Q = 0x8100
ETH_P_8021AD = 0x88A8  # 802.1ad service tag, the outer tag of QinQ
VLAN_TAG_LEN = 4
_MAX_TAGS = 2  # a service tag and a customer tag


class PcapError(Exception):
    """The file is not a readable pcap capture; the message is one line for the user."""


# --- writing ----------------------------------------------------------------------------------


class PcapTap:
    """Writes every frame a tap sees to a nanosecond pcap; `t_ns` is simulated time.

    Simulated time 0 is written as the Unix epoch, so Wireshark's relative times are the
    simulator's times. Frames are written whole (caplen == wirelen, no FCS). The tap is on the
    simulator's hot path, so a link only appends each frame to `bulk` (nicsim.fabric.link.Tap)
    and every few hundred frames `flush` works out their records in one loop (start of frame,
    record header, an Unbuilt's headers and ICRC from its pieces: no join) and writes them in
    bulk, gathered by the kernel from the frames where they are (writev: no copy into one
    buffer first, which cost more than the rest of the tap). An Unbuilt is immutable and its
    FrameBuilder depends only on its Path, so building it later gives the bytes it stood for
    when it was recorded. scapy reads captures back, in the checker and the tests.
    """

    __slots__ = ("path", "_written", "_file", "bulk")

    flush_at = 128  # records per write: about 512 KiB, reused while cache-warm

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._written = 0  # frames flushed
        # Recorded, not yet written: (time, frame, clock) as nicsim.fabric.link.Tap says.
        self.bulk: list[tuple[float, bytes | Unbuilt, tuple[float, float] | None]] = []
        self._file: BinaryIO | None = None  # (for __del__ if open fails)
        # Unbuffered: records go to the kernel in bulk.
        self._file = open(self.path, "wb", buffering=0)  # noqa: SIM115 (closed by close)
        # The global header goes out now so that a capture with no frames is still valid.
        _write_all(self._file, [_PCAP_GLOBAL.pack(_MAGIC_NS, 2, 4, 0, 0, PCAP_SNAPLEN,
                                                  LINKTYPE_ETHERNET)])

    @property
    def frames(self) -> int:
        """Frames recorded so far."""
        return self._written + len(self.bulk)

    def write(self, frame: bytes | Unbuilt, t_ns: float) -> None:
        """Record one frame (or the Unbuilt that stands for it) seen at simulated time `t_ns`
        (>= 0) nanoseconds."""
        bulk = self.bulk
        bulk.append((t_ns, frame, None))
        if len(bulk) >= self.flush_at:
            self.flush()

    def flush(self) -> None:
        """Everything recorded so far is in the file when this returns. A write error (a full
        disk) is an OSError that names the capture."""
        bulk = self.bulk
        if self._file is None or not bulk:
            return
        chunks: list[bytes | memoryview] = []
        add, pack = chunks.append, _PCAP_RECORD.pack
        total = _PCAP_RECORD_HLEN * len(bulk)
        for t, frame, clock in bulk:
            unbuilt = frame.__class__ is Unbuilt
            n = frame.n if unbuilt else len(frame)  # type: ignore[union-attr]
            total += n
            if clock is None:
                t = round(t)
            else:  # (nicsim.fabric.link.sof, inline: this runs per frame)
                t = round(t - clock[0] - ((n if n > ETH_MIN_FRAME else ETH_MIN_FRAME)
                                          + ETH_FCS) * clock[1])
            add(pack(t // _NS_PER_S, t % _NS_PER_S, n, n))
            if unbuilt:
                chunks += frame.pieces()  # type: ignore[union-attr]
            else:
                add(frame)  # type: ignore[arg-type]
        self._written += len(bulk)
        bulk.clear()
        try:
            _write_all(self._file, chunks, total)
        except OSError as e:
            raise OSError(e.errno, f"writing the capture {self.path}: "
                                   f"{e.strerror or e}") from None

    def close(self) -> None:
        """Flush and close the file; closing twice is harmless."""
        if self._file is not None:
            self.flush()
            f, self._file = self._file, None
            f.close()

    def __del__(self) -> None:
        # A world nobody closed still leaves a whole capture behind.
        self.close()

    def __enter__(self) -> PcapTap:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


_IOV_MAX = 1024  # buffers per writev (POSIX guarantees at least 16; Linux takes 1024)


def _write_all(f: BinaryIO, chunks: list[bytes | memoryview], total: int | None = None
               ) -> None:
    """Write `chunks` in order to the unbuffered file `f`, all of them (a short write goes
    on from where it stopped). `total`, if given, is their length."""
    fd = f.fileno()
    if total is not None and len(chunks) <= _IOV_MAX:
        done = os.writev(fd, chunks)
        if done == total:
            return  # (the usual case: all of it at once)
        chunks = _rest(chunks, done)
    for i in range(0, len(chunks), _IOV_MAX):
        batch = chunks[i:i + _IOV_MAX]
        done = os.writev(fd, batch)
        while done < sum(map(len, batch)):
            batch = _rest(batch, done)
            done = os.writev(fd, batch)


def _rest(chunks: list[bytes | memoryview], done: int) -> list[bytes | memoryview]:
    """What of `chunks` a write that took their first `done` bytes left."""
    k = 0
    while k < len(chunks) and done >= len(chunks[k]):
        done -= len(chunks[k])
        k += 1
    rest = chunks[k:]
    if rest and done:
        rest[0] = memoryview(rest[0])[done:]
    return rest


# --- checking ---------------------------------------------------------------------------------


@dataclass
class PcapReport:
    """What check_pcap found. Frame numbers are 1-based, as Wireshark numbers them."""

    frames: int = 0
    roce_frames: int = 0  # RoCEv2 frames checked (tagged ones included)
    roce_v1_frames: int = 0  # RoCE v1 frames (EtherType 0x8915, a GRH) checked
    bad: list[tuple[int, str, str]] = field(default_factory=list)  # (frame, reason, detail)
    skipped_non_roce: int = 0  # other traffic, not checked
    pfc_frames: int = 0  # MAC Control frames with the PFC opcode, layout checked
    pause_frames: int = 0  # 802.3x PAUSE frames (MAC Control opcode 0x0001), counted
    vlan_frames: int = 0  # of roce_frames, those inside 802.1Q / QinQ tags

    @property
    def ok(self) -> bool:
        return not self.bad


_V1_TYPE = ETH_P_ROCE_V1.to_bytes(2, "big")


def _is_other_traffic(frame: bytes) -> bool:
    """True when the frame is recognisably not RoCEv2 (another EtherType, IP protocol or UDP
    port). Anything that might be RoCEv2, including frames too broken to tell, is checked."""
    n = len(frame)
    if n < ETH_HLEN:
        return False
    etype = (frame[12] << 8) | frame[13]
    if etype == ETH_P_IPV4:
        if n < ETH_HLEN + IPV4_HLEN:
            return False
        ihl = (frame[ETH_HLEN] & 0xF) * 4
        if ihl < IPV4_HLEN:
            return False
        proto_off, l4 = ETH_HLEN + 9, ETH_HLEN + ihl
    elif etype == ETH_P_ROCE_V1:
        return False  # RoCE v1: a GRH and BTH, checked like RoCEv2
    elif etype == ETH_P_IPV6:
        # IPv6 extension headers count as other traffic: RoCEv2 puts UDP right after IPv6.
        proto_off, l4 = ETH_HLEN + 6, ETH_HLEN + IPV6_HLEN
        if n <= proto_off:
            return False
    else:
        return True
    if frame[proto_off] != 17:
        return True
    return n >= l4 + 4 and ((frame[l4 + 2] << 8) | frame[l4 + 3]) != ROCE_UDP_PORT


def _udp_checksum(frame: bytes, ipv6: bool, l4: int, end: int) -> tuple[int, int]:
    """(stored, expected) UDP checksum of the datagram frame[l4:end] (RFC 768, RFC 8200 8.1)."""
    udp = bytearray(frame[l4:end])
    stored = (udp[6] << 8) | udp[7]
    udp[6] = udp[7] = 0
    if ipv6:
        pseudo = frame[ETH_HLEN + 8:ETH_HLEN + 40] + struct.pack("!IxxxB", len(udp), 17)
    else:
        pseudo = frame[ETH_HLEN + 12:ETH_HLEN + 20] + struct.pack("!xBH", 17, len(udp))
    if len(udp) & 1:
        udp.append(0)
    # The one's complement sum of 16-bit words is the big-endian integer mod 0xFFFF, since
    # 2**16 == 1 (mod 0xFFFF); a zero residue is the sum 0xFFFF (the data is never all zero,
    # the pseudo-header holds protocol 17).
    s = int.from_bytes(pseudo + udp, "big") % 0xFFFF or 0xFFFF
    csum = ~s & 0xFFFF
    # A computed 0 is sent as 0xFFFF: 0 on the wire means "no checksum" (RFC 768).
    return stored, csum or 0xFFFF


def _ipv4_checksum_detail(frame: bytes) -> str:
    ihl = (frame[ETH_HLEN] & 0xF) * 4
    hdr = bytearray(frame[ETH_HLEN:ETH_HLEN + ihl])
    stored = (hdr[10] << 8) | hdr[11]
    hdr[10] = hdr[11] = 0
    expected = ~(int.from_bytes(hdr, "big") % 0xFFFF or 0xFFFF) & 0xFFFF
    return f"IPv4 header checksum 0x{stored:04x}, expected 0x{expected:04x}"


def check_frame(frame: bytes) -> tuple[str, str] | None:
    """Validate one RoCEv2 frame: (reason, detail) of the first problem, or None if it is good.

    The order follows the layers: IP, UDP lengths, BTH and extension headers (nicsim.wire.parse),
    then the UDP checksum when one was sent, then the ICRC.
    """
    try:
        p = parse(frame, check_icrc=False)
    except WireError as e:
        if e.reason is ParseError.BAD_IP_CHECKSUM and not e.detail:
            return e.reason.value, _ipv4_checksum_detail(frame)
        return e.reason.value, e.detail
    end = frame_end(frame)
    if p.udp_csum:
        l4 = p.bth_off - 8
        stored, expected = _udp_checksum(frame, p.ipv6, l4, end)
        if stored != expected:
            return (ParseError.BAD_UDP_CHECKSUM.value,
                    f"UDP checksum 0x{stored:04x}, expected 0x{expected:04x}")
    icrc = compute_icrc(frame, p.l3_off, end)
    if p.icrc != icrc:
        return ParseError.BAD_ICRC.value, f"ICRC 0x{p.icrc:08x}, expected 0x{icrc:08x}"
    return None


@contextmanager
def _quiet_scapy() -> Iterator[None]:
    """scapy logs warnings about odd files on its own; the checker reports them itself."""
    log = logging.getLogger("scapy.runtime")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _open_reader(path: str) -> RawPcapReader:
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise PcapError(f"{path}: cannot read: {e.strerror or e}") from None
    if size == 0:
        raise PcapError(f"{path}: empty file, not a pcap capture")
    try:
        reader = RawPcapReader(path)
    except Scapy_Exception as e:
        raise PcapError(f"{path}: not a pcap capture ({e})") from None
    except (OSError, EOFError, ValueError, struct.error) as e:
        raise PcapError(f"{path}: not a pcap capture ({e})") from None
    if isinstance(reader, RawPcapNgReader):
        reader.close()
        raise PcapError(f"{path}: pcapng is not supported, only pcap "
                        "(convert with: editcap -F pcap IN OUT)")
    if reader.linktype != LINKTYPE_ETHERNET:
        reader.close()
        raise PcapError(f"{path}: link type {reader.linktype} is not Ethernet (1)")
    return reader


def check_pcap(path: str | Path) -> PcapReport:
    """Read a pcap and validate every frame. Raises PcapError if the file itself is broken
    (not a pcap, truncated global header, record header or record data, absurd lengths)."""
    path = str(path)
    rep = PcapReport()
    with _quiet_scapy():
        reader = _open_reader(path)
        try:
            consumed = _PCAP_GLOBAL_HLEN
            while True:
                try:
                    # Read up to the largest sane record instead of scapy's default of 64 KiB,
                    # so that an overlong record is seen (and reported) whole.
                    data, meta = reader._read_packet(_MAX_CAPLEN)
                except EOFError:
                    break
                num = rep.frames + 1
                if meta.caplen > _MAX_CAPLEN:
                    raise PcapError(f"{path}: record {num}: captured length {meta.caplen} is "
                                    "not plausible, the file is corrupt")
                if len(data) < meta.caplen:
                    raise PcapError(f"{path}: record {num}: file ends inside the frame data "
                                    f"({len(data)} of {meta.caplen} bytes)")
                consumed += _PCAP_RECORD_HLEN + meta.caplen
                rep.frames = num
                _check_record(rep, num, data, meta.caplen, meta.wirelen)
            # scapy treats a partial record header as a clean end of file; the file position
            # (uncompressed, for gzip) past the last whole record says whether there was one.
            tail = reader.f.tell() - consumed
            if tail > 0:
                raise PcapError(f"{path}: file ends inside record {rep.frames + 1} (only "
                                f"{tail} bytes of it present)")
        except (OSError, struct.error, ValueError) as e:
            raise PcapError(f"{path}: unreadable capture ({e})") from None
        finally:
            reader.close()
    return rep


def _untag(frame: bytes) -> tuple[bytes, int, str]:
    """The frame with its VLAN tags (up to a service and a customer tag) taken out, how many
    there were, and what is wrong if a tag is cut short. A frame with a third tag keeps it
    (and is then other traffic)."""
    tags = 0
    while len(frame) >= ETH_HLEN and tags < _MAX_TAGS and \
            (frame[12] << 8 | frame[13]) in (ETH_P_8021Q, ETH_P_8021AD):
        if len(frame) < ETH_HLEN + VLAN_TAG_LEN:
            return frame, tags, f"802.1Q tag {tags + 1} cut short ({len(frame)} bytes)"
        frame = frame[:12] + frame[12 + VLAN_TAG_LEN:]
        tags += 1
    return frame, tags, ""


def _check_mac_control(rep: PcapReport, num: int, frame: bytes, tags: int,
                       whole: bool) -> None:
    """Count a MAC Control frame and check it if it is PFC; other opcodes (EPON's MPCP...)
    are other traffic."""
    opcode = frame[14] << 8 | frame[15] if len(frame) >= ETH_HLEN + 2 else None
    if opcode == PAUSE_OPCODE:
        rep.pause_frames += 1
    elif opcode == PFC_OPCODE or opcode is None:
        rep.pfc_frames += 1
    else:
        rep.skipped_non_roce += 1
        return
    if not whole:
        return  # reported as a capture problem already
    if tags:
        # MAC Control frames are consumed by the MAC of the link (802.3 Annex 31B): a tagged
        # one is not a MAC Control frame to any receiver.
        rep.bad.append((num, BAD_PFC, f"MAC Control frame inside {tags} VLAN tag(s)"))
    elif opcode != PAUSE_OPCODE:
        try:
            parse_pfc(frame)
        except PfcFormatError as e:
            rep.bad.append((num, BAD_PFC, str(e)))


def _check_record(rep: PcapReport, num: int, data: bytes, caplen: int, wirelen: int) -> None:
    if caplen < wirelen:
        rep.bad.append((num, TRUNCATED_CAPTURE, f"captured {caplen} of {wirelen} bytes"))
    elif caplen > wirelen:
        rep.bad.append((num, BAD_CAPTURE_LENGTH,
                        f"captured {caplen} bytes, more than the original {wirelen}"))
    whole = caplen == wirelen  # else the frame's own checks would only repeat bytes missing
    frame, tags, cut = _untag(data)
    if cut:
        # Too broken to tell what it carries: checked, like a RoCEv2 frame cut short.
        rep.roce_frames += 1
        if whole:
            rep.bad.append((num, ParseError.TRUNCATED.value, cut))
        return
    if is_mac_control(frame):
        _check_mac_control(rep, num, frame, tags, whole)
        return
    if _is_other_traffic(frame):
        rep.skipped_non_roce += 1
        return
    if frame[12:14] == _V1_TYPE:
        rep.roce_v1_frames += 1
    else:
        rep.roce_frames += 1
    if tags:
        rep.vlan_frames += 1
    if not whole:
        return
    problem = check_frame(frame)
    if problem is not None:
        rep.bad.append((num, problem[0], problem[1]))


def pcap_check_main(path: str) -> int:
    """`nicsim pcap check FILE`: one line per bad frame and a summary; exit 0 clean, 1 bad
    frames, 2 unreadable file."""
    try:
        rep = check_pcap(path)
    except PcapError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for num, reason, detail in rep.bad:
        print(f"frame {num}: {reason}: {detail}" if detail else f"frame {num}: {reason}")
    # Flow control frames are named only when there are some, so a RoCEv2-only capture's
    # line reads as it always has.
    fc = f", {rep.pfc_frames} PFC" if rep.pfc_frames or rep.pause_frames else ""
    if rep.pause_frames:
        fc += f", {rep.pause_frames} PAUSE"
    v1 = f", {rep.roce_v1_frames} RoCE v1" if rep.roce_v1_frames else ""
    print(f"{rep.frames} frames, {rep.roce_frames} RoCEv2{v1}{fc}, {len(rep.bad)} bad")
    return 1 if rep.bad else 0
