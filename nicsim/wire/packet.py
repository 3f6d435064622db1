"""RoCE frames: RoCEv2 (Ethernet + IPv4/IPv6 + UDP(4791) + BTH + extension headers + payload +
ICRC) and RoCE v1 (Ethernet type 0x8915 + GRH + BTH + ...: IBA Annex A16, the same transport
headers with the GRH where v2 has IP and UDP; link-local, not routed).

Built and parsed with `struct` and a CRC-32 (nicsim.wire.crc) only: this is the hot path of
the model (scapy builds about a thousand packets a second; this does hundreds of thousands).

ICRC (RoCEv2 Annex A17.4.1, IBA 7.8.1): CRC-32 over a pseudo-header of 8 bytes of ones standing
in for the LRH, then the IP header, UDP header, BTH, extension headers, payload and pad, where
the fields that may change hop by hop are replaced with ones: IPv4 TOS, TTL and header
checksum; IPv6 traffic class, flow label and hop limit; UDP checksum; BTH byte 4 (FECN, BECN,
resv6). The CRC is transmitted least significant byte first. RoCE v1 (Annex A16.8) masks the
GRH as v2 masks IPv6 (traffic class, flow label, hop limit); there is no UDP header.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import partial

from nicsim.sim.paths import general
from nicsim.wire.crc import crc32
from nicsim.wire.opcodes import OPCODE_TABLE, Ext, OpInfo

ROCE_UDP_PORT = 4791
ETH_P_IPV4 = 0x0800
ETH_P_IPV6 = 0x86DD
ETH_P_ROCE_V1 = 0x8915  # RoCE v1: a GRH follows the Ethernet header (Annex A16.2)
GRH_NXT_BTH = 0x1B  # the GRH's next header for IBA transport headers (IBA 8.3.1)
ETH_HLEN = 14
IPV4_HLEN = 20
IPV6_HLEN = 40
UDP_HLEN = 8
BTH_LEN = 12
ICRC_LEN = 4
# On the wire around every frame: preamble + SFD 8, FCS 4, minimum inter-frame gap 12.
ETH_PREAMBLE = 8
ETH_FCS = 4
ETH_IFG = 12
ETH_MIN_FRAME = 60  # without FCS; shorter frames are padded by the MAC

PKEY_DEFAULT = 0xFFFF


class Ecn(Enum):
    """IP ECN codepoints (RFC 3168)."""

    NOT_ECT = 0b00
    ECT1 = 0b01
    ECT0 = 0b10
    CE = 0b11


_ECNS = tuple(Ecn(v) for v in range(4))  # (indexing, not an enum call per packet)


class ParseError(Enum):
    """Why a frame is not a well-formed RoCEv2 packet. The model counts drops by these."""

    TRUNCATED = "truncated"
    NOT_IP = "not_ip"
    BAD_IP_VERSION = "bad_ip_version"
    BAD_IP_HEADER = "bad_ip_header"
    BAD_IP_CHECKSUM = "bad_ip_checksum"
    BAD_IP_LENGTH = "bad_ip_length"
    NOT_UDP = "not_udp"
    NOT_ROCE = "not_roce_port"
    BAD_UDP_LENGTH = "bad_udp_length"
    BAD_UDP_CHECKSUM = "bad_udp_checksum"
    UNKNOWN_OPCODE = "unknown_opcode"
    BAD_TVER = "bad_transport_version"
    BAD_PADCOUNT = "bad_padcount"
    SHORT_HEADERS = "short_headers"
    BAD_ICRC = "bad_icrc"


class WireError(Exception):
    """The only exception the parser raises: `reason` says what is wrong, `detail` where."""

    def __init__(self, reason: ParseError, detail: str = "") -> None:
        super().__init__(f"{reason.value}: {detail}" if detail else reason.value)
        self.reason = reason
        self.detail = detail


# --- addressing -------------------------------------------------------------------------------


def mac_bytes(mac: str) -> bytes:
    parts = mac.split(":")
    if len(parts) != 6:
        raise ValueError(f"bad MAC address {mac!r}")
    return bytes(int(p, 16) for p in parts)


def mac_str(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


def roce_udp_sport(lqpn: int, rqpn: int) -> int:
    """UDP source port for a QP pair, for ECMP entropy.

    The flow label is hashed from the two QP numbers and folded into the range 0xC000-0xFFFF
    that RoCEv2 reserves for this use (the scheme Linux uses in rdma_calc_flow_label and
    rdma_flow_label_to_udp_sport).
    """
    v = (lqpn * rqpn) & 0xFFFFFFFFFFFFFFFF
    v ^= v >> 20
    v ^= v >> 40
    fl = v & 0xFFFFF
    low = (fl & 0x03FFF) ^ ((fl & 0xFC000) >> 14)
    return low | 0xC000


MCAST_QPN = 0xFFFFFF  # the destination QPN of every multicast packet (IBA 10.5.2.5, C10-75)


def is_multicast_ip(ip: bytes) -> bool:
    """Whether a 4- or 16-byte address (IPv4-mapped in a GID allowed) is IP multicast:
    224.0.0.0/4 (RFC 5771) or ff00::/8 (RFC 4291); rdma_is_multicast_addr in Linux."""
    if len(ip) == 16 and ip[:12] == bytes(10) + b"\xff\xff":
        ip = ip[12:]
    return (ip[0] & 0xF0) == 0xE0 if len(ip) == 4 else len(ip) == 16 and ip[0] == 0xFF


def multicast_mac(ip: bytes) -> bytes:
    """The Ethernet group address an IP multicast address maps to: 01:00:5e and the low 23
    bits for IPv4 (RFC 1112 6.4), 33:33 and the low 32 bits for IPv6 (RFC 2464 7)."""
    if len(ip) == 16 and ip[:12] == bytes(10) + b"\xff\xff":
        ip = ip[12:]
    if len(ip) == 4:
        return b"\x01\x00\x5e" + bytes((ip[1] & 0x7F,)) + ip[2:4]
    return b"\x33\x33" + ip[12:16]


@dataclass(frozen=True, slots=True)
class Path:
    """Everything below BTH that is fixed for one QP's traffic to one peer."""

    smac: bytes
    dmac: bytes
    sip: bytes  # 4 bytes for IPv4, 16 for IPv6
    dip: bytes
    sport: int
    dscp: int = 0
    ecn: Ecn = Ecn.ECT0
    ttl: int = 64
    flow_label: int = 0
    roce_v1: bool = False  # a GRH instead of IP and UDP; sip and dip are 16-byte GIDs

    @property
    def ipv6(self) -> bool:
        """16-byte addresses: an IPv6 header, or a RoCE v1 GRH (the same layout)."""
        return len(self.sip) == 16


