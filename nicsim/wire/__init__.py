"""RoCEv2 wire format: the opcode table, frame building and parsing, ICRC."""

from nicsim.wire.opcodes import (
    OPCODE_TABLE,
    OPCODES,
    Ext,
    Kind,
    Opcode,
    OpInfo,
    Pos,
    Transport,
    message_opcodes,
)
from nicsim.wire.packet import (
    CNP_PAD,
    EXT_FIELDS,
    ROCE_UDP_PORT,
    Ecn,
    FrameBuilder,
    Packet,
    ParseError,
    Path,
    WireError,
    aeth,
    atomic_ack_eth,
    atomic_eth,
    compute_icrc,
    deth,
    ieth,
    immdt,
    mac_bytes,
    mac_str,
    pack_ext,
    packet_overhead,
    parse,
    reth,
    roce_udp_sport,
    wire_bytes,
)

__all__ = [
    "CNP_PAD", "EXT_FIELDS", "OPCODES", "OPCODE_TABLE", "ROCE_UDP_PORT", "Ecn", "Ext",
    "FrameBuilder", "Kind", "OpInfo", "Opcode", "Packet", "ParseError", "Path", "Pos", "Transport",
    "WireError", "aeth", "atomic_ack_eth", "atomic_eth", "compute_icrc", "deth", "ieth", "immdt",
    "mac_bytes", "mac_str", "message_opcodes", "pack_ext", "packet_overhead", "parse", "reth",
    "roce_udp_sport", "wire_bytes",
]
