"""nicsim.wire against an independent implementation: scapy's RoCEv2 dissector and ICRC.

For every opcode in the table, over IPv4 and IPv6, with random header values and payloads, the
frame FrameBuilder makes must dissect in scapy with the values that went in, scapy must compute
the same ICRC, IP checksum and lengths when it rebuilds the frame itself, and nicsim.wire.parse
must return every field and the payload.
"""

from __future__ import annotations

import struct
import zlib
from ipaddress import IPv6Address

import pytest
import scapy.contrib.roce  # noqa: F401  (binds BTH to UDP 4791)
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from nicsim.testing.wire_cases import ALL_EXT_FIELDS, U24, FrameSpec, frame_specs
from nicsim.wire import (
    OPCODES,
    ROCE_UDP_PORT,
    Ecn,
    Ext,
    FrameBuilder,
    Opcode,
    Path,
    compute_icrc,
    parse,
    roce_udp_sport,
)

ALL_OPCODES = sorted(OPCODES)
IP_VERSIONS = [pytest.param(False, id="ipv4"), pytest.param(True, id="ipv6")]
OPCODE_IDS = [OPCODES[op].opcode.name for op in ALL_OPCODES]


def _scapy_ip(pkt: Ether, spec: FrameSpec) -> IP | IPv6:
    return pkt[IPv6] if spec.path.ipv6 else pkt[IP]


@pytest.mark.parametrize("ipv6", IP_VERSIONS)
@pytest.mark.parametrize("opcode", ALL_OPCODES, ids=OPCODE_IDS)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_scapy_dissects_same_fields_and_icrc(opcode: int, ipv6: bool, data: st.DataObject) -> None:
    spec = data.draw(frame_specs(opcode, ipv6))
    frame = spec.build()
    pkt = Ether(frame)

    # Ethernet / IP / UDP as scapy reads them.
    assert pkt.src == ":".join(f"{b:02x}" for b in spec.path.smac)
    assert pkt.dst == ":".join(f"{b:02x}" for b in spec.path.dmac)
    ip = _scapy_ip(pkt, spec)
    tos = (spec.path.dscp << 2) | spec.path.ecn.value
    if ipv6:
        assert pkt.type == 0x86DD
        assert ip.tc == tos, "DSCP/ECN must land in the IPv6 traffic class"
        assert ip.fl == spec.path.flow_label
        assert ip.hlim == spec.path.ttl
        assert ip.nh == 17
        assert ip.plen == len(frame) - 14 - 40
    else:
        assert pkt.type == 0x0800
        assert ip.tos == tos, "DSCP/ECN must land in the IPv4 TOS byte"
        assert ip.ttl == spec.path.ttl
        assert ip.proto == 17
        assert ip.ihl == 5 and ip.len == len(frame) - 14
    udp = pkt[UDP]
    assert udp.sport == spec.path.sport and udp.dport == ROCE_UDP_PORT
    assert udp.len == len(frame) - 14 - (40 if ipv6 else 20)
    assert udp.chksum == 0, "RoCEv2 senders leave the UDP checksum zero"

    # BTH, field by field.
    bth = pkt[BTH]
    assert bth.opcode == opcode
    assert bth.solicited == spec.flag("solicited")
    assert bth.migreq == spec.flag("migreq")
    assert bth.padcount == spec.pad
    assert bth.version == 0
    assert bth.pkey == spec.flag("pkey")
    assert bth.fecn == spec.flag("fecn")
    assert bth.becn == spec.flag("becn")
    assert bth.resv6 == 0
    assert bth.dqpn == spec.dqpn
    assert bth.ackreq == spec.flag("ackreq")
    assert bth.resv7 == 0
    assert bth.psn == spec.psn
    # Everything between BTH and ICRC: extension headers in table order, payload, zero pad.
    assert raw(bth.payload) == spec.ext + spec.payload + bytes(spec.pad)
    if opcode == Opcode.RC_ACKNOWLEDGE:  # the one opcode scapy dissects AETH for
        assert pkt[AETH].syndrome == spec.ext_values["aeth_syndrome"]
        assert pkt[AETH].msn == spec.ext_values["aeth_msn"]
    if opcode == Opcode.CNP:
        assert pkt[CNPPadding].reserved1 == 0 and pkt[CNPPadding].reserved2 == 0

    # scapy recomputes the ICRC (and the IPv4 checksum and every length) from scratch.
    rebuilt = Ether(frame)
    rebuilt[BTH].icrc = None
    if ipv6:
        rebuilt[IPv6].plen = None
    else:
        rebuilt[IP].len = None
        rebuilt[IP].chksum = None
    rebuilt[UDP].len = None
    assert raw(rebuilt) == frame
    # And the ICRC scapy stores (big-endian read of the last 4 bytes) is where nicsim put it;
    # nicsim's compute_icrc and parse agree with the transmitted value.
    assert bth.icrc == int.from_bytes(frame[-4:], "big")
    icrc = compute_icrc(frame, 14, len(frame))
    assert struct.pack("<I", icrc) == frame[-4:]
    assert parse(frame).icrc == icrc