# --- extension headers ------------------------------------------------------------------------

_RETH = struct.Struct("!QII")
_ATOMIC_ETH = struct.Struct("!QIQQ")
_Q = struct.Struct("!Q")
_I = struct.Struct("!I")
_DETH = struct.Struct("!II")


def reth(va: int, rkey: int, dma_len: int) -> bytes:
    return _RETH.pack(va, rkey, dma_len)


def aeth(syndrome: int, msn: int) -> bytes:
    return _I.pack((syndrome << 24) | (msn & 0xFFFFFF))


def aeth_syndrome(ext: bytes) -> int:
    """The syndrome of the AETH `aeth` made (its first byte)."""
    return ext[0]


def immdt(imm: int) -> bytes:
    return _I.pack(imm)


def ieth(rkey: int) -> bytes:
    return _I.pack(rkey)


def atomic_eth(va: int, rkey: int, swap_add: int, compare: int) -> bytes:
    return _ATOMIC_ETH.pack(va, rkey, swap_add, compare)


def atomic_ack_eth(orig: int) -> bytes:
    return _Q.pack(orig)


def deth(qkey: int, src_qpn: int) -> bytes:
    return _DETH.pack(qkey, src_qpn & 0xFFFFFF)


def feth(rsvd: int, sel: int, plt: int) -> bytes:
    """FETH: reserved (26 bits, sent as 0 by requesters), selectivity level (2), placement
    type (4)."""
    return _I.pack((rsvd & 0x3FFFFFF) << 6 | (sel & 3) << 4 | (plt & 0xF))


CNP_PAD = bytes(16)

# The fields of each extension header, in wire order, named as Packet names them, with their
# widths in bits: what a testbench, a descriptor port or a pcap dissector needs to know.
EXT_FIELDS: dict[Ext, tuple[tuple[str, int], ...]] = {
    Ext.RETH: (("reth_va", 64), ("reth_rkey", 32), ("reth_len", 32)),
    Ext.AETH: (("aeth_syndrome", 8), ("aeth_msn", 24)),
    Ext.ATOMIC_ETH: (("atomic_va", 64), ("atomic_rkey", 32), ("atomic_swap_add", 64),
                     ("atomic_compare", 64)),
    Ext.ATOMIC_ACK_ETH: (("atomic_orig", 64),),
    Ext.DETH: (("deth_qkey", 32), ("deth_src_qp", 24)),
    Ext.IMMDT: (("imm", 32),),
    Ext.IETH: (("ieth_rkey", 32),),
    Ext.CNP_PAD: (),
    Ext.FETH: (("feth_rsvd", 26), ("feth_sel", 2), ("feth_plt", 4)),
}
_EXT_PACK = {
    Ext.RETH: reth, Ext.AETH: aeth, Ext.ATOMIC_ETH: atomic_eth,
    Ext.ATOMIC_ACK_ETH: atomic_ack_eth, Ext.DETH: deth, Ext.IMMDT: immdt, Ext.IETH: ieth,
    Ext.CNP_PAD: lambda: CNP_PAD, Ext.FETH: feth,
}


def pack_ext(ext: Ext, fields: Mapping[str, int]) -> bytes:
    """One extension header from its field values, named as in EXT_FIELDS."""
    return _EXT_PACK[ext](*(fields[name] for name, _ in EXT_FIELDS[ext]))


# --- building ---------------------------------------------------------------------------------

_BTH = struct.Struct("!BBHII")
_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")
_IPV6_FIRST = struct.Struct("!IHBB")
_ICRC = struct.Struct("<I")
_ONES8 = b"\xff" * 8


