"""Communication-management MADs: the common MAD header (IBA 13.4.3) and the CM messages of
IBA chapter 12.6 (REQ, REP, RTU, REJ, DREQ, DREP, SIDR_REQ, SIDR_REP), byte for byte, and the
header rdma_cm puts at the start of a REQ's or SIDR_REQ's private data (its "IP-based"
addressing: Annex A11 / the kernel's struct cma_hdr).

Field positions are the spec's: offsets count from the start of the MAD's data (after the
24-byte header); a bit field starts at the most significant bit of its byte (IBA's bit 0).
Every MAD is 256 bytes, big-endian.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field
from enum import IntEnum

from nicsim.hwif import GSI_QPN  # noqa: F401 (QP1, named here for the CM and its users)

MAD_SIZE = 256
HDR_SIZE = 24
DATA_SIZE = MAD_SIZE - HDR_SIZE
BASE_VERSION = 1
MGMT_CLASS_CM = 0x07  # IBA 13.4.4: Communication Management
CM_CLASS_VERSION = 2
GSI_QKEY = 0x80010000  # the well-known Q_Key of QP1 (IBA 13.5.1)
PERMISSIVE_LID = 0xFFFF  # RoCE has no LIDs: the path's LID fields carry the permissive LID


class Method(IntEnum):
    SEND = 0x03  # every CM message is a Send (IBA 12.11)


class AttrId(IntEnum):
    """CM attribute IDs (IBA 16.7.2, Table 96)."""

    REQ = 0x0010
    MRA = 0x0011
    REJ = 0x0012
    REP = 0x0013
    RTU = 0x0014
    DREQ = 0x0015
    DREP = 0x0016
    SIDR_REQ = 0x0017
    SIDR_REP = 0x0018


class RejReason(IntEnum):
    """REJ reasons (IBA 12.6.7.2, Table 109) that this CM sends."""

    TIMEOUT = 1
    INVALID_SERVICE_ID = 8
    STALE_CONN = 10
    CONSUMER_DEFINED = 28


class SidrStatus(IntEnum):
    """SIDR_REP status (IBA 12.11.2, Table 120)."""

    VALID = 0
    SERVICE_ID_NOT_SUPPORTED = 1
    REJECTED = 2


class Transport(IntEnum):
    """REQ's Transport Service Type (IBA 12.6.5)."""

    RC = 0
    UC = 1


_TRANSPORTS = frozenset(int(t) for t in Transport)
_MTU_CODES = (1, 5)  # IBA 12.6.5 / ib_mtu: 1 (256 bytes) .. 5 (4096 bytes)


class MadError(ValueError):
    """A MAD that is not a well-formed CM message."""


REQ_PRIVATE = 92
REP_PRIVATE = 196
REJ_PRIVATE = 148
RTU_PRIVATE = 224
DREQ_PRIVATE = 220
DREP_PRIVATE = 224
SIDR_REQ_PRIVATE = 216
SIDR_REP_PRIVATE = 136


def header(attr: AttrId, tid: int) -> bytes:
    """The common MAD header of a CM Send (IBA 13.4.3)."""
    return struct.pack(">BBBBHHQHHI", BASE_VERSION, MGMT_CLASS_CM, CM_CLASS_VERSION,
                       Method.SEND, 0, 0, tid, attr, 0, 0)


def _pad(data: bytes, size: int) -> bytes:
    if len(data) > size:
        raise MadError(f"private data of {len(data)} bytes (at most {size})")
    return data + bytes(size - len(data))


