"""In-band network telemetry (INT) for HPCC: where it sits in a frame, and its bytes.

HPCC (Li et al., SIGCOMM 2019, section 3.2 and figure 4) has every switch on a data packet's
path add one record of its egress port (queue length, bytes sent so far, a timestamp, the
link's rate), and the receiver echo the records in its ACK. Where the records go is not
RoCEv2's (IBA Annex A17 has no INT); this model puts them in a **trailer after the IP
datagram**, between the ICRC and the Ethernet FCS:

    Ethernet | IP | UDP 4791 | BTH ... payload | ICRC | INT shim | hop 1 | hop 2 ... | (FCS)

so that nothing the ICRC covers changes (a switch cannot recompute the ICRC: Annex A17.4.1
masks only the fields a router rewrites), the IP and UDP lengths stay those of the RoCE
packet, and a RoCE stack that ignores the trailer sees a normal packet. Wireshark shows the
bytes as the Ethernet trailer (eth.trailer), nicsim's pcap checker accepts them (a frame may
be longer than its IP datagram, as a padded one is), and wireshark/nicsim-roce.lua does not
need to know them.

The shim (4 bytes): 0x49 ('I'), version (high nibble, 1) and flags (low nibble: bit 0 ECHO,
set in the copy an ACK carries back, which switches leave alone), the number of hop records,
and a reserved zero byte. Each hop record is 8 bytes, one big-endian 64-bit word packed as
HPCC's ns-3 simulator packs its IntHop (8 bytes per hop keeps the overhead of a five-hop
path near the tens of bytes the paper budgets for INT):

    bits 63..61  link rate code (RATES_GBPS: 10, 25, 40, 50, 100, 200, 400, 800 Gb/s)
    bits 60..37  timestamp, ns, modulo 2^24 (wraps every 16.8 ms)
    bits 36..17  bytes the egress port has sent, in 128-byte units, modulo 2^20
    bits 16..0   the egress port's queued bytes, in 80-byte units (saturating)

A switch with INT on (`SwitchConfig.int_telemetry`) adds a record to every untagged RoCEv2
frame it sends (UDP destination port 4791) whose trailer is not an echo, creating the shim
if the frame has none, up to MAX_HOPS records. Differences of timestamps and byte counts are
taken modulo their widths (`ts_delta`, `bytes_delta`).
"""

from __future__ import annotations

from typing import NamedTuple

MAGIC = 0x49
VERSION = 1
ECHO = 0x1
SHIM_LEN = 4
HOP_LEN = 8
MAX_HOPS = 15
RATES_GBPS = (10.0, 25.0, 40.0, 50.0, 100.0, 200.0, 400.0, 800.0)
TS_MOD = 1 << 24
BYTES_UNIT = 128
BYTES_MOD = (1 << 20) * BYTES_UNIT
QLEN_UNIT = 80
QLEN_MAX = (1 << 17) - 1
_ROCE_PORT = (4791).to_bytes(2, "big")


class IntHop(NamedTuple):
    """One switch's record, decoded (byte counts in bytes; see the module for widths)."""

    rate_gbps: float
    ts_ns: int
    tx_bytes: int
    qlen_bytes: int


def rate_code(gbps: float) -> int:
    """The 3-bit code of a link rate (ValueError for a rate the format cannot name)."""
    for i, r in enumerate(RATES_GBPS):
        if abs(r - gbps) < 1e-9:
            return i
    raise ValueError(f"INT names link rates of {', '.join(f'{r:g}' for r in RATES_GBPS)} "
                     f"Gb/s only, not {gbps:g}")


def pack_hop(code: int, ts_ns: float, tx_bytes: int, qlen_bytes: int) -> bytes:
    q = qlen_bytes // QLEN_UNIT
    w = (code << 61 | (int(ts_ns) % TS_MOD) << 37
         | ((tx_bytes // BYTES_UNIT) & 0xFFFFF) << 17 | (q if q < QLEN_MAX else QLEN_MAX))
    return w.to_bytes(8, "big")


def unpack_hop(b: bytes | memoryview) -> IntHop:
    w = int.from_bytes(b, "big")
    return IntHop(RATES_GBPS[w >> 61], (w >> 37) & 0xFFFFFF, ((w >> 17) & 0xFFFFF) * BYTES_UNIT,
                  (w & 0x1FFFF) * QLEN_UNIT)


def datagram_end(frame: bytes) -> int:
    """Where the IP datagram of an untagged RoCEv2 frame ends (-1: not one)."""
    if len(frame) < 42:
        return -1
    if frame[12] == 0x08 and frame[13] == 0x00:
        ihl = (frame[14] & 0xF) * 4
        if frame[23] != 17 or frame[14 + ihl + 2:14 + ihl + 4] != _ROCE_PORT:
            return -1
        return 14 + (frame[16] << 8 | frame[17])
    if frame[12] == 0x86 and frame[13] == 0xDD and len(frame) >= 62:
        if frame[20] != 17 or frame[56:58] != _ROCE_PORT:
            return -1
        return 54 + (frame[18] << 8 | frame[19])
    return -1


def trailer(frame: bytes, end: int) -> bytes | None:
    """The INT trailer (shim and records) after the datagram ending at `end`, or None."""
    if len(frame) < end + SHIM_LEN or frame[end] != MAGIC:
        return None
    n = frame[end + 2]
    if len(frame) < end + SHIM_LEN + n * HOP_LEN:
        return None
    return frame[end:end + SHIM_LEN + n * HOP_LEN]


def stamp(frame: bytes, hop: bytes) -> bytes | None:
    """`frame` with the record `hop` added (a shim made if it has none); None when the frame
    takes no record: not RoCEv2, an echo, or MAX_HOPS records already."""
    end = datagram_end(frame)
    if end < 0:
        return None
    n = len(frame)
    if n == end:
        return frame + bytes((MAGIC, VERSION << 4, 1, 0)) + hop
    if frame[end] != MAGIC or frame[end + 1] & ECHO or frame[end + 2] >= MAX_HOPS:
        return None
    hops = frame[end + 2]
    last = end + SHIM_LEN + hops * HOP_LEN
    return b"".join((frame[:end + 2], bytes((hops + 1,)), frame[end + 3:last], hop,
                     frame[last:]))


def echo(tr: bytes) -> bytes:
    """The trailer as an ACK carries it back (the ECHO flag set)."""
    return tr[:1] + bytes((tr[1] | ECHO,)) + tr[2:]


def hops(tr: bytes) -> list[IntHop]:
    """The records of a trailer, first hop first."""
    n = tr[2]
    return [unpack_hop(tr[SHIM_LEN + i * HOP_LEN:SHIM_LEN + (i + 1) * HOP_LEN])
            for i in range(n)]


def is_echo(tr: bytes) -> bool:
    return bool(tr[1] & ECHO)


def ts_delta(new: int, old: int) -> int:
    """new - old for timestamps modulo 2^24 ns."""
    return (new - old) % TS_MOD


def bytes_delta(new: int, old: int) -> int:
    """new - old for the byte counters modulo 2^20 x 128 bytes."""
    return (new - old) % BYTES_MOD