def _fold(s: int) -> int:
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return s


def ipv4_checksum(hdr: bytes) -> int:
    """RFC 1071 checksum of an IPv4 header whose checksum field is zero."""
    s = sum(struct.unpack(f"!{len(hdr) // 2}H", hdr))
    return (~_fold(s)) & 0xFFFF


class FrameBuilder:
    """Builds frames for one Path.

    Everything below BTH depends only on the Path and the frame's length, so it is computed
    once per length and kept: the Ethernet+IP+UDP header bytes and the ICRC's running CRC over
    the masked pseudo-header up to BTH.
    """

    __slots__ = ("path", "_eth", "_v6", "_v1", "_sip", "_dip", "_tos", "_ttl", "_csum_base",
                 "_v6_word0", "_sport", "_by_len", "_bth", "_remember", "deferrable", "addrs",
                 "make")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._v6 = path.ipv6
        if path.roce_v1 and not self._v6:
            raise ValueError("a RoCE v1 path has 16-byte GIDs for addresses")
        self._v1 = path.roce_v1
        etype = ETH_P_ROCE_V1 if self._v1 else ETH_P_IPV6 if self._v6 else ETH_P_IPV4
        self._eth = path.dmac + path.smac + struct.pack("!H", etype)
        self._sip, self._dip = path.sip, path.dip
        self._tos = (path.dscp << 2) | path.ecn.value
        self._ttl = path.ttl
        self._sport = path.sport
        # IPv4 header checksum over every word but total length (added per length).
        fixed = _IPV4.pack(0x45, self._tos, 0, 0, 0x4000, self._ttl, 17, 0, path.sip[:4],
                           path.dip[:4]) if not self._v6 else b""
        self._csum_base = sum(struct.unpack("!10H", fixed)) if fixed else 0
        self._v6_word0 = (6 << 28) | (self._tos << 20) | (path.flow_label & 0xFFFFF)
        self._by_len: dict[int, tuple[bytes, int]] = {}
        # (opcode, dqpn, payload length, ackreq, solicited) of a packet with no extension
        # header and no pad -> its headers up to BTH's PSN word and the ICRC's state after
        # them: the packets of one message repeat them but for the PSN.
        self._bth: dict[tuple[int, int, int, bool, bool], tuple[bytes, int]] = {}
        fast = not general()  # (nicsim.sim.paths)
        self._remember = fast  # the headers below BTH per length, and _bth
        # Whether this path's packets may travel as Unbuilt: IPv4 (the receive fast path's
        # header checks are IPv4's), to another station's unicast address (a frame to our own
        # MAC loops back inside the port, a group address goes to the multicast filter).
        self.deferrable = (fast and not self._v6 and not path.dmac[0] & 1
                           and path.dmac != path.smac)
        self.addrs = path.sip + path.dip  # IP source and destination, as in the frame
        # make(opcode, dqpn, psn, ext, payload, ackreq=, solicited=): what `build` makes, as an
        # Unbuilt when the path allows (for an RC QP's packets, whose receiver takes them
        # unbuilt). Chosen once here: it is called per packet.
        self.make: Callable[..., bytes | Unbuilt] = \
            partial(Unbuilt, self) if self.deferrable else self.build

    def _below_bth(self, udp_len: int) -> tuple[bytes, int]:
        """Ethernet+IP+UDP header bytes, and the ICRC state after the masked IP and UDP (for
        RoCE v1: Ethernet+GRH, and the state after the masked GRH). `udp_len` is the length
        from the UDP header on, as RoCEv2 would have it (v1's GRH payload is 8 bytes less)."""
        if self._v1:
            n = udp_len - UDP_HLEN
            grh = _IPV6_FIRST.pack(self._v6_word0, n, GRH_NXT_BTH, self._ttl) + self._sip \
                + self._dip
            masked = _IPV6_FIRST.pack(0x6FFFFFFF, n, GRH_NXT_BTH, 0xFF) + self._sip + self._dip
            v = (self._eth + grh, crc32(masked, _CRC_ONES8))
            if self._remember and len(self._by_len) < 4096:
                self._by_len[udp_len] = v
            return v
        udp = _UDP.pack(self._sport, ROCE_UDP_PORT, udp_len, 0)
        if self._v6:
            ip = _IPV6_FIRST.pack(self._v6_word0, udp_len, 17, self._ttl) + self._sip + self._dip
            masked_ip = (_IPV6_FIRST.pack(0x6FFFFFFF, udp_len, 17, 0xFF) + self._sip
                         + self._dip)
        else:
            tot = IPV4_HLEN + udp_len
            csum = (~_fold(self._csum_base + tot)) & 0xFFFF
            ip = _IPV4.pack(0x45, self._tos, tot, 0, 0x4000, self._ttl, 17, csum, self._sip,
                            self._dip)
            masked_ip = _IPV4.pack(0x45, 0xFF, tot, 0, 0x4000, 0xFF, 17, 0xFFFF, self._sip,
                                   self._dip)
        crc = crc32(udp[:6] + b"\xff\xff", crc32(masked_ip, _CRC_ONES8))
        v = (self._eth + ip + udp, crc)
        if self._remember and len(self._by_len) < 4096:
            self._by_len[udp_len] = v
        return v

    def build(self, opcode: int, dqpn: int, psn: int, ext: bytes = b"", payload: bytes = b"",
              *, ackreq: bool = False, solicited: bool = False, becn: bool = False,
              fecn: bool = False, pkey: int = PKEY_DEFAULT, migreq: bool = True) -> bytes:
        """One complete frame (without FCS). `ext` is the packed extension headers in order."""
        return b"".join(self.pieces(opcode, dqpn, psn, ext, payload, ackreq, solicited, becn,
                                    fecn, pkey, migreq))

    def pieces(self, opcode: int, dqpn: int, psn: int, ext: bytes, payload: bytes | memoryview,
               ackreq: bool = False, solicited: bool = False, becn: bool = False,
               fecn: bool = False, pkey: int = PKEY_DEFAULT, migreq: bool = True
               ) -> tuple[bytes | memoryview, ...]:
        """The frame `build` makes, as the pieces it is joined from (headers, payload, ICRC): a
        writer that gathers them (a pcap tap's writev) need not copy the payload once more."""
        plen = len(payload)
        if not ext and not plen & 3 and not (becn or fecn) and pkey == PKEY_DEFAULT and migreq:
            return self.common_pieces(opcode, dqpn, psn, payload, ackreq, solicited)
        pad = -plen & 3
        udp_len = UDP_HLEN + BTH_LEN + len(ext) + plen + pad + ICRC_LEN
        hdr, crc = self._by_len.get(udp_len) or self._below_bth(udp_len)
        w0 = (opcode << 24) | ((0x80 if solicited else 0) | (0x40 if migreq else 0)
                               | (pad << 4)) << 16 | pkey
        w2 = (0x80000000 if ackreq else 0) | (psn & 0xFFFFFF)
        dq = dqpn & 0xFFFFFF
        bth = _BTH3.pack(w0, ((0x80 if fecn else 0) | (0x40 if becn else 0)) << 24 | dq, w2)
        # The ICRC sees BTH byte 4 (FECN, BECN, resv6) as ones.
        crc = crc32(_BTH3.pack(w0, 0xFF000000 | dq, w2), crc)
        if pad:
            tail = ext + payload + b"\0" * pad
            return hdr, bth, tail, _ICRC.pack(crc32(tail, crc))
        if ext:
            return hdr, bth, ext, payload, _ICRC.pack(crc32(payload, crc32(ext, crc)))
        return hdr, bth, payload, _ICRC.pack(crc32(payload, crc))

    def common_pieces(self, opcode: int, dqpn: int, psn: int, payload: bytes | memoryview,
                      ackreq: bool, solicited: bool) -> tuple[bytes | memoryview, ...]:
        """`pieces` of the common packet (a MIDDLE or LAST, an ACK: no extension header, no pad,
        default P_Key and flags), whose headers but the PSN repeat."""
        key = (opcode, dqpn, len(payload), ackreq, solicited)
        head, crc = self._bth.get(key) or self._head(key)
        w2 = _U32.pack((0x80000000 if ackreq else 0) | (psn & 0xFFFFFF))
        return head, w2, payload, _ICRC.pack(crc32(payload, crc32(w2, crc)))

    def _head(self, key: tuple[int, int, int, bool, bool]) -> tuple[bytes, int]:
        """For common_pieces: the header bytes up to BTH's PSN word, and the ICRC's state after
        them (BTH byte 4, FECN, BECN and resv6, counted as ones)."""
        opcode, dqpn, plen, _ackreq, solicited = key
        hdr, crc = self._by_len.get(UDP_HLEN + BTH_LEN + plen + ICRC_LEN) or \
            self._below_bth(UDP_HLEN + BTH_LEN + plen + ICRC_LEN)
        w0 = (opcode << 24) | ((0x80 if solicited else 0) | 0x40) << 16 | PKEY_DEFAULT
        dq = dqpn & 0xFFFFFF
        v = (hdr + _BTH2.pack(w0, dq), crc32(_BTH2.pack(w0, 0xFF000000 | dq), crc))
        if self._remember:
            if len(self._bth) >= 4096:
                self._bth.clear()
            self._bth[key] = v
        return v


