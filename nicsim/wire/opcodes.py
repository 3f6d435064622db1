"""The BTH opcode table: one row per opcode, naming the extension headers that follow BTH.

IBA Vol. 1 section 9.2 (table 38, "OpCode field") defines the opcodes and section 9.3
(tables 39-41) which extension headers each carries; RoCEv2 Annex A17.9.3 adds CNP (0x81).
Everything that builds, parses or names packets reads this table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, IntEnum


class Transport(IntEnum):
    """The top three bits of the opcode (IBA 9.2, table 38)."""

    RC = 0x00
    UC = 0x20
    RD = 0x40
    UD = 0x60
    CNP = 0x80


class Ext(Enum):
    """Extension headers that may follow BTH (IBA 9.3); the value is (order, size in bytes).

    The order is the order they appear in on the wire when several follow one BTH.
    """

    RETH = (0, 16)  # virtual address 8, R_Key 4, DMA length 4
    AETH = (1, 4)  # syndrome 1, MSN 3
    ATOMIC_ETH = (2, 28)  # virtual address 8, R_Key 4, swap/add 8, compare 8
    ATOMIC_ACK_ETH = (3, 8)  # original remote data 8
    DETH = (4, 8)  # Q_Key 4, reserved 1, source QP 3
    IMMDT = (5, 4)
    IETH = (6, 4)  # R_Key to invalidate
    CNP_PAD = (7, 16)  # reserved bytes of a CNP (Annex A17.9.3)
    # FLUSH extended transport header (IBA 1.5 Memory Placement Extensions annex): reserved
    # 26 bits, selectivity level 2, placement type 4; it comes before the RETH.
    FETH = (-1, 4)

    @property
    def size(self) -> int:
        return self.value[1]


class Kind(Enum):
    """What a packet does, independent of transport and position."""

    SEND = "SEND"
    WRITE = "WRITE"
    READ_REQ = "READ_REQ"
    READ_RESP = "READ_RESP"
    ACK = "ACK"
    ATOMIC_ACK = "ATOMIC_ACK"
    CMP_SWAP = "CMP_SWAP"
    FETCH_ADD = "FETCH_ADD"
    CNP = "CNP"
    FLUSH = "FLUSH"  # make earlier writes visible / persistent (Memory Placement annex)
    ATOMIC_WRITE = "ATOMIC_WRITE"  # 8 bytes written in one access (Memory Placement annex)


class Pos(Enum):
    """Position of a packet within its message."""

    FIRST = "FIRST"
    MIDDLE = "MIDDLE"
    LAST = "LAST"
    ONLY = "ONLY"


class Opcode(IntEnum):
    RC_SEND_FIRST = 0x00
    RC_SEND_MIDDLE = 0x01
    RC_SEND_LAST = 0x02
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03
    RC_SEND_ONLY = 0x04
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05
    RC_RDMA_WRITE_FIRST = 0x06
    RC_RDMA_WRITE_MIDDLE = 0x07
    RC_RDMA_WRITE_LAST = 0x08
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09
    RC_RDMA_WRITE_ONLY = 0x0A
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B
    RC_RDMA_READ_REQUEST = 0x0C
    RC_RDMA_READ_RESPONSE_FIRST = 0x0D
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0E
    RC_RDMA_READ_RESPONSE_LAST = 0x0F
    RC_RDMA_READ_RESPONSE_ONLY = 0x10
    RC_ACKNOWLEDGE = 0x11
    RC_ATOMIC_ACKNOWLEDGE = 0x12
    RC_COMPARE_SWAP = 0x13
    RC_FETCH_ADD = 0x14
    RC_SEND_LAST_WITH_INVALIDATE = 0x16
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17
    RC_FLUSH = 0x1C
    RC_ATOMIC_WRITE = 0x1D
    UC_SEND_FIRST = 0x20
    UC_SEND_MIDDLE = 0x21
    UC_SEND_LAST = 0x22
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23
    UC_SEND_ONLY = 0x24
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25
    UC_RDMA_WRITE_FIRST = 0x26
    UC_RDMA_WRITE_MIDDLE = 0x27
    UC_RDMA_WRITE_LAST = 0x28
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29
    UC_RDMA_WRITE_ONLY = 0x2A
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2B
    UD_SEND_ONLY = 0x64
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65
    CNP = 0x81


@dataclass(frozen=True, slots=True)
class OpInfo:
    opcode: Opcode
    transport: Transport
    kind: Kind
    pos: Pos
    exts: tuple[Ext, ...]
    has_payload: bool
    imm: bool = False
    inv: bool = False
    # Derived once, read per packet on the hot path.
    ext_len: int = field(init=False)
    is_first: bool = field(init=False)
    is_last: bool = field(init=False)
    is_request: bool = field(init=False)
    ext_layout: tuple[tuple[Ext, int], ...] = field(init=False)  # (header, size) in order

    def __post_init__(self) -> None:
        object.__setattr__(self, "ext_len", sum(e.size for e in self.exts))
        object.__setattr__(self, "ext_layout", tuple((e, e.size) for e in self.exts))
        object.__setattr__(self, "is_first", self.pos in (Pos.FIRST, Pos.ONLY))
        object.__setattr__(self, "is_last", self.pos in (Pos.LAST, Pos.ONLY))
        object.__setattr__(self, "is_request", self.kind in (
            Kind.SEND, Kind.WRITE, Kind.READ_REQ, Kind.CMP_SWAP, Kind.FETCH_ADD, Kind.FLUSH,
            Kind.ATOMIC_WRITE))


def _rows() -> list[OpInfo]:
    R, A, AT, AA, I, IE, D = (Ext.RETH, Ext.AETH, Ext.ATOMIC_ETH, Ext.ATOMIC_ACK_ETH,
                              Ext.IMMDT, Ext.IETH, Ext.DETH)
    F, M, L, O = Pos.FIRST, Pos.MIDDLE, Pos.LAST, Pos.ONLY
    rows: list[OpInfo] = []
    # SEND and RDMA WRITE are shared by RC and UC with the same low five bits (IBA table 38).
    for tr in (Transport.RC, Transport.UC):
        p = tr.name + "_"
        rows += [
            OpInfo(Opcode[p + "SEND_FIRST"], tr, Kind.SEND, F, (), True),
            OpInfo(Opcode[p + "SEND_MIDDLE"], tr, Kind.SEND, M, (), True),
            OpInfo(Opcode[p + "SEND_LAST"], tr, Kind.SEND, L, (), True),
            OpInfo(Opcode[p + "SEND_LAST_WITH_IMMEDIATE"], tr, Kind.SEND, L, (I,), True, imm=True),
            OpInfo(Opcode[p + "SEND_ONLY"], tr, Kind.SEND, O, (), True),
            OpInfo(Opcode[p + "SEND_ONLY_WITH_IMMEDIATE"], tr, Kind.SEND, O, (I,), True, imm=True),
            OpInfo(Opcode[p + "RDMA_WRITE_FIRST"], tr, Kind.WRITE, F, (R,), True),
            OpInfo(Opcode[p + "RDMA_WRITE_MIDDLE"], tr, Kind.WRITE, M, (), True),
            OpInfo(Opcode[p + "RDMA_WRITE_LAST"], tr, Kind.WRITE, L, (), True),
            OpInfo(Opcode[p + "RDMA_WRITE_LAST_WITH_IMMEDIATE"], tr, Kind.WRITE, L, (I,), True,
                   imm=True),
            OpInfo(Opcode[p + "RDMA_WRITE_ONLY"], tr, Kind.WRITE, O, (R,), True),
            OpInfo(Opcode[p + "RDMA_WRITE_ONLY_WITH_IMMEDIATE"], tr, Kind.WRITE, O, (R, I), True,
                   imm=True),
        ]
    rc = Transport.RC
    rows += [
        OpInfo(Opcode.RC_RDMA_READ_REQUEST, rc, Kind.READ_REQ, O, (R,), False),
        OpInfo(Opcode.RC_RDMA_READ_RESPONSE_FIRST, rc, Kind.READ_RESP, F, (A,), True),
        OpInfo(Opcode.RC_RDMA_READ_RESPONSE_MIDDLE, rc, Kind.READ_RESP, M, (), True),
        OpInfo(Opcode.RC_RDMA_READ_RESPONSE_LAST, rc, Kind.READ_RESP, L, (A,), True),
        OpInfo(Opcode.RC_RDMA_READ_RESPONSE_ONLY, rc, Kind.READ_RESP, O, (A,), True),
        OpInfo(Opcode.RC_ACKNOWLEDGE, rc, Kind.ACK, O, (A,), False),
        OpInfo(Opcode.RC_ATOMIC_ACKNOWLEDGE, rc, Kind.ATOMIC_ACK, O, (A, AA), False),
        OpInfo(Opcode.RC_COMPARE_SWAP, rc, Kind.CMP_SWAP, O, (AT,), False),
        OpInfo(Opcode.RC_FETCH_ADD, rc, Kind.FETCH_ADD, O, (AT,), False),
        OpInfo(Opcode.RC_SEND_LAST_WITH_INVALIDATE, rc, Kind.SEND, L, (IE,), True, inv=True),
        OpInfo(Opcode.RC_SEND_ONLY_WITH_INVALIDATE, rc, Kind.SEND, O, (IE,), True, inv=True),
        # Answered by an RDMA READ RESPONSE ONLY without payload (as rxe answers them).
        OpInfo(Opcode.RC_FLUSH, rc, Kind.FLUSH, O, (Ext.FETH, R), False),
        OpInfo(Opcode.RC_ATOMIC_WRITE, rc, Kind.ATOMIC_WRITE, O, (R,), True),
        OpInfo(Opcode.UD_SEND_ONLY, Transport.UD, Kind.SEND, O, (D,), True),
        OpInfo(Opcode.UD_SEND_ONLY_WITH_IMMEDIATE, Transport.UD, Kind.SEND, O, (D, I), True,
               imm=True),
        OpInfo(Opcode.CNP, Transport.CNP, Kind.CNP, O, (Ext.CNP_PAD,), False),
    ]
    return rows


OPCODES: dict[int, OpInfo] = {row.opcode.value: row for row in _rows()}
assert len(OPCODES) == len(Opcode), "every Opcode needs exactly one table row"

# Indexed by the opcode byte, None for reserved values: the parser's hot path uses this.
OPCODE_TABLE: tuple[OpInfo | None, ...] = tuple(OPCODES.get(i) for i in range(256))


def message_opcodes(transport: Transport, kind: Kind, imm: bool = False,
                    inv: bool = False) -> dict[Pos, Opcode]:
    """The opcodes a requester uses for a message of `kind` on `transport`, by position.

    Positions that carry no immediate/invalidate (FIRST, MIDDLE) use the plain opcodes.
    """
    out: dict[Pos, Opcode] = {}
    for row in OPCODES.values():
        if row.transport is not transport or row.kind is not kind:
            continue
        if row.pos in (Pos.FIRST, Pos.MIDDLE):
            if not row.imm and not row.inv:
                out[row.pos] = row.opcode
        elif row.imm == imm and row.inv == inv:
            out[row.pos] = row.opcode
    return out
