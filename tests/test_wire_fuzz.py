"""nicsim.wire.parse on hostile input: it raises WireError and nothing else, and whatever it
accepts is self-consistent (the ICRC re-checks, the offsets add up to the frame)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nicsim.testing.wire_cases import FrameSpec, frame_specs
from nicsim.wire import (
    OPCODE_TABLE,
    OPCODES,
    FrameBuilder,
    Packet,
    ParseError,
    Path,
    WireError,
    compute_icrc,
    parse,
)
from nicsim.wire.packet import frame_end


def parse_or_wire_error(frame: bytes) -> Packet | None:
    """parse(), requiring that a failure is a WireError with a ParseError reason."""
    try:
        p = parse(frame)
    except WireError as e:
        assert isinstance(e.reason, ParseError)
        assert str(e)  # prints as a one-line message
        return None
    check_consistent(frame, p)
    return p


def check_consistent(frame: bytes, p: Packet) -> None:
    """Everything parse reports must be re-derivable from the bytes."""
    end = frame_end(frame)
    assert end <= len(frame)
    assert p.info is OPCODE_TABLE[frame[p.bth_off]] and p.info is not None
    assert p.opcode == frame[p.bth_off]
    assert p.payload_off == p.bth_off + 12 + p.info.ext_len
    assert p.payload_off + p.payload_len + p.pad + 4 == end
    assert p.payload_len >= 0 and len(bytes(p.payload)) == p.payload_len
    if not p.info.has_payload:
        assert p.payload_len == 0 and p.pad == 0
    assert p.icrc == struct.unpack_from("<I", frame, end - 4)[0]
    assert p.icrc == compute_icrc(frame, p.l3_off, end)
    assert p.tver == 0
    assert p.psn == int.from_bytes(frame[p.bth_off + 9:p.bth_off + 12], "big")
    assert p.dqpn == int.from_bytes(frame[p.bth_off + 5:p.bth_off + 8], "big")


# --- random bytes -----------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
@example(b"")
@example(b"\0" * 13)
@example(b"\0" * 12 + b"\x08\x00")
@example(b"\0" * 12 + b"\x86\xdd")
def test_random_bytes(frame: bytes) -> None:
    parse_or_wire_error(frame)


@settings(max_examples=400, deadline=None)
@given(etype=st.sampled_from([b"\x08\x00", b"\x86\xdd"]), rest=st.binary(max_size=200))
def test_random_bytes_after_ip_ethertype(etype: bytes, rest: bytes) -> None:
    """Get past the EtherType check so the IP and UDP code sees the random bytes."""
    parse_or_wire_error(bytes(12) + etype + rest)


@st.composite
def plausible_headers(draw: st.DrawFn) -> bytes:
    """Consistent IPv4/UDP(4791) headers and lengths around random BTH and tail bytes, so the
    random input reaches the BTH, extension header and ICRC code."""
    body = draw(st.binary(min_size=0, max_size=120))
    opcode = draw(st.sampled_from(sorted(OPCODES)) | st.integers(0, 255))
    bth1 = draw(st.sampled_from([0x00, 0x40, 0x10, 0x20, 0x30]) | st.integers(0, 255))
    body = bytes([opcode, bth1]) + body
    udp_len = 8 + len(body)
    ihl = 20
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, ihl + udp_len, 0, 0x4000, 64, 17, 0,
                      bytes(4), bytes(4))
    s = sum(struct.unpack("!10H", hdr))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    hdr = hdr[:10] + struct.pack("!H", ~s & 0xFFFF) + hdr[12:]
    udp = struct.pack("!HHHH", 0xC000, 4791, udp_len, 0)
    return bytes(12) + b"\x08\x00" + hdr + udp + body


@settings(max_examples=600, deadline=None)
@given(plausible_headers())
def test_random_transport_headers(frame: bytes) -> None:
    p = parse_or_wire_error(frame)
    if p is None:
        # With random bytes, an accepted frame needs a matching ICRC; with the ICRC check off
        # the same frame may parse, and then it must be consistent as well.
        try:
            q = parse(frame, check_icrc=False)
        except WireError:
            return
        assert q.icrc == struct.unpack_from("<I", frame, len(frame) - 4)[0]


# --- valid frames, truncated ------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(frame_specs(max_payload=64))
def test_every_truncation_is_rejected(spec: FrameSpec) -> None:
    frame = spec.build()
    parse_or_wire_error(frame)
    for n in range(len(frame)):
        try:
            parse(frame[:n])
        except WireError:
            continue
        raise AssertionError(f"{spec.info.opcode.name}: truncated to {n} of {len(frame)} "
                             "bytes and still parsed")


# --- valid frames, mutated --------------------------------------------------------------------


def unprotected_bits(frame: bytes) -> set[int]:
    """Bit positions a receiver cannot check: neither the IPv4 header checksum nor the ICRC
    covers them. Ethernet MAC addresses (the FCS would, but frames here have none), the
    UDP checksum (zero means none), BTH byte 4 (FECN, BECN, resv6), and for IPv6 the traffic
    class, flow label and hop limit (IPv6 has no header checksum)."""
    p = parse(frame)
    positions = set(range(0, 12 * 8))
    l4 = p.bth_off - 8
    positions |= set(range((l4 + 6) * 8, (l4 + 8) * 8))
    positions |= set(range((p.bth_off + 4) * 8, (p.bth_off + 5) * 8))
    if p.ipv6:
        positions |= set(range(14 * 8 + 4, 18 * 8))  # TC and flow label (after version)
        positions |= set(range(21 * 8, 22 * 8))  # hop limit
    return positions


@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
@pytest.mark.parametrize("opcode", sorted(OPCODES), ids=lambda op: OPCODES[op].opcode.name)
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_every_single_bit_flip(opcode: int, ipv6: bool, data: st.DataObject) -> None:
    """CRC-32 catches every single-bit error, the IPv4 checksum too; so a one-bit change
    anywhere must be rejected, except in the few fields the protocol deliberately leaves
    unprotected, where the frame must still parse."""
    frame = data.draw(frame_specs(opcode, ipv6, max_payload=40)).build()
    unprotected = unprotected_bits(frame)
    for bit in range(len(frame) * 8):
        mutated = bytearray(frame)
        mutated[bit // 8] ^= 0x80 >> (bit % 8)
        p = parse_or_wire_error(bytes(mutated))
        if bit in unprotected:
            assert p is not None, f"bit {bit} is covered by no check, the frame must parse"
        else:
            assert p is None, f"flipped bit {bit} (byte {bit // 8}) went undetected"


@settings(max_examples=500, deadline=None)
@given(spec=frame_specs(max_payload=64), data=st.data())
def test_random_byte_mutations(spec: FrameSpec, data: st.DataObject) -> None:
    frame = bytearray(spec.build())
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.integers(0, 255))
    parse_or_wire_error(bytes(frame))
    # The same without the ICRC check: header parsing alone must hold up too.
    try:
        p = parse(bytes(frame), check_icrc=False)
    except WireError:
        return
    end = frame_end(bytes(frame))
    assert p.payload_off + p.payload_len + p.pad + 4 == end


@settings(max_examples=300, deadline=None)
@given(spec=frame_specs(max_payload=64), data=st.data())
def test_random_insertions_and_deletions(spec: FrameSpec, data: st.DataObject) -> None:
    frame = bytearray(spec.build())
    i = data.draw(st.integers(0, len(frame)))
    if data.draw(st.booleans()):
        frame[i:i] = data.draw(st.binary(min_size=1, max_size=8))
    else:
        del frame[i:i + data.draw(st.integers(1, 8))]
    parse_or_wire_error(bytes(frame))


def test_every_opcode_byte() -> None:
    """Reserved opcodes are rejected as such; table opcodes with the right header sizes parse."""
    path = Path(bytes(6), bytes(6), bytes(4), bytes(4), 0xC000)
    fb = FrameBuilder(path)
    for op in range(256):
        info = OPCODE_TABLE[op]
        ext = bytes(info.ext_len) if info else bytes(8)
        payload = b"abcd" if info is None or info.has_payload else b""
        frame = fb.build(op, 1, 2, ext, payload)
        if info is None:
            try:
                parse(frame)
            except WireError as e:
                assert e.reason is ParseError.UNKNOWN_OPCODE, op
            else:
                raise AssertionError(f"reserved opcode 0x{op:02x} parsed")
        else:
            check_consistent(frame, parse(frame))