class Unbuilt:
    """A packet whose frame is not made yet: exactly the bytes
    `builder.build(opcode, dqpn, psn, ext, payload, ackreq=ackreq, solicited=solicited)` would
    make (IPv4, default P_Key, no ECN mark), built only if something needs them.

    The packets between two NICs on one cable go from the framer to the peer's receive path and,
    unless a tap, a fault or a switch is on the way, nothing else looks at them. Making their
    bytes would cost two ICRCs, a copy and a parse; the receiving NIC checks the same fields
    (address, P_Key, QP, PSN, opcode, length) on the object instead (a MIDDLE on its fast path,
    anything else as an UnbuiltPacket on the general path), and the ICRC is right by
    construction. Anything else that meets one (a tap, a fault injector, a switch, a PFC queue)
    builds the frame first, so what it sees is byte for byte the frame it would have seen.
    `payload` is a copy of the data as the DMA read returned it."""

    __slots__ = ("builder", "opcode", "dqpn", "psn", "ext", "payload", "ackreq", "solicited",
                 "n")

    def __init__(self, builder: FrameBuilder, opcode: int, dqpn: int, psn: int,
                 ext: bytes = b"", payload: bytes | memoryview = b"", ackreq: bool = False,
                 solicited: bool = False) -> None:
        self.builder = builder
        self.opcode = opcode
        self.dqpn = dqpn
        self.psn = psn
        self.ext = ext
        # A copy of a view of host memory: the data as the DMA read returned it. (tobytes:
        # bytes() of a memoryview takes a slower path for the same copy.)
        self.payload = payload = payload if payload.__class__ is bytes else payload.tobytes()
        self.ackreq = ackreq
        self.solicited = solicited
        plen = len(payload)
        self.n = _UNBUILT_HDR + len(ext) + plen + (-plen & 3)  # the frame's length

    def __len__(self) -> int:
        return self.n

    def build(self) -> bytes:
        return b"".join(self.pieces())

    def pieces(self) -> tuple[bytes | memoryview, ...]:
        """The frame's bytes in pieces (FrameBuilder.pieces)."""
        payload = self.payload
        if not self.ext and not len(payload) & 3:  # (and its flags are the defaults)
            return self.builder.common_pieces(self.opcode, self.dqpn, self.psn, payload,
                                              self.ackreq, self.solicited)
        return self.builder.pieces(self.opcode, self.dqpn, self.psn, self.ext, payload,
                                   self.ackreq, self.solicited)

    def packet(self) -> UnbuiltPacket:
        """What `parse` gives for this frame, without building it."""
        return UnbuiltPacket(self)


