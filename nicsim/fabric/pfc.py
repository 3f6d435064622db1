"""Priority-based flow control frames (IEEE 802.1Qbb, clause 36 of 802.1Q).

A PFC frame is a MAC Control frame: destination 01:80:C2:00:00:01, EtherType 0x8808, opcode
0x0101, a class-enable vector (one bit per priority, in the low byte), then eight 16-bit pause
times, one per priority, in quanta of 512 bit times at the link's speed, padded to the minimum
frame. A set enable bit with time 0 resumes the priority at once (the "XON" of common usage);
a clear bit leaves that priority's state alone.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass

import simpy

from nicsim.wire.packet import ETH_MIN_FRAME

PFC_DMAC = bytes.fromhex("0180c2000001")
ETH_P_MAC_CONTROL = 0x8808
PFC_OPCODE = 0x0101
PAUSE_OPCODE = 0x0001  # 802.3 Annex 31B PAUSE (all traffic), recognised and counted
QUANTUM_BITS = 512
MAX_QUANTA = 0xFFFF
NUM_PRIORITIES = 8
PFC_LEN = 14 + 2 + 2 + 2 * NUM_PRIORITIES  # before padding

_HDR = struct.Struct("!6s6sHHH8H")


@dataclass(frozen=True)
class PfcWatchdog:
    """The PFC watchdog of a switch's or NIC's transmit queues (a PFC storm breaker): a
    lossless queue that stays paused, with frames waiting and none leaving, for `detect_ns`
    is declared stormed. While it is, pauses for its priority are ignored (counted) and, at a
    switch, its frames are dropped (SONiC's pfcwd action "drop"); a NIC sends them instead,
    for the link partner to take or drop. The storm ends when no pause for the priority has
    arrived for `restore_ns`. Defaults: SONiC's (detection and restoration 200 ms); ConnectX's
    stall prevention and Arista's and Juniper's watchdogs sit in the same 100-200 ms range."""

    enabled: bool = True
    detect_ns: float = 200e6
    restore_ns: float = 200e6

    def __post_init__(self) -> None:
        if not self.detect_ns > 0 or not self.restore_ns > 0:
            raise ValueError(f"pfc watchdog: detect_ns {self.detect_ns} and restore_ns "
                             f"{self.restore_ns} must be positive")


class PfcFormatError(ValueError):
    """A MAC Control frame that is not a well-formed PFC frame; the message says why."""


@dataclass(frozen=True)
class PfcFrame:
    src: bytes
    enable: int  # bit p set: the frame speaks for priority p
    quanta: tuple[int, ...]  # pause time per priority, in quanta

    def pauses(self) -> dict[int, int]:
        """{priority: quanta} for every priority the frame speaks for (0 means resume)."""
        return {p: self.quanta[p] for p in range(NUM_PRIORITIES) if self.enable >> p & 1}


def pfc_frame(src_mac: bytes, quanta: Mapping[int, int]) -> bytes:
    """A PFC frame from `src_mac` that pauses priority p for quanta[p] (0: resume)."""
    times = [0] * NUM_PRIORITIES
    enable = 0
    for p, q in quanta.items():
        if not 0 <= p < NUM_PRIORITIES or not 0 <= q <= MAX_QUANTA:
            raise ValueError(f"priority {p} / quanta {q} out of range")
        times[p] = q
        enable |= 1 << p
    hdr = _HDR.pack(PFC_DMAC, src_mac, ETH_P_MAC_CONTROL, PFC_OPCODE, enable, *times)
    return hdr + bytes(ETH_MIN_FRAME - len(hdr))


def is_mac_control(frame: bytes) -> bool:
    return len(frame) >= 14 and frame[12] == 0x88 and frame[13] == 0x08


def parse_pfc(frame: bytes) -> PfcFrame:
    """Decode a PFC frame; raises PfcFormatError naming what is wrong."""
    if len(frame) < ETH_MIN_FRAME:
        raise PfcFormatError(f"{len(frame)} bytes, shorter than a minimum frame")
    dmac, smac, etype, opcode, enable, *times = _HDR.unpack_from(frame)
    if etype != ETH_P_MAC_CONTROL:
        raise PfcFormatError(f"EtherType 0x{etype:04x}, not MAC Control")
    if opcode != PFC_OPCODE:
        raise PfcFormatError(f"MAC Control opcode 0x{opcode:04x}, not PFC (0x0101)")
    if dmac != PFC_DMAC:
        raise PfcFormatError(f"destination {dmac.hex(':')}, not 01:80:c2:00:00:01")
    if enable >> NUM_PRIORITIES:
        raise PfcFormatError(f"class-enable vector 0x{enable:04x} has reserved bits set")
    if any(frame[PFC_LEN:ETH_MIN_FRAME]):
        raise PfcFormatError("reserved padding is not zero")
    return PfcFrame(smac, enable, tuple(times))


def quanta_ns(quanta: int, rate_gbps: float) -> float:
    """How long `quanta` pause quanta last on a link of `rate_gbps`."""
    return quanta * QUANTUM_BITS / rate_gbps


class PfcStorm:
    """A port that keeps pausing its link partner: a NIC whose receive path is stuck (or a
    host that means harm) sends PFC frames for `priorities` over and over, each refreshing
    the pause before the last one runs out, from `start_ns` until `stop_ns` (None: for the
    rest of the run). `send` puts a MAC Control frame on the port's wire (Port.send_control)."""

    def __init__(self, env: simpy.Environment, send: Callable[[bytes], None], mac: bytes,
                 priorities: tuple[int, ...], rate_gbps: float, start_ns: float = 0.0,
                 stop_ns: float | None = None, quanta: int = MAX_QUANTA) -> None:
        self.env = env
        self._send = send
        self.frame = pfc_frame(mac, dict.fromkeys(priorities, quanta))
        self.every_ns = quanta_ns(quanta, rate_gbps) / 2
        self.stop_ns = stop_ns
        self.sent = 0
        env.process(self._run(start_ns))

    def _run(self, start_ns: float) -> Generator[simpy.Event, None, None]:
        env = self.env
        if start_ns > env.now:
            yield env.timeout(start_ns - env.now)
        while self.stop_ns is None or env.now < self.stop_ns:
            self._send(self.frame)
            self.sent += 1
            yield env.timeout(self.every_ns)