@dataclass
class Req:
    """REQ (IBA 12.6.5, Table 106)."""

    local_comm_id: int
    service_id: int
    local_ca_guid: int
    local_qpn: int
    starting_psn: int
    local_gid: bytes
    remote_gid: bytes
    responder_resources: int = 0
    initiator_depth: int = 0
    local_qkey: int = 0
    transport: Transport = Transport.RC
    remote_cm_timeout: int = 20
    local_cm_timeout: int = 20
    retry_count: int = 7
    rnr_retry_count: int = 7
    max_cm_retries: int = 15
    srq: bool = False
    pkey: int = 0xFFFF
    path_mtu: int = 5  # IB_MTU_4096
    flow_label: int = 0
    packet_rate: int = 0
    traffic_class: int = 0
    hop_limit: int = 64
    sl: int = 0
    local_ack_timeout: int = 14
    private_data: bytes = b""

    def pack(self) -> bytes:
        d = struct.pack(
            ">I4xQQ4xIIIIIHBB",
            self.local_comm_id, self.service_id, self.local_ca_guid, self.local_qkey,
            self.local_qpn << 8 | self.responder_resources,
            self.initiator_depth,  # local EECN 0
            self.remote_cm_timeout << 3 | self.transport << 1,  # remote EECN 0, no E2E FC
            self.starting_psn << 8 | self.local_cm_timeout << 3 | self.retry_count,
            self.pkey,
            self.path_mtu << 4 | self.rnr_retry_count,
            self.max_cm_retries << 4 | int(self.srq) << 3)
        d += struct.pack(">HH", PERMISSIVE_LID, PERMISSIVE_LID) + self.local_gid + \
            self.remote_gid
        d += struct.pack(">IBBBB", self.flow_label << 12 | self.packet_rate, self.traffic_class,
                         self.hop_limit, self.sl << 4 | int(self.hop_limit <= 1) << 3,
                         self.local_ack_timeout << 3)
        d += bytes(44)  # no alternate path
        return d + _pad(self.private_data, REQ_PRIVATE) + bytes(DATA_SIZE - 140 - REQ_PRIVATE)

    @classmethod
    def unpack(cls, d: bytes) -> Req:
        (comm, sid, guid, qkey, w32, w36, w40, w44, pkey, b50, b51) = struct.unpack_from(
            ">I4xQQ4xIIIIIHBB", d)
        fl, tc, hop, b94, b95 = struct.unpack_from(">IBBBB", d, 88)
        transport = (w40 >> 1) & 3
        if transport not in _TRANSPORTS:
            # 2 is RD, 3 reserved (IBA 12.6.5): not a connection this CM makes.
            raise MadError(f"REQ transport service type {transport} (RD or reserved)")
        if not _MTU_CODES[0] <= b50 >> 4 <= _MTU_CODES[1]:
            raise MadError(f"REQ path MTU code {b50 >> 4} (1..5: 256..4096 bytes)")
        return cls(comm, sid, guid, w32 >> 8, w44 >> 8, d[56:72], d[72:88],
                   responder_resources=w32 & 0xFF, initiator_depth=w36 & 0xFF,
                   local_qkey=qkey, transport=Transport(transport),
                   remote_cm_timeout=(w40 >> 3) & 0x1F, local_cm_timeout=(w44 >> 3) & 0x1F,
                   retry_count=w44 & 7, rnr_retry_count=b50 & 7, max_cm_retries=b51 >> 4,
                   srq=bool(b51 & 8), pkey=pkey, path_mtu=b50 >> 4, flow_label=fl >> 12,
                   packet_rate=fl & 0x3F, traffic_class=tc, hop_limit=hop, sl=b94 >> 4,
                   local_ack_timeout=b95 >> 3, private_data=bytes(d[140:140 + REQ_PRIVATE]))


@dataclass
class Rep:
    """REP (IBA 12.6.8, Table 110)."""

    local_comm_id: int
    remote_comm_id: int
    local_qpn: int
    starting_psn: int
    local_ca_guid: int
    responder_resources: int = 0
    initiator_depth: int = 0
    local_qkey: int = 0
    target_ack_delay: int = 15
    failover_accepted: int = 0
    rnr_retry_count: int = 7
    srq: bool = False
    private_data: bytes = b""

    def pack(self) -> bytes:
        d = struct.pack(">IIIIIIBBBBQ", self.local_comm_id, self.remote_comm_id,
                        self.local_qkey, self.local_qpn << 8, 0, self.starting_psn << 8,
                        self.responder_resources, self.initiator_depth,
                        self.target_ack_delay << 3 | self.failover_accepted << 1,
                        self.rnr_retry_count << 5 | int(self.srq) << 4, self.local_ca_guid)
        return d + _pad(self.private_data, REP_PRIVATE)

    @classmethod
    def unpack(cls, d: bytes) -> Rep:
        (lc, rc, qkey, w12, _, w20, rr, idp, b26, b27, guid) = struct.unpack_from(
            ">IIIIIIBBBBQ", d)
        return cls(lc, rc, w12 >> 8, w20 >> 8, guid, rr, idp, qkey, b26 >> 3, (b26 >> 1) & 3,
                   b27 >> 5, bool(b27 & 0x10), bytes(d[36:36 + REP_PRIVATE]))