_UNBUILT_HDR = ETH_HLEN + IPV4_HLEN + UDP_HLEN + BTH_LEN + ICRC_LEN
_UNBUILT_BTH = ETH_HLEN + IPV4_HLEN + UDP_HLEN
_BTH3 = struct.Struct("!III")
_BTH2 = struct.Struct("!II")  # BTH up to the PSN word
_U32 = struct.Struct("!I")
_CRC_ONES8 = crc32(_ONES8)


def wire_bytes(frame_len: int) -> int:
    """Bytes a frame occupies on an Ethernet link: preamble, min-size pad, FCS and IFG."""
    return ETH_PREAMBLE + max(frame_len, ETH_MIN_FRAME) + ETH_FCS + ETH_IFG


def packet_overhead(ext_len: int, ipv6: bool = False, roce_v1: bool = False) -> int:
    """Per-packet bytes on the wire around `ext_len` extension headers, excluding payload/pad
    (RoCE v1: the 40-byte GRH and no UDP header)."""
    below = IPV6_HLEN if roce_v1 else (IPV6_HLEN if ipv6 else IPV4_HLEN) + UDP_HLEN
    return ETH_PREAMBLE + ETH_HLEN + below + BTH_LEN + ext_len + ICRC_LEN + ETH_FCS + ETH_IFG


# --- parsing ----------------------------------------------------------------------------------


class Packet:
    """A parsed RoCEv2 frame. Extension header fields are None when absent (the class-level
    defaults below; the parser sets only what the opcode carries). Ethernet, IP and UDP
    fields are read from the frame when asked for: the NIC's hot path does not need them."""

    # Slots for what every packet sets; extension header fields go in __dict__ when present.
    __slots__ = ("frame", "info", "opcode", "_f1", "_w1", "pkey", "dqpn", "ackreq", "psn",
                 "ipv6", "bth_off", "payload_off", "payload_len", "icrc", "__dict__")

    l3_off = ETH_HLEN
    frame: bytes
    info: OpInfo
    opcode: int
    _f1: int  # BTH byte 1: SE, M, PadCnt, TVer
    _w1: int  # BTH bytes 4-7: FECN, BECN, resv6, DestQP
    pkey: int
    dqpn: int
    ackreq: bool
    psn: int
    ipv6: bool
    bth_off: int
    payload_off: int
    payload_len: int
    icrc: int
    reth_va: int | None = None
    reth_rkey: int | None = None
    reth_len: int | None = None
    aeth_syndrome: int | None = None
    aeth_msn: int | None = None
    imm: int | None = None
    ieth_rkey: int | None = None
    atomic_va: int | None = None
    atomic_rkey: int | None = None
    atomic_swap_add: int | None = None
    atomic_compare: int | None = None
    atomic_orig: int | None = None
    deth_qkey: int | None = None
    deth_src_qp: int | None = None
    feth_rsvd: int | None = None
    feth_sel: int | None = None
    feth_plt: int | None = None

    @property
    def solicited(self) -> bool:
        return bool(self._f1 & 0x80)

    @property
    def migreq(self) -> bool:
        return bool(self._f1 & 0x40)

    @property
    def pad(self) -> int:
        return (self._f1 >> 4) & 3

    @property
    def tver(self) -> int:
        return self._f1 & 0xF

    @property
    def fecn(self) -> bool:
        return bool(self._w1 & 0x80000000)

    @property
    def becn(self) -> bool:
        return bool(self._w1 & 0x40000000)

    @property
    def dmac(self) -> bytes:
        return self.frame[0:6]

    @property
    def smac(self) -> bytes:
        return self.frame[6:12]

    @property
    def sip(self) -> bytes:
        return self.frame[22:38] if self.ipv6 else self.frame[26:30]

    @property
    def dip(self) -> bytes:
        return self.frame[38:54] if self.ipv6 else self.frame[30:34]

    @property
    def tos(self) -> int:
        f = self.frame
        return ((f[14] & 0xF) << 4 | f[15] >> 4) if self.ipv6 else f[15]

    @property
    def roce_v1(self) -> bool:
        """A RoCE v1 frame: a GRH (at the offsets of an IPv6 header: sip, dip and tos read
        it) and no UDP header."""
        return self.frame[12:14] == _V1_TYPE

    @property
    def sport(self) -> int:
        """The UDP source port (0 for RoCE v1, which has no UDP header)."""
        if self.roce_v1:
            return 0
        return int.from_bytes(self.frame[self.bth_off - 8:self.bth_off - 6], "big")

    @property
    def udp_csum(self) -> int:
        if self.roce_v1:
            return 0
        return int.from_bytes(self.frame[self.bth_off - 2:self.bth_off], "big")

    @property
    def payload(self) -> memoryview:
        return memoryview(self.frame)[self.payload_off:self.payload_off + self.payload_len]

    @property
    def ecn(self) -> Ecn:
        return _ECNS[self.tos & 3]

    @property
    def name(self) -> str:
        return self.info.opcode.name


