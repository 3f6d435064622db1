"""nicsim frames as Wireshark sees them: one frame of every opcode (IPv4, and a few over IPv6)
written with PcapTap and decoded by a single tshark run.

tshark decodes RoCEv2 (UDP 4791) with its `infiniband` dissector. It does not check the ICRC
(test_wire_oracle.py does that against scapy), but it is an independent reading of every
header field, of the extension headers each opcode carries and of where the ICRC sits.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path as FsPath

import pytest

from nicsim.fabric.pcap import PcapTap
from nicsim.testing.wire_cases import FrameSpec
from nicsim.wire import EXT_FIELDS, OPCODES, Ecn, Ext, Opcode, Path

TSHARK = shutil.which("tshark")
pytestmark = pytest.mark.skipif(
    TSHARK is None, reason="tshark is not installed (apt-get install tshark); the README's "
    "test command installs it")

# Protocols Wireshark tries on InfiniBand payloads by heuristics. Our payloads are arbitrary
# bytes, and these heuristics misfire on them: RPC-over-RDMA (Wireshark 4.0) throws "Malformed
# Packet" on SEND payloads shorter than 16 bytes instead of declining them, and the raw
# EtherType heuristic (eth_over_ib) takes a payload starting 08 00 00 00 for an IPv4 packet.
# Neither says anything about the RoCEv2 headers under test; without them the payload is
# shown as plain `data`.
PAYLOAD_PROTOCOLS = ["rpcordma", "smb_direct", "smc", "nvme-rdma", "lnet", "iser",
                     "infiniband.eoib", "infiniband_sdp", "fcoib"]
PAYLOAD_HEURISTICS = ["eth_over_ib"]
# Like Linux rxe (prepare_udp_hdr), nicsim sends a zero UDP checksum over IPv6 as well as
# IPv4: the ICRC covers the datagram, and RFC 6935/6936 allow zero-checksum IPv6 UDP for
# tunnel-like encapsulations. Wireshark flags it as an error unless told to accept it.
TSHARK_PREFS = ["udp.ignore_ipv6_zero_checksum:TRUE"]

FIELDS = [
    "frame.number", "frame.protocols", "_ws.malformed", "_ws.expert.severity",
    "_ws.expert.message",
    "ip.dsfield.dscp", "ip.dsfield.ecn", "ipv6.tclass.dscp", "ipv6.tclass.ecn", "ipv6.flow",
    "udp.srcport", "udp.dstport",
    "infiniband.bth.opcode", "infiniband.bth.se", "infiniband.bth.m", "infiniband.bth.padcnt",
    "infiniband.bth.tver", "infiniband.bth.p_key", "infiniband.bth.destqp", "infiniband.bth.a",
    "infiniband.bth.psn",
    "infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome", "infiniband.aeth.msn",
    "infiniband.immdt", "infiniband.ieth",
    "infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "infiniband.deth.q_key", "infiniband.deth.srcqp",
    "infiniband.invariant.crc", "data.data",
]

V4 = Path(bytes.fromhex("0a0000000001"), bytes.fromhex("0a0000000002"), bytes([192, 168, 1, 1]),
          bytes([192, 168, 1, 2]), 0xD00D, dscp=26, ecn=Ecn.ECT0, ttl=63)
V6 = Path(bytes.fromhex("0a0000000001"), bytes.fromhex("0a0000000002"),
          bytes.fromhex("fd00000000000000000000000000000a"),
          bytes.fromhex("fd00000000000000000000000000000b"), 0xE00E, dscp=46, ecn=Ecn.CE,
          flow_label=0x9ABCD)
IPV6_OPCODES = [Opcode.RC_SEND_ONLY_WITH_IMMEDIATE, Opcode.RC_RDMA_WRITE_FIRST,
                Opcode.RC_RDMA_READ_REQUEST, Opcode.RC_ACKNOWLEDGE, Opcode.RC_ATOMIC_ACKNOWLEDGE,
                Opcode.RC_COMPARE_SWAP, Opcode.RC_SEND_ONLY_WITH_INVALIDATE,
                Opcode.UD_SEND_ONLY_WITH_IMMEDIATE, Opcode.CNP]


# Opcodes Debian 12's tshark (Wireshark 4.0) does not dissect past the BTH: the Memory
# Placement ones (FLUSH, ATOMIC WRITE) came after it. For them only what tshark shows is
# compared (the BTH, IP and UDP always); tests/test_placement.py checks their extension
# headers and payload byte by byte with nicsim's parser.
BTH_ONLY = {Opcode.RC_FLUSH, Opcode.RC_ATOMIC_WRITE}


def make_spec(i: int, opcode: int, path: Path) -> FrameSpec:
    """Distinct, high-bit-heavy values per frame, so a field read from the wrong offset or
    with the wrong width shows."""
    info = OPCODES[opcode]
    values: dict[str, int] = {}
    for e in info.exts:
        for k, (name, bits) in enumerate(EXT_FIELDS[e]):
            values[name] = ((0xF1E2D3C4B5A69788 >> (k * 4)) ^ (i * 0x01010101 + k)) & (
                (1 << bits) - 1)
    payload = b""
    if info.has_payload:
        n = (0, 1, 2, 3, 5, 8, 13, 16, 29, 64, 1024)[i % 11]
        payload = bytes((i * 7 + j * 13 + 1) & 0xFF or 1 for j in range(n))
    flags = {"ackreq": i % 2 == 0, "solicited": i % 3 == 0, "migreq": i % 4 != 1,
             "fecn": i % 5 == 0, "becn": i % 7 == 0, "pkey": (0x8000 | i * 0x111) & 0xFFFF}
    return FrameSpec(path, opcode, 0xF00000 | i * 0x1011, (0xFFFFF0 + i * 3) & 0xFFFFFF, values,
                     payload, flags)


def expected_fields(spec: FrameSpec, frame: bytes) -> dict[str, str | int | None]:
    """What tshark should show for a frame, as integers (None: field absent)."""
    v = spec.ext_values
    exts = set(spec.info.exts)
    tos = (spec.path.dscp << 2) | spec.path.ecn.value
    exp: dict[str, str | int | None] = {
        "udp.srcport": spec.path.sport, "udp.dstport": 4791,
        "infiniband.bth.opcode": spec.opcode,
        "infiniband.bth.se": int(spec.flag("solicited")),
        "infiniband.bth.m": int(spec.flag("migreq")),
        "infiniband.bth.padcnt": spec.pad,
        "infiniband.bth.tver": 0,
        "infiniband.bth.p_key": spec.flag("pkey"),
        "infiniband.bth.destqp": spec.dqpn,
        "infiniband.bth.a": int(spec.flag("ackreq")),
        "infiniband.bth.psn": spec.psn,
        # tshark shows the 4 ICRC bytes as a big-endian number; not decoded for CNP (0x81),
        # which it treats as a vendor opcode.
        "infiniband.invariant.crc": (None if spec.opcode == Opcode.CNP
                                     else int.from_bytes(frame[-4:], "big")),
        # tshark leaves the pad bytes in the payload it shows.
        "data.data": (spec.payload + bytes(spec.pad)).hex() or None,
        # Wireshark reuses the RETH VA / R_Key fields for AtomicETH's.
        "infiniband.reth.va": v.get("reth_va", v.get("atomic_va")),
        "infiniband.reth.r_key": v.get("reth_rkey", v.get("atomic_rkey")),
        "infiniband.reth.dmalen": v.get("reth_len"),
        "infiniband.aeth.syndrome": v.get("aeth_syndrome"),
        "infiniband.aeth.msn": v.get("aeth_msn"),
        "infiniband.immdt": v.get("imm"),
        "infiniband.ieth": v.get("ieth_rkey"),
        "infiniband.atomiceth.swapdt": v.get("atomic_swap_add"),
        "infiniband.atomiceth.cmpdt": v.get("atomic_compare"),
        "infiniband.atomicacketh.origremdt": v.get("atomic_orig"),
        "infiniband.deth.q_key": v.get("deth_qkey"),
        "infiniband.deth.srcqp": v.get("deth_src_qp"),
    }
    assert exts <= set(Ext)
    if spec.path.ipv6:
        exp |= {"ipv6.tclass.dscp": tos >> 2, "ipv6.tclass.ecn": tos & 3,
                "ipv6.flow": spec.path.flow_label}
    else:
        exp |= {"ip.dsfield.dscp": tos >> 2, "ip.dsfield.ecn": tos & 3}
    return exp


BYTES_FIELDS = {"infiniband.immdt", "infiniband.ieth"}  # FT_BYTES, shown as hex digits


def tshark_value(name: str, text: str) -> str | int | None:
    if text == "":
        return None
    # A field the dissector adds twice (IETH in Wireshark 4.0) comes back comma-separated.
    parts = set(text.split(","))
    assert len(parts) == 1, f"{name}: conflicting values {text!r}"
    (t,) = parts
    if name == "data.data":
        return t
    if name in BYTES_FIELDS:
        return int(t.replace(":", ""), 16)
    return int(t, 0)


def run_tshark(pcap: FsPath) -> list[dict[str, str]]:
    assert TSHARK is not None
    base = [TSHARK, "-n", "-r", str(pcap), "-T", "fields", "-E", "occurrence=a",
            "-E", "separator=/t", "-E", "aggregator=,"]
    for p in PAYLOAD_PROTOCOLS:
        base += ["--disable-protocol", p]  # an unknown protocol name is only a warning
    for pref in TSHARK_PREFS:
        base += ["-o", pref]
    for f in FIELDS:
        base += ["-e", f]
    heur = [a for h in PAYLOAD_HEURISTICS for a in ("--disable-heuristic", h)]
    res = subprocess.run(base + heur, capture_output=True, text=True, timeout=120, check=False)
    if res.returncode != 0 and any(h in res.stderr for h in PAYLOAD_HEURISTICS):
        # An unknown heuristic name is fatal; another tshark version may name it differently.
        res = subprocess.run(base, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, f"tshark failed ({res.returncode}): {res.stderr}"
    rows = []
    for line in res.stdout.splitlines():
        cols = line.split("\t")
        assert len(cols) == len(FIELDS), line
        rows.append(dict(zip(FIELDS, cols, strict=True)))
    return rows


def test_tshark_decodes_every_opcode(tmp_path: FsPath) -> None:
    specs = [make_spec(i, op, V4) for i, op in enumerate(sorted(OPCODES))]
    specs += [make_spec(100 + i, op, V6) for i, op in enumerate(IPV6_OPCODES)]
    frames = [s.build() for s in specs]
    pcap = tmp_path / "all_opcodes.pcap"
    with PcapTap(pcap) as tap:
        for i, frame in enumerate(frames):
            tap.write(frame, 1_000 * i)
    rows = run_tshark(pcap)
    assert len(rows) == len(frames)

    problems = []
    for row, spec, frame in zip(rows, specs, frames, strict=True):
        name = f"frame {row['frame.number']} {spec.info.opcode.name}" + (
            " IPv6" if spec.path.ipv6 else "")
        protocols = row["frame.protocols"].split(":")
        if "infiniband" not in protocols:
            problems.append(f"{name}: not decoded as InfiniBand ({row['frame.protocols']})")
            continue
        if row["_ws.malformed"] or row["_ws.expert.severity"]:
            problems.append(f"{name}: tshark says {row['_ws.expert.message']!r} "
                            f"(severity {row['_ws.expert.severity']})")
        for field, want in expected_fields(spec, frame).items():
            got = tshark_value(field, row[field])
            if got is None and spec.opcode in BTH_ONLY and not field.startswith(
                    ("infiniband.bth.", "ip", "udp.")):
                continue  # not dissected by this tshark (see BTH_ONLY)
            if got != want:
                problems.append(f"{name}: {field} = {got!r}, built {want!r}")
    assert not problems, "\n".join(problems)
