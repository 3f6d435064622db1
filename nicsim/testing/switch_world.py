"""A tiny switched world for tests: one Switch, Links, and stub hosts that serialize
hand-built RoCEv2 frames onto their link the way nicsim.nic.port.Port does, honour PFC if
asked, and record what arrives."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import replace

import simpy

from nicsim.fabric.link import Link, LinkConfig
from nicsim.fabric.pfc import PfcFrame, is_mac_control, parse_pfc, quanta_ns
from nicsim.fabric.switch import (
    PfcConfig,
    PortSpec,
    Switch,
    SwitchConfig,
    check_switch_config,
    pfc_headroom_bytes,
)
from nicsim.sim import Sim
from nicsim.wire import Ecn, FrameBuilder, Opcode, Path
from nicsim.wire.packet import ETH_FCS, ETH_IFG, ETH_MIN_FRAME, ETH_PREAMBLE, ipv4_checksum

HDR4 = 14 + 20 + 8 + 12 + 4  # Ethernet + IPv4 + UDP + BTH + ICRC of a WRITE_MIDDLE
WIRE = ETH_PREAMBLE + ETH_FCS + ETH_IFG
LAST_BIT = ETH_PREAMBLE + ETH_FCS


def host_mac(i: int) -> bytes:
    return bytes([0x02, 0, 0, 0, 0, i])


def sw_mac(i: int) -> bytes:
    return bytes([0x02, 0xAA, 0, 0, 0, i])


def host_ip(i: int) -> bytes:
    return bytes([10, 0, 0, i])


def host_ip6(i: int) -> bytes:
    return bytes.fromhex("fd00" + "00" * 13) + bytes([i])


def last_bit_ns(frame_len: int, rate_gbps: float) -> float:
    """From the start of a frame to its last bit leaving: preamble, frame (padded), FCS."""
    return (max(frame_len, ETH_MIN_FRAME) + LAST_BIT) * 8 / rate_gbps


def slot_ns(frame_len: int, rate_gbps: float) -> float:
    """Line time of a frame, inter-frame gap included."""
    return (max(frame_len, ETH_MIN_FRAME) + WIRE) * 8 / rate_gbps


class Stub:
    """A host port: frames go out FIFO per class, strict priority between classes, back to
    back at the line rate (like nicsim.nic.port.Port); MAC Control frames first and never
    paused. With `honour_pfc`, a PFC frame received pauses its classes after the frame in
    progress. Records what it receives."""

    def __init__(self, env: simpy.Environment, link: Link, mac: bytes,
                 honour_pfc: bool = True) -> None:
        self.env = env
        self.link = link
        self.mac = mac
        self.end = link.attach(self._rx)
        self.rate = link.cfg.rate_gbps
        self.npb = 8 / self.rate
        self.honour = honour_pfc
        self.queues: list[deque[bytes]] = [deque() for _ in range(8)]
        self.ctrl: deque[bytes] = deque()
        self.paused_until = [0.0] * 8
        self.free = 0.0
        self.token = 0
        self.timer_at = math.inf
        self.rx: list[tuple[float, bytes]] = []
        self.pfc_rx: list[tuple[float, PfcFrame, bytes]] = []  # (time, parsed, as received)
        self.sent: list[tuple[float, int]] = []  # (start, class) of data frames

    def send(self, frame: bytes, tc: int = 3) -> None:
        self.queues[tc].append(frame)
        self._kick(self.env.now)

    def send_ctrl(self, frame: bytes) -> None:
        self.ctrl.append(frame)
        self._kick(self.env.now)

    def _kick(self, t: float) -> None:
        t = max(t, self.free, self.env.now)
        if t < self.timer_at:
            self.token += 1
            self.timer_at = t
            tok = self.token
            ev = self.env.timeout(t - self.env.now)
            ev.callbacks.append(lambda _e: self._serve(tok))

    def _serve(self, tok: int) -> None:
        if tok != self.token:
            return
        self.timer_at = math.inf
        now = max(self.env.now, self.free)  # timers may land an ulp early
        if self.ctrl:
            frame, tc = self.ctrl.popleft(), -1
        else:
            tc = next((c for c in range(7, -1, -1) if self.queues[c] and
                       (not self.honour or self.paused_until[c] <= now)), -1)
            if tc < 0:
                waits = [self.paused_until[c] for c in range(8) if self.queues[c]]
                if waits:
                    self._kick(min(waits))
                return
            frame = self.queues[tc].popleft()
            self.sent.append((now, tc))
        self.link.carry(frame, self.end, now + last_bit_ns(len(frame), self.rate))
        self.free = now + slot_ns(len(frame), self.rate)
        if self.ctrl or any(self.queues):
            self._kick(self.free)

    def _rx(self, frame: bytes) -> None:
        now = self.env.now
        if is_mac_control(frame):
            pf = parse_pfc(frame)
            self.pfc_rx.append((now, pf, frame))
            for c, q in pf.pauses().items():
                self.paused_until[c] = now + quanta_ns(q, self.rate)
            if any(self.queues):
                self._kick(now)
            return
        self.rx.append((now, frame))


class World:
    """One switch with a stub host on each port; host i has IP 10.0.0.i (and fd00::i)."""

    def __init__(self, cfg: SwitchConfig, rates: list[float], prop_ns: float | list[float] = 100.0,
                 seed: int = 1, honour_pfc: bool = True) -> None:
        self.env = Sim()
        self.sw = Switch(self.env, "sw", cfg, seed)
        props = prop_ns if isinstance(prop_ns, list) else [prop_ns] * len(rates)
        self.hosts: list[Stub] = []
        self.links: list[Link] = []
        for i, (rate, prop) in enumerate(zip(rates, props, strict=True)):
            link = Link(self.env, LinkConfig(rate, prop), f"l{i}")
            self.links.append(link)
            self.hosts.append(Stub(self.env, link, host_mac(i), honour_pfc))
            p = self.sw.add_port(link, sw_mac(i))
            assert p == i
            self.sw.add_route(host_ip(i), [(i, host_mac(i))])
            self.sw.add_route(host_ip6(i), [(i, host_mac(i))])

    def builder(self, src: int, dst: int, dscp: int = 26, ecn: Ecn = Ecn.ECT0,
                sport: int = 0xC000, ttl: int = 64, v6: bool = False) -> FrameBuilder:
        ip = host_ip6 if v6 else host_ip
        return FrameBuilder(Path(host_mac(src), sw_mac(src), ip(src), ip(dst), sport,
                                 dscp=dscp, ecn=ecn, ttl=ttl))

    def at(self, t: float, fn: Callable[[], None]) -> None:
        ev = self.env.timeout(t)
        ev.callbacks.append(lambda _e: fn())


def write(fb: FrameBuilder, frame_len: int, psn: int = 0) -> bytes:
    """A WRITE_MIDDLE frame of exactly `frame_len` bytes (IPv4; 58 + a multiple of 4, as the
    payload is padded to 4 bytes)."""
    f = fb.build(Opcode.RC_RDMA_WRITE_MIDDLE, 0x12, psn, b"", bytes(frame_len - HDR4))
    assert len(f) == frame_len
    return f


def small_cfg(**kw: object) -> SwitchConfig:
    base = SwitchConfig(buffer_bytes=4_000_000, mtu_bytes=1100,
                        pfc=PfcConfig(enabled=False))
    return replace(base, **kw)  # type: ignore[arg-type]


def ipv4_header_ok(frame: bytes, off: int = 14) -> bool:
    ihl = (frame[off] & 0xF) * 4
    hdr = bytearray(frame[off:off + ihl])
    stored = hdr[10] << 8 | hdr[11]
    hdr[10] = hdr[11] = 0
    return ipv4_checksum(bytes(hdr)) == stored


def incast(pfc: bool, senders: int = 8, frames: int = 150, n: int = 1058,
           prop: float = 100.0, honour: bool = True, mtu: int = 1100,
           shared: int = 60_000, setup: Callable[[World], None] | None = None
           ) -> tuple[World, SwitchConfig]:
    """`senders` hosts each send `frames` frames of class 3 to host 0 through one switch
    (`setup` sees the world before it runs)."""
    ports = [PortSpec(100.0, prop)] * (senders + 1)
    head = pfc_headroom_bytes(100.0, prop, mtu) if pfc else 0
    cfg = small_cfg(buffer_bytes=shared + head * len(ports), mtu_bytes=mtu,
                    pfc=PfcConfig(enabled=pfc, classes=(3,)))
    check_switch_config(cfg, ports)
    w = World(cfg, [100.0] * (senders + 1), prop, honour_pfc=honour)
    for s in range(1, senders + 1):
        fb = w.builder(s, 0, sport=0xC000 + s)
        for i in range(frames):
            w.hosts[s].send(write(fb, n, i))
    if setup is not None:
        setup(w)
    w.env.run()
    return w, cfg