_ETH_TYPE = struct.Struct("!H")
_V1_TYPE = ETH_P_ROCE_V1.to_bytes(2, "big")


def parse(frame: bytes, *, check_icrc: bool = True,
          l3: tuple[int, int, int, bool] | None = None, cache: bool = True) -> Packet:
    """Parse one frame (without FCS). Raises WireError, and only WireError, if it is not a
    well-formed RoCEv2 packet. Trailing bytes past the IP length (Ethernet padding) are ignored.
    `l3` is what l3_of(frame) gave, if the caller has it; `cache`: as l3_of's.
    """
    end, b, prefix, ipv6 = l3 or l3_of(frame, cache)
    if end - b < BTH_LEN + ICRC_LEN:
        raise WireError(ParseError.TRUNCATED, "BTH")
    opcode, f1, pkey, w1, w2 = _BTH.unpack_from(frame, b)
    info = OPCODE_TABLE[opcode]
    if info is None:
        raise WireError(ParseError.UNKNOWN_OPCODE, f"opcode 0x{opcode:02x}")
    if f1 & 0xF:
        raise WireError(ParseError.BAD_TVER, f"TVer {f1 & 0xF}")
    p = Packet()
    p.frame = frame
    p.ipv6 = ipv6
    p.bth_off = b
    p.info = info
    p.opcode = opcode
    p._f1 = f1
    p._w1 = w1
    p.pkey = pkey
    p.dqpn = w1 & 0xFFFFFF
    p.ackreq = w2 >= 0x80000000
    p.psn = w2 & 0xFFFFFF
    pad = (f1 >> 4) & 3
    x = b + BTH_LEN
    payload_len = end - x - info.ext_len - pad - ICRC_LEN
    if payload_len < 0:
        raise WireError(ParseError.SHORT_HEADERS,
                        f"{info.opcode.name} needs {info.ext_len} header bytes + pad {pad}")
    if not info.has_payload and (payload_len or pad):
        raise WireError(ParseError.BAD_PADCOUNT if pad else ParseError.SHORT_HEADERS,
                        f"{info.opcode.name} carries no payload, found {payload_len} bytes")
    x = _ext_fields(p, info, frame, x)
    p.payload_off, p.payload_len = x, payload_len
    (p.icrc,) = _ICRC.unpack_from(frame, end - ICRC_LEN)
    if check_icrc and not icrc_ok(frame, b, end, prefix):
        raise WireError(ParseError.BAD_ICRC, f"ICRC 0x{p.icrc:08x}")
    return p


def _ext_fields(p: Packet, info: OpInfo, buf: bytes, x: int) -> int:
    """Set p's extension header fields from the headers at buf[x:]; returns where they end."""
    for e, size in info.ext_layout:
        if e is Ext.RETH:
            p.reth_va, p.reth_rkey, p.reth_len = _RETH.unpack_from(buf, x)
        elif e is Ext.AETH:
            (v,) = _I.unpack_from(buf, x)
            p.aeth_syndrome, p.aeth_msn = v >> 24, v & 0xFFFFFF
        elif e is Ext.IMMDT:
            (p.imm,) = _I.unpack_from(buf, x)
        elif e is Ext.IETH:
            (p.ieth_rkey,) = _I.unpack_from(buf, x)
        elif e is Ext.ATOMIC_ETH:
            p.atomic_va, p.atomic_rkey, p.atomic_swap_add, p.atomic_compare = \
                _ATOMIC_ETH.unpack_from(buf, x)
        elif e is Ext.ATOMIC_ACK_ETH:
            (p.atomic_orig,) = _Q.unpack_from(buf, x)
        elif e is Ext.DETH:
            qkey, src = _DETH.unpack_from(buf, x)
            p.deth_qkey, p.deth_src_qp = qkey, src & 0xFFFFFF
        elif e is Ext.FETH:
            (v,) = _I.unpack_from(buf, x)
            p.feth_rsvd, p.feth_sel, p.feth_plt = v >> 6, (v >> 4) & 3, v & 0xF
        x += size
    return x