@pytest.mark.parametrize("ipv6", IP_VERSIONS)
@pytest.mark.parametrize("opcode", [Opcode.RC_SEND_ONLY, Opcode.RC_RDMA_WRITE_FIRST,
                                    Opcode.RC_ACKNOWLEDGE, Opcode.UD_SEND_ONLY_WITH_IMMEDIATE,
                                    Opcode.CNP])
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_scapy_built_frame_equals_nicsim_frame(opcode: int, ipv6: bool,
                                               data: st.DataObject) -> None:
    """scapy builds the same frame from the same values, headers and ICRC included."""
    spec = data.draw(frame_specs(opcode, ipv6))
    p = spec.path
    tos = (p.dscp << 2) | p.ecn.value
    eth = Ether(src=p.smac.hex(":"), dst=p.dmac.hex(":"))
    if ipv6:
        l3 = IPv6(tc=tos, fl=p.flow_label, hlim=p.ttl, src=str(IPv6Address(p.sip)),
                  dst=str(IPv6Address(p.dip)))
    else:
        l3 = IP(tos=tos, id=0, flags="DF", ttl=p.ttl, src=".".join(map(str, p.sip)),
                dst=".".join(map(str, p.dip)))
    bth = BTH(opcode=opcode, solicited=spec.flag("solicited"), migreq=spec.flag("migreq"),
              padcount=spec.pad, pkey=spec.flag("pkey"), fecn=spec.flag("fecn"),
              becn=spec.flag("becn"), dqpn=spec.dqpn, ackreq=spec.flag("ackreq"), psn=spec.psn)
    pkt = eth / l3 / UDP(sport=p.sport, dport=ROCE_UDP_PORT, chksum=0) / bth / (
        spec.ext + spec.payload + bytes(spec.pad))
    assert raw(pkt) == spec.build()


