"""The protocol rules a peer's packets can break, as the NIC's receive path decides them.

Wherever the receive path refuses or ignores a packet because the sender broke a rule of the
wire protocol (parse, header validation, the responder's PSN and opcode-sequence checks, the
completer's response checks), it emits `Stage.RX_VIOLATION` (nicsim.sim.tracer) with one of
these rules, the QP, and what it expected against what it got. The NIC's reaction (drop, NAK,
count) is unchanged by it: the event only says why, for an observer such as the strict
ModelPeer (nicsim.cosim.strict), which turns the NIC's own decision into a failing test.

What is not here: conditions a correct peer can cause, which the NIC answers per the
specification and which are the application's business (an R_Key or access right refused, a
receive queue with no WQE, a SEND longer than the receive buffers, a misaligned atomic's
address, a duplicate the responder answers again, a packet to a QP in ERR).
"""

from __future__ import annotations

from enum import StrEnum

from nicsim.wire import ParseError


class Rule(StrEnum):
    """A rule of the wire protocol (the clause each one is from: `CLAUSE`)."""

    BAD_ICRC = "bad_icrc"  # the ICRC does not match the packet
    MALFORMED = "malformed"  # Ethernet, IP or UDP headers wrong (length, checksum, version)
    UNKNOWN_OPCODE = "unknown_opcode"  # a reserved BTH opcode
    BAD_TVER = "bad_tver"  # BTH transport header version not 0
    BAD_PAD = "bad_pad"  # payload + pad not whole 4-byte words, or pad where none may be
    HEADER_LENGTH = "header_length"  # shorter than the opcode's headers, or payload where none
    WRONG_ADDRESS = "wrong_address"  # not to this port's MAC, or not on the QP's IP path
    UNKNOWN_QP = "unknown_qp"  # no such destination QP
    TRANSPORT_MISMATCH = "transport_mismatch"  # an opcode of another transport than the QP's
    BAD_PKEY = "bad_pkey"  # P_Key not the QP's
    BAD_QKEY = "bad_qkey"  # a datagram's Q_Key not the QP's
    QP_NOT_READY = "qp_not_ready"  # a request to a QP not yet in RTR (RESET or INIT)
    PSN_SEQUENCE = "psn_sequence"  # a request PSN ahead of the expected one (a gap)
    INVALID_DUPLICATE = "invalid_duplicate"  # a duplicate READ/atomic the responder never ran
    OPCODE_SEQUENCE = "opcode_sequence"  # an opcode that does not fit the message in progress
    LENGTH = "length"  # payload length against the MTU, the pad or the RETH's DMA length
    TOO_MANY_READS = "too_many_reads"  # more READs/atomics than max_dest_rd_atomic
    GHOST_RESPONSE = "ghost_response"  # an ACK, NAK or response to a PSN never sent
    RESPONSE_SEQUENCE = "response_sequence"  # a READ response PSN ahead of the expected one
    BAD_RESPONSE = "bad_response"  # a response's length, pad or opcode does not fit its request
    BAD_AETH = "bad_aeth"  # a reserved AETH syndrome class


# Where each rule is written down (IBA Vol. 1 release 1.x; RoCEv2 is its Annex A17).
CLAUSE: dict[Rule, str] = {
    Rule.BAD_ICRC: "IBA 7.8.1, Annex A17.4.1 (ICRC)",
    Rule.MALFORMED: "Annex A17.4 (RoCEv2 encapsulation: Ethernet, IP, UDP)",
    Rule.UNKNOWN_OPCODE: "IBA 9.2, table 38 (reserved opcode)",
    Rule.BAD_TVER: "IBA 9.2 (BTH TVer), 9.6 (header validation)",
    Rule.BAD_PAD: "IBA 9.2 (PadCnt: payload and pad fill whole 4-byte words)",
    Rule.HEADER_LENGTH: "IBA 9.3 (the extension headers each opcode carries)",
    Rule.WRONG_ADDRESS: "IBA 9.6 (header validation), Annex A17.4",
    Rule.UNKNOWN_QP: "IBA 9.6 (header validation: destination QP)",
    Rule.TRANSPORT_MISMATCH: "IBA 9.2, 9.6 (the opcode's transport is the QP's)",
    Rule.BAD_PKEY: "IBA 9.6, 10.9 (P_Key)",
    Rule.BAD_QKEY: "IBA 10.2.5, C10-15 (Q_Key)",
    Rule.QP_NOT_READY: "IBA 10.3.1 (a QP in RESET or INIT drops what it receives)",
    Rule.PSN_SEQUENCE: "IBA 9.7.5.1, 9.7.5.2.2 (PSN sequence error)",
    Rule.INVALID_DUPLICATE: "IBA 9.7.5.1.1 (duplicate requests)",
    Rule.OPCODE_SEQUENCE: "IBA 9.7.4.1.3, C9-29 (opcode sequence)",
    Rule.LENGTH: "C9-92 (payload length: MTU, pad, DMA length)",
    Rule.TOO_MANY_READS: "IBA 9.7.7.1, C9-129 (max_dest_rd_atomic)",
    Rule.GHOST_RESPONSE: "IBA 9.7.6 (a response answers a PSN the requester sent)",
    Rule.RESPONSE_SEQUENCE: "IBA 9.7.6.1.3 (READ responses in PSN order)",
    Rule.BAD_RESPONSE: "IBA 9.7.4.1.4, 9.9.3.2 (READ response length and opcodes)",
    Rule.BAD_AETH: "IBA 9.7.5.1, table 43 (AETH syndrome)",
}

# The parser's reasons (nicsim.wire.ParseError) as rules. A frame that is not IP, not UDP or
# not to the RoCEv2 port is other traffic, not a broken RoCE packet: absent here, no rule.
PARSE_RULE: dict[ParseError, Rule] = {
    ParseError.TRUNCATED: Rule.MALFORMED,
    ParseError.BAD_IP_VERSION: Rule.MALFORMED,
    ParseError.BAD_IP_HEADER: Rule.MALFORMED,
    ParseError.BAD_IP_CHECKSUM: Rule.MALFORMED,
    ParseError.BAD_IP_LENGTH: Rule.MALFORMED,
    ParseError.BAD_UDP_LENGTH: Rule.MALFORMED,
    ParseError.BAD_UDP_CHECKSUM: Rule.MALFORMED,
    ParseError.UNKNOWN_OPCODE: Rule.UNKNOWN_OPCODE,
    ParseError.BAD_TVER: Rule.BAD_TVER,
    ParseError.BAD_PADCOUNT: Rule.BAD_PAD,
    ParseError.SHORT_HEADERS: Rule.HEADER_LENGTH,
    ParseError.BAD_ICRC: Rule.BAD_ICRC,
}

assert set(CLAUSE) == set(Rule), "every rule names its clause"