class UnbuiltPacket(Packet):
    """The Packet `parse` would give for an Unbuilt's frame, made from its fields: BTH and
    extension headers, and the payload as it is. The frame's bytes are built only if something
    asks for them (`frame`, and the Ethernet, IP and UDP fields read from it)."""

    __slots__ = ("_u", "_frame")

    def __init__(self, u: Unbuilt) -> None:
        self._u = u
        self._frame: bytes | None = None
        info = OPCODE_TABLE[u.opcode]
        assert info is not None
        plen = len(u.payload)
        pad = -plen & 3
        self.info = info
        self.opcode = u.opcode
        self._f1 = (0x80 if u.solicited else 0) | 0x40 | pad << 4
        self._w1 = u.dqpn
        self.pkey = PKEY_DEFAULT
        self.dqpn = u.dqpn
        self.ackreq = u.ackreq
        self.psn = u.psn
        self.ipv6 = False
        self.bth_off = _UNBUILT_BTH
        self.payload_off = _ext_fields(self, info, u.ext, 0) + _UNBUILT_BTH + BTH_LEN
        self.payload_len = plen

    @property  # type: ignore[override]
    def frame(self) -> bytes:
        if self._frame is None:
            self._frame = self._u.build()
        return self._frame

    @property
    def icrc(self) -> int:  # type: ignore[override]
        (v,) = _ICRC.unpack_from(self.frame, len(self.frame) - ICRC_LEN)
        return v

    @property
    def payload(self) -> memoryview:
        return memoryview(self._u.payload)


def l3_of(frame: bytes, cache: bool = True) -> tuple[int, int, int, bool]:
    """Validate Ethernet, IP and UDP of a RoCEv2 frame: (end of the IP packet, BTH offset,
    ICRC state after the masked IP and UDP headers, IPv6?). Raises WireError. Without
    `cache` (the general path, nicsim.sim.paths) every check is made again."""
    # Whether a flow's Ethernet type + IP + UDP header bytes are valid, where the packet ends
    # and the ICRC's state after them are pure functions of those bytes, which repeat for
    # every packet of a flow: look them up before working them out.
    n = len(frame)
    if not cache:
        hit = _l3_slow(frame, n)
    else:
        hit = L3_CACHE.get(frame[12:42] if n > 14 and frame[14] == 0x45 else
                           frame[12:54] if frame[12:14] == _V1_TYPE else frame[12:62])
        if hit is None:
            hit = _l3_slow(frame, n)
            if len(L3_CACHE) > _FLOW_CACHE:
                L3_CACHE.clear()
            L3_CACHE[frame[12:hit[1]]] = hit
    if hit[0] > n:
        raise WireError(ParseError.BAD_IP_LENGTH, f"IP length says {hit[0]}, frame {n}")
    return hit


def icrc_ok(frame: bytes, b: int, end: int, prefix: int) -> bool:
    """Whether the frame's ICRC is right, given the state after its IP and UDP headers."""
    crc = crc32(memoryview(frame)[b + 5:end - ICRC_LEN],
              crc32(frame[b:b + 4] + b"\xff", prefix))
    return crc == _ICRC.unpack_from(frame, end - ICRC_LEN)[0]


L3_CACHE: dict[bytes, tuple[int, int, int, bool]] = {}
# Header work is remembered per flow (and frame length); a world of 10,000 QP pairs has
# 20,000 flows, and a cache that kept fewer would be cleared over and over. An entry is about
# 200 bytes.
_FLOW_CACHE = 1 << 17