@pytest.mark.parametrize("ipv6", IP_VERSIONS)
@pytest.mark.parametrize("opcode", ALL_OPCODES, ids=OPCODE_IDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_parse_round_trip(opcode: int, ipv6: bool, data: st.DataObject) -> None:
    spec = data.draw(frame_specs(opcode, ipv6, max_payload=4200))
    frame = spec.build()
    p = parse(frame)
    info = OPCODES[opcode]
    assert p.info is info and p.opcode == opcode and p.name == info.opcode.name
    assert p.solicited == spec.flag("solicited")
    assert p.migreq == spec.flag("migreq")
    assert p.pad == spec.pad
    assert p.tver == 0
    assert p.pkey == spec.flag("pkey")
    assert p.fecn == spec.flag("fecn")
    assert p.becn == spec.flag("becn")
    assert p.dqpn == spec.dqpn
    assert p.ackreq == spec.flag("ackreq")
    assert p.psn == spec.psn
    assert p.ipv6 == ipv6
    assert p.smac == spec.path.smac and p.dmac == spec.path.dmac
    assert p.sip == spec.path.sip and p.dip == spec.path.dip
    assert p.tos == (spec.path.dscp << 2) | spec.path.ecn.value
    assert p.ecn is spec.path.ecn
    assert p.sport == spec.path.sport
    assert p.udp_csum == 0
    assert p.l3_off == 14
    assert p.bth_off == 14 + (40 if ipv6 else 20) + 8
    for name in ALL_EXT_FIELDS:
        assert getattr(p, name) == spec.ext_values.get(name), name
    assert bytes(p.payload) == spec.payload
    assert p.payload_len == len(spec.payload)
    assert p.payload_off == p.bth_off + 12 + info.ext_len
    assert p.payload_off + p.payload_len + p.pad + 4 == len(frame)
    assert p.icrc == compute_icrc(frame, p.l3_off, len(frame))
    # Ethernet padding after the IP packet (a MAC pads short frames to 60 bytes) is ignored.
    padded = parse(frame + bytes(max(0, 60 - len(frame)) + 7))
    assert (padded.psn, padded.icrc, bytes(padded.payload)) == (p.psn, p.icrc, spec.payload)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_icrc_ignores_only_the_variant_fields(data: st.DataObject) -> None:
    """The fields routers may rewrite (TOS/ECN, TTL, flow label, FECN/BECN; IPv4 checksum
    follows) are masked out of the ICRC (Annex A17.4.1); an invariant field is not."""
    spec = data.draw(frame_specs())
    frame = spec.build()
    p = spec.path
    other = FrameSpec(
        path=Path(p.smac, p.dmac, p.sip, p.dip, p.sport,
                  dscp=data.draw(st.integers(0, 63)), ecn=data.draw(st.sampled_from(Ecn)),
                  ttl=data.draw(st.integers(0, 255)),
                  flow_label=data.draw(st.integers(0, (1 << 20) - 1))),
        opcode=spec.opcode, dqpn=spec.dqpn, psn=spec.psn, ext_values=spec.ext_values,
        payload=spec.payload,
        flags=spec.flags | {"fecn": data.draw(st.booleans()), "becn": data.draw(st.booleans())})
    assert other.build()[-4:] == frame[-4:]
    # A change in any invariant field (here the PSN) changes it.
    moved = FrameSpec(spec.path, spec.opcode, spec.dqpn, (spec.psn + 1) & 0xFFFFFF,
                      spec.ext_values, spec.payload, spec.flags)
    assert moved.build()[-4:] != frame[-4:]


def test_icrc_known_answer() -> None:
    """A hand-assembled ICRC, independent of both nicsim's and scapy's code: CRC-32 over
    8 bytes of ones, then IP, UDP and BTH with the variant fields set to ones, then payload."""
    path = Path(bytes.fromhex("020000000002"), bytes.fromhex("020000000001"),
                bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), 0xC001, dscp=26, ecn=Ecn.CE, ttl=64)
    frame = FrameBuilder(path).build(Opcode.RC_SEND_ONLY, 0x12, 0x345, b"", b"\x01\x02\x03\x04",
                                     ackreq=True, fecn=True)
    ip = bytes.fromhex("45ff0030 0000 4000 ff 11 ffff 0a000001 0a000002")  # TOS TTL csum
    udp = bytes.fromhex("c001 12b7 001c ffff")  # checksum
    bth = bytes.fromhex("04 40 ffff ff 000012 80000345")  # FECN/BECN/resv6 byte
    crc = zlib.crc32(b"\xff" * 8 + ip + udp + bth + b"\x01\x02\x03\x04")
    assert frame[-4:] == struct.pack("<I", crc)


@settings(max_examples=500, deadline=None)
@given(lqpn=U24, rqpn=U24)
def test_roce_udp_sport_range(lqpn: int, rqpn: int) -> None:
    sport = roce_udp_sport(lqpn, rqpn)
    assert 0xC000 <= sport <= 0xFFFF
    # Both ends of a connection derive the same port from the (unordered) QP pair.
    assert roce_udp_sport(rqpn, lqpn) == sport


def test_roce_udp_sport_spreads() -> None:
    """It is entropy for ECMP: consecutive QPs must not collapse onto a few ports."""
    ports = {roce_udp_sport(q, 0x11) for q in range(1, 1025)}
    assert len(ports) > 900


@pytest.mark.parametrize("ipv6", IP_VERSIONS)
@pytest.mark.parametrize("ecn", list(Ecn))
def test_dscp_ecn_in_ip_header(ipv6: bool, ecn: Ecn) -> None:
    alen = 16 if ipv6 else 4
    for dscp in (0, 1, 26, 46, 63):
        path = Path(bytes(6), bytes(6), bytes(alen), bytes(alen), 0xC000, dscp=dscp, ecn=ecn)
        frame = FrameBuilder(path).build(Opcode.RC_ACKNOWLEDGE, 1, 2, b"\0" * 4)
        # IPv6: the traffic class is bits 20..27 of the first word; IPv4: the TOS byte.
        tc = (int.from_bytes(frame[14:18], "big") >> 20) & 0xFF if ipv6 else frame[15]
        assert tc >> 2 == dscp and tc & 3 == ecn.value
        assert parse(frame).ecn is ecn


def test_every_ext_is_exercised() -> None:
    """The opcode table uses every extension header, so the tests above cover them all."""
    used = {e for info in OPCODES.values() for e in info.exts}
    assert used == set(Ext)