@dataclass
class Rej:
    """REJ (IBA 12.6.7, Table 108). message_rejected: 0 REQ, 1 REP, 2 other."""

    local_comm_id: int
    remote_comm_id: int
    reason: int
    message_rejected: int = 0
    ari: bytes = b""
    private_data: bytes = b""

    def pack(self) -> bytes:
        d = struct.pack(">IIBBH", self.local_comm_id, self.remote_comm_id,
                        self.message_rejected << 6, len(self.ari) << 1, self.reason)
        return d + _pad(self.ari, 72) + _pad(self.private_data, REJ_PRIVATE)

    @classmethod
    def unpack(cls, d: bytes) -> Rej:
        lc, rc, b8, b9, reason = struct.unpack_from(">IIBBH", d)
        n = min(b9 >> 1, 72)
        return cls(lc, rc, reason, b8 >> 6, bytes(d[12:12 + n]), bytes(d[84:84 + REJ_PRIVATE]))


@dataclass
class Rtu:
    """RTU (IBA 12.6.9, Table 111); DREP has the same layout (Table 113)."""

    local_comm_id: int
    remote_comm_id: int
    private_data: bytes = b""

    def pack(self) -> bytes:
        return struct.pack(">II", self.local_comm_id, self.remote_comm_id) + \
            _pad(self.private_data, RTU_PRIVATE)

    @classmethod
    def unpack(cls, d: bytes) -> Rtu:
        lc, rc = struct.unpack_from(">II", d)
        return cls(lc, rc, bytes(d[8:8 + RTU_PRIVATE]))


Drep = Rtu


@dataclass
class Dreq:
    """DREQ (IBA 12.6.10, Table 112)."""

    local_comm_id: int
    remote_comm_id: int
    remote_qpn: int
    private_data: bytes = b""

    def pack(self) -> bytes:
        return struct.pack(">III", self.local_comm_id, self.remote_comm_id,
                           self.remote_qpn << 8) + _pad(self.private_data, DREQ_PRIVATE)

    @classmethod
    def unpack(cls, d: bytes) -> Dreq:
        lc, rc, w8 = struct.unpack_from(">III", d)
        return cls(lc, rc, w8 >> 8, bytes(d[12:12 + DREQ_PRIVATE]))


@dataclass
class SidrReq:
    """SIDR_REQ (IBA 12.11.1, Table 119)."""

    request_id: int
    service_id: int
    pkey: int = 0xFFFF
    private_data: bytes = b""

    def pack(self) -> bytes:
        return struct.pack(">IH2xQ", self.request_id, self.pkey, self.service_id) + \
            _pad(self.private_data, SIDR_REQ_PRIVATE)

    @classmethod
    def unpack(cls, d: bytes) -> SidrReq:
        rid, pkey, sid = struct.unpack_from(">IH2xQ", d)
        return cls(rid, sid, pkey, bytes(d[16:16 + SIDR_REQ_PRIVATE]))


@dataclass
class SidrRep:
    """SIDR_REP (IBA 12.11.2, Table 120)."""

    request_id: int
    status: int
    qpn: int
    service_id: int
    qkey: int
    private_data: bytes = b""

    def pack(self) -> bytes:
        d = struct.pack(">IBBHIQI", self.request_id, self.status, 0, 0, self.qpn << 8,
                        self.service_id, self.qkey)
        return d + bytes(72) + _pad(self.private_data, SIDR_REP_PRIVATE)

    @classmethod
    def unpack(cls, d: bytes) -> SidrRep:
        rid, st, _, _, w8, sid, qkey = struct.unpack_from(">IBBHIQI", d)
        return cls(rid, st, w8 >> 8, sid, qkey, bytes(d[96:96 + SIDR_REP_PRIVATE]))


