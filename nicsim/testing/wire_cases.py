"""Shared helpers for the wire-format and pcap tests: random but well-formed RoCEv2 frames.

A `FrameSpec` holds every value that goes into a frame (addresses, BTH flags, extension header
fields, payload), so a test can build the frame with nicsim.wire.FrameBuilder and then compare
what an oracle (scapy, tshark) or nicsim.wire.parse reads back against the values that went in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from nicsim.wire import (
    EXT_FIELDS,
    OPCODES,
    Ecn,
    FrameBuilder,
    OpInfo,
    Path,
    pack_ext,
    roce_udp_sport,
)

ALL_EXT_FIELDS = tuple(name for fields in EXT_FIELDS.values() for name, _ in fields)


@dataclass
class FrameSpec:
    path: Path
    opcode: int
    dqpn: int
    psn: int
    ext_values: dict[str, int] = field(default_factory=dict)
    payload: bytes = b""
    flags: dict[str, Any] = field(default_factory=dict)  # FrameBuilder.build keywords

    @property
    def info(self) -> OpInfo:
        return OPCODES[self.opcode]

    @property
    def ext(self) -> bytes:
        return b"".join(pack_ext(e, self.ext_values) for e in self.info.exts)

    @property
    def pad(self) -> int:
        return -len(self.payload) & 3

    def build(self) -> bytes:
        return FrameBuilder(self.path).build(self.opcode, self.dqpn, self.psn, self.ext,
                                             self.payload, **self.flags)

    def flag(self, name: str) -> Any:
        defaults = {"ackreq": False, "solicited": False, "becn": False, "fecn": False,
                    "pkey": 0xFFFF, "migreq": True}
        return self.flags.get(name, defaults[name])


U24 = st.integers(0, (1 << 24) - 1)


@st.composite
def paths(draw: st.DrawFn, ipv6: bool | None = None) -> Path:
    if ipv6 is None:
        ipv6 = draw(st.booleans())
    alen = 16 if ipv6 else 4
    return Path(
        smac=draw(st.binary(min_size=6, max_size=6)),
        dmac=draw(st.binary(min_size=6, max_size=6)),
        sip=draw(st.binary(min_size=alen, max_size=alen)),
        dip=draw(st.binary(min_size=alen, max_size=alen)),
        sport=roce_udp_sport(draw(U24), draw(U24)),
        dscp=draw(st.integers(0, 63)),
        ecn=draw(st.sampled_from(Ecn)),
        ttl=draw(st.integers(0, 255)),
        flow_label=draw(st.integers(0, (1 << 20) - 1)),
    )


@st.composite
def frame_specs(draw: st.DrawFn, opcode: int | None = None, ipv6: bool | None = None,
                max_payload: int = 600) -> FrameSpec:
    """A random well-formed frame; the opcode and IP version are drawn unless given."""
    if opcode is None:
        opcode = draw(st.sampled_from(sorted(OPCODES)))
    info = OPCODES[opcode]
    values = {name: draw(st.integers(0, (1 << bits) - 1))
              for e in info.exts for name, bits in EXT_FIELDS[e]}
    payload = draw(st.binary(max_size=max_payload)) if info.has_payload else b""
    flags = {
        "ackreq": draw(st.booleans()),
        "solicited": draw(st.booleans()),
        "becn": draw(st.booleans()),
        "fecn": draw(st.booleans()),
        "pkey": draw(st.integers(0, 0xFFFF)),
        "migreq": draw(st.booleans()),
    }
    return FrameSpec(draw(paths(ipv6)), opcode, draw(U24), draw(U24), values, payload, flags)