def _l3_slow(frame: bytes, n: int) -> tuple[int, int, int, bool]:
    """Validate Ethernet, IP and UDP; returns (end of the IP packet, BTH offset, ICRC state
    after the masked IP and UDP headers, IPv6?)."""
    if n < ETH_HLEN:
        raise WireError(ParseError.TRUNCATED, f"{n} bytes, shorter than an Ethernet header")
    (etype,) = _ETH_TYPE.unpack_from(frame, 12)
    if etype == ETH_P_IPV4:
        if n < ETH_HLEN + IPV4_HLEN:
            raise WireError(ParseError.TRUNCATED, "IPv4 header")
        vihl, _tos, tot, _id, _frag, _ttl, proto, _csum, _sip, _dip = _IPV4.unpack_from(frame,
                                                                                         14)
        if vihl >> 4 != 4:
            raise WireError(ParseError.BAD_IP_VERSION, f"version {vihl >> 4} in an IPv4 frame")
        ihl = (vihl & 0xF) * 4
        if ihl < IPV4_HLEN or n < ETH_HLEN + ihl:
            raise WireError(ParseError.BAD_IP_HEADER, f"IHL {ihl} bytes")
        if _fold(sum(struct.unpack_from(f"!{ihl // 2}H", frame, 14))) != 0xFFFF:
            raise WireError(ParseError.BAD_IP_CHECKSUM, "IPv4 header checksum")
        if tot < ihl + UDP_HLEN or ETH_HLEN + tot > n:
            raise WireError(ParseError.BAD_IP_LENGTH, f"total length {tot}, frame {n}")
        if proto != 17:
            raise WireError(ParseError.NOT_UDP, f"IP protocol {proto}")
        l4 = ETH_HLEN + ihl
        end = ETH_HLEN + tot
        ipv6 = False
    elif etype == ETH_P_IPV6:
        if n < ETH_HLEN + IPV6_HLEN:
            raise WireError(ParseError.TRUNCATED, "IPv6 header")
        w0, plen, nxt, _hl = _IPV6_FIRST.unpack_from(frame, 14)
        if w0 >> 28 != 6:
            raise WireError(ParseError.BAD_IP_VERSION, f"version {w0 >> 28} in an IPv6 frame")
        if nxt != 17:
            raise WireError(ParseError.NOT_UDP, f"IPv6 next header {nxt}")
        l4 = ETH_HLEN + IPV6_HLEN
        if plen < UDP_HLEN or l4 + plen > n:
            raise WireError(ParseError.BAD_IP_LENGTH, f"payload length {plen}, frame {n}")
        end = l4 + plen
        ipv6 = True
    elif etype == ETH_P_ROCE_V1:
        # A GRH (IBA 8.3): IPVer 6, next header BTH, the payload length from BTH to the ICRC.
        if n < ETH_HLEN + IPV6_HLEN:
            raise WireError(ParseError.TRUNCATED, "GRH")
        w0, plen, nxt, _hl = _IPV6_FIRST.unpack_from(frame, 14)
        if w0 >> 28 != 6:
            raise WireError(ParseError.BAD_IP_VERSION, f"IPVer {w0 >> 28} in a GRH")
        if nxt != GRH_NXT_BTH:
            raise WireError(ParseError.NOT_ROCE, f"GRH next header 0x{nxt:02x}")
        b = ETH_HLEN + IPV6_HLEN
        if b + plen > n:
            raise WireError(ParseError.BAD_IP_LENGTH, f"GRH payload length {plen}, frame {n}")
        return b + plen, b, _prefix_crc(frame, ETH_HLEN, b), True
    else:
        raise WireError(ParseError.NOT_IP, f"EtherType 0x{etype:04x}")
    _sport, dport, ulen, _ucsum = _UDP.unpack_from(frame, l4)
    if dport != ROCE_UDP_PORT:
        raise WireError(ParseError.NOT_ROCE, f"UDP port {dport}")
    if ulen != end - l4:
        raise WireError(ParseError.BAD_UDP_LENGTH, f"UDP length {ulen}, IP says {end - l4}")
    b = l4 + UDP_HLEN
    return end, b, _prefix_crc(frame, ETH_HLEN, b), ipv6


_PREFIX: dict[bytes, int] = {}


def _prefix_crc(frame: bytes, l3: int, b: int) -> int:
    """The ICRC state after the 8 bytes of ones and the masked IP and UDP headers
    frame[l3:b] (RoCE v1: the masked GRH); remembered per header bytes, like _check_v4."""
    key = frame[l3:b]
    crc = _PREFIX.get(key)
    if crc is not None:
        return crc
    if frame[l3] >> 4 == 6:
        crc = crc32(b"\x6f\xff\xff\xff" + key[4:7] + b"\xff" + key[8:40], _CRC_ONES8)
        if frame[12:14] != _V1_TYPE:  # (RoCE v1: a GRH, no UDP header)
            crc = crc32(key[-8:-2] + b"\xff\xff", crc)
    else:
        n = (frame[l3] & 0xF) * 4
        ip = key[0:1] + b"\xff" + key[2:8] + b"\xff" + key[9:10] + b"\xff\xff" + key[12:n]
        crc = crc32(key[-8:-2] + b"\xff\xff", crc32(ip, _CRC_ONES8))
    if len(_PREFIX) > _FLOW_CACHE:
        _PREFIX.clear()
    _PREFIX[key] = crc
    return crc


def compute_icrc(frame: bytes, l3_off: int, end: int) -> int:
    """The ICRC of the frame's IP packet frame[l3_off:end] (the last 4 bytes are the ICRC)."""
    if frame[12:14] == _V1_TYPE:
        b = l3_off + IPV6_HLEN
    elif frame[l3_off] >> 4 == 6:
        b = l3_off + IPV6_HLEN + UDP_HLEN
    else:
        b = l3_off + (frame[l3_off] & 0xF) * 4 + UDP_HLEN
    crc = crc32(frame[b:b + 4] + b"\xff", _prefix_crc(frame, l3_off, b))
    return crc32(memoryview(frame)[b + 5:end - ICRC_LEN], crc)


def frame_end(frame: bytes) -> int:
    """Offset just past the IP packet (before any Ethernet padding); assumes a parsed frame."""
    if frame[ETH_HLEN] >> 4 == 6:  # IPv6, or a RoCE v1 GRH: the same payload length field
        return ETH_HLEN + IPV6_HLEN + struct.unpack_from("!H", frame, ETH_HLEN + 4)[0]
    return ETH_HLEN + struct.unpack_from("!H", frame, ETH_HLEN + 2)[0]