Message = Req | Rep | Rej | Rtu | Dreq | SidrReq | SidrRep
_CODECS: dict[AttrId, type] = {AttrId.REQ: Req, AttrId.REP: Rep, AttrId.REJ: Rej,
                               AttrId.RTU: Rtu, AttrId.DREQ: Dreq, AttrId.DREP: Rtu,
                               AttrId.SIDR_REQ: SidrReq, AttrId.SIDR_REP: SidrRep}


@dataclass
class Mad:
    attr: AttrId
    tid: int
    msg: Message = field(repr=True)

    def pack(self) -> bytes:
        out = header(self.attr, self.tid) + self.msg.pack()
        assert len(out) == MAD_SIZE
        return out


def parse(raw: bytes) -> Mad:
    """A received CM MAD; MadError for anything else (wrong size, class, version, method or
    an attribute this CM does not handle)."""
    if len(raw) < MAD_SIZE:
        raise MadError(f"{len(raw)} bytes (a MAD is {MAD_SIZE})")
    base, mclass, cver, method, _, _, tid, attr, _, _ = struct.unpack_from(">BBBBHHQHHI", raw)
    if base != BASE_VERSION or mclass != MGMT_CLASS_CM or cver != CM_CLASS_VERSION:
        raise MadError(f"base version {base}, class 0x{mclass:02x} version {cver}: not a "
                       "CM MAD this CM speaks")
    if method != Method.SEND:
        raise MadError(f"method 0x{method:02x} (CM messages are Sends)")
    try:
        a = AttrId(attr)
        codec = _CODECS[a]
    except (ValueError, KeyError):
        raise MadError(f"attribute 0x{attr:04x} is not handled") from None
    return Mad(a, tid, codec.unpack(bytes(raw[HDR_SIZE:MAD_SIZE])))


# -- rdma_cm's private data header (the kernel's cma_hdr) --------------------------------------

CMA_VERSION = 0x00
CMA_HDR_SIZE = 36


class PortSpace(IntEnum):
    """rdma_cm port spaces (rdma_port_space); the Service ID is 0x0000_0000_PPPP_pppp with
    PPPP the space and pppp the port (RDMA_IB_IP_PS_MASK)."""

    TCP = 0x0106
    UDP = 0x0111
    IB = 0x013F


def service_id(ps: int, port: int) -> int:
    return (ps << 16) | port


def split_service_id(sid: int) -> tuple[int, int]:
    return (sid >> 16) & 0xFFFF, sid & 0xFFFF


def _ip16(ip: str) -> bytes:
    a = ipaddress.ip_address(ip)
    return bytes(12) + a.packed if a.version == 4 else a.packed


def cma_hdr(src_ip: str, dst_ip: str, src_port: int) -> bytes:
    """The 36 bytes rdma_cm puts first in a REQ's / SIDR_REQ's private data: version, IP
    version (high nibble), the active side's port, its address and the destination's (an
    IPv4 address in the last 4 bytes of its 16)."""
    version = ipaddress.ip_address(src_ip).version
    return struct.pack(">BBH", CMA_VERSION, version << 4, src_port) + _ip16(src_ip) + \
        _ip16(dst_ip)


def parse_cma_hdr(data: bytes) -> tuple[str, str, int]:
    """(source IP, destination IP, source port) of a cma_hdr; MadError if it is not one."""
    if len(data) < CMA_HDR_SIZE:
        raise MadError("private data too short for the rdma_cm header")
    ver, ipver, port = struct.unpack_from(">BBH", data)
    if ver != CMA_VERSION or ipver >> 4 not in (4, 6):
        raise MadError(f"rdma_cm header version {ver}, IP version {ipver >> 4}")

    def ip(b: bytes) -> str:
        return str(ipaddress.IPv4Address(b[12:])) if ipver >> 4 == 4 else \
            str(ipaddress.IPv6Address(b))

    return ip(data[4:20]), ip(data[20:36]), port
