"""A routed, output-queued, store-and-forward Ethernet switch: the fabric's ToR and spine.

What a switch knows (switches are fabric, not NICs: docs/explanation/architecture.md): frames,
traffic classes, queues, a shared buffer and pauses. It parses only what forwarding needs: Ethernet,
an optional 802.1Q tag (its PCP), IPv4/IPv6 (destination, DSCP, ECN, TTL / hop limit) and the
UDP/TCP ports of the ECMP hash.

Pipeline of one frame (all work is done when its last bit arrives, in `_receive`):

1. **Parse and route.** Host routes (/32, /128) map a destination address to one next hop or
   an ECMP group. A group member is chosen by a hash of the 5-tuple (source and destination
   address, protocol, source and destination port: the UDP source port is RoCEv2's entropy),
   salted per switch and passed through a non-linear mixer, so one flow always takes one path
   and the tiers of a fabric do not all pick the same member (hash polarization: with a
   linear hash such as a CRC, a salt only XORs a constant into the result, and flows that
   shared a member upstream share one again downstream).
2. **Classify**: traffic class = dscp_map[DSCP] (default DSCP >> 3: 26 -> 3, 48 -> 6) or
   pcp_map[PCP] of the 802.1Q tag (untagged frames: `default_priority`). The class is also
   the frame's 802.1Qbb priority (PFC frames name classes; see "Limitations").
3. **Admit** into the shared buffer (below) or drop, counted by reason.
4. **Mark** ECN by RED on the egress queue's instantaneous depth (below).
5. **Rewrite** once: destination MAC = next hop, source MAC = egress port, TTL / hop limit
   - 1, ECN CE, and the IPv4 header checksum updated incrementally (RFC 1624, eqn. 3). The
   ICRC is untouched: it masks TOS, TTL and the header checksum (RoCEv2 Annex A17.4.1).
6. **Enqueue** on the egress port's class queue with a ready time = arrival +
   `fwd_latency_ns` (store-and-forward: the frame is eligible that long after its last bit
   arrived). No event is spent on the frame here; the egress picks heads whose time has come.

Egress: one transmitter per port, driven by timer entries in SimPy's queue (no processes):
an entry when a transmission ends while frames wait, or when the earliest waiting frame
becomes ready / its class's pause expires. Control frames (PFC the switch generates) go
first and are never paused; then strict priority (class 7 first) or DWRR between classes.
A frame occupies max(len, 60) + 8 preamble + 4 FCS + 12 IFG bytes of line time.

Shared buffer (Broadcom-style dynamic threshold, Choudhury & Hahne): the buffer minus the
PFC headroom reserved for every (port, lossless class) is a shared pool. A lossy frame is
admitted to an egress queue if the pool has room for it (else `buffer_full`) and the queue
would hold at most alpha x (free pool bytes before the frame) (else `dynamic_threshold`):
one busy queue settles at alpha / (1 + alpha) of the pool, and leaves room for others.

PFC (IEEE 802.1Qbb, 802.1Q clause 36) for lossless classes: lossless frames are admitted
against their *ingress* (port, class), a priority group (PG), never against the egress
dynamic threshold. A PG takes frames from the shared pool while it holds less than its XOFF
threshold (static `pfc.xoff_bytes`, or dynamic: pfc.alpha x free pool bytes) and the pool
has room; the first frame that does not fit goes to the PG's reserved headroom and makes
the switch send a PFC frame out of that port (source MAC = the port's) pausing the class
for 0xFFFF quanta; while paused every arrival goes to headroom. Frames leaving give their
bytes back to the headroom first (it is the PG's overflow above its shared part). The pause
is refreshed every half pause time while the PG stays above XON; once the headroom is empty
and the PG's shared bytes are at most XON (XOFF threshold - `xon_offset_bytes`), a PFC frame
with time 0 resumes the class. So each XOFF finds the whole headroom free for the bytes in
flight; the headroom formula is in `pfc_headroom_bytes`. A headroom overflow drops the frame
and counts `pN.pgC.dropped.headroom_overflow` (the headroom is too small for the link, or the
sender ignores PFC).

Received PFC frames pause this port's egress per lossless class (PFC is enabled per
priority; frames for other priorities are counted and otherwise ignored): a paused class
sends nothing after the frame in progress until quanta x 512 bit times at the port's rate
have passed, or a frame with time 0 resumes it (802.1Qbb). Received 802.3x PAUSE frames (opcode
0x0001, Annex 31B) are counted and ignored: 802.1Qbb does not use PAUSE on a link where PFC
runs, and a PFC fabric leaves lossy classes to drop rather than stall the whole port.

ECN (RFC 3168) by RED/WRED per class, on the depth of the egress queue the arriving frame
joins (bytes queued before it, including frames still inside the forwarding latency: they
hold buffer): no mark below Kmin; between Kmin and Kmax probability pmax x (depth - Kmin) /
(Kmax - Kmin); at or above Kmax every ECT frame (DCQCN's convention). Only ECT(0)/ECT(1)
become CE; CE stays CE and Not-ECT passes unmarked (no RED drops). One seeded numpy
generator per switch draws the coin, and only for frames in the band, so runs repeat.

INT (`int_telemetry`, for HPCC): as a frame starts to leave a port, a RoCEv2 frame (untagged,
UDP port 4791) gets a record of the port appended after its IP datagram: the time, the bytes
the port sent before it, the bytes queued behind it, the link's rate (nicsim.wire.telemetry
has the format and why it goes there). An ACK's echo of such records is left alone. The
frame's buffer accounting keeps the length it was queued with; the transmitter sends, and
`tx_bytes` counts, what the record added (`pN.int_stamped`, `pN.int_bytes`: with INT on).

Counters (`Switch.counters()`, all always present, `N` port, `C` class):
  pN.rx_frames, pN.rx_bytes, pN.tx_frames, pN.tx_bytes            (all frames, control too)
  pN.pause_sent / pN.resume_sent         PFC frames sent with a pause time / with time 0
  pN.pause_received                      PFC frames received (pausing or resuming)
  pN.pause_8023x_received, pN.bad_pfc_received
  pN.qC.enqueued, .enqueued_bytes, .dequeued, .dequeued_bytes     egress queue C of port N
  pN.qC.dropped.dynamic_threshold, pN.qC.dropped.buffer_full
  pN.qC.ecn_marked, pN.qC.max_depth_bytes
  pN.qC.paused_ns                        time egress class C of port N was paused
  pN.pgC.max_bytes, .headroom_max_bytes, .xoff, .dropped.headroom_overflow
                                         ingress PG C of port N (lossless classes only)
  drop.no_route, drop.ttl, drop.not_ip, drop.bad_ip_header, drop.truncated, drop.oversize,
  drop.not_our_mac, drop.mac_control, drop.mcast_off_tree
                                         switch-wide drops before a queue is chosen
  mcast_flooded                          IP multicast frames flooded (each copy is also
                                         counted by its egress queue)
  dropped.dynamic_threshold, dropped.buffer_full, dropped.headroom_overflow, ecn_marked
                                         totals over all queues
  buffer.shared_bytes, buffer.max_used_bytes

Limitations: host routes only (no prefixes); the PFC priority is the traffic class (the
identity priority-to-class map the usual RoCE setups use: DSCP 26 -> priority 3 -> class 3);
a frame's 802.1Q tag (if any) is kept as it came in; IPv4 options are forwarded but not
parsed; the IPv4 header checksum is not verified (an incremental update keeps a wrong one
wrong, and the receiver drops it); frames addressed to the switch itself (other than MAC
Control) are not answered; unicast frames whose destination MAC is not the ingress port's
MAC are dropped (`drop.not_our_mac`), as a router does.

Multicast: there is no multicast routing (no IGMP/PIM). A frame to an Ethernet group address
carrying an IP multicast destination is flooded, as an L2 switch without IGMP snooping
floods it: a copy out of every flood port except the one it came in on (TTL - 1, the source
MAC the egress port's). The topology sets the flood ports to a spanning tree of the fabric
(`set_flood_ports`; every port until then), so a leaf-spine floods through one spine and no
copy loops; hosts that did not join drop the copy in their NIC's MAC filter.
"""

from __future__ import annotations

import math
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import partial

import numpy as np

from nicsim.fabric.link import Link
from nicsim.fabric.pfc import (
    ETH_P_MAC_CONTROL,
    MAX_QUANTA,
    NUM_PRIORITIES,
    PAUSE_OPCODE,
    PFC_OPCODE,
    PfcFormatError,
    PfcWatchdog,
    parse_pfc,
    pfc_frame,
    quanta_ns,
)
from nicsim.sim import Entry, Sim
from nicsim.sim.paths import general
from nicsim.wire import telemetry
from nicsim.wire.packet import (
    ETH_FCS,
    ETH_HLEN,
    ETH_IFG,
    ETH_MIN_FRAME,
    ETH_P_IPV4,
    ETH_P_IPV6,
    ETH_PREAMBLE,
    IPV4_HLEN,
    IPV6_HLEN,
    Ecn,
    is_multicast_ip,
)

NUM_CLASSES = NUM_PRIORITIES
ETH_P_8021Q = 0x8100
ETH_P_8021AD = 0x88A8  # QinQ service tag (802.1ad)
VLAN_TAG_LEN = 4
_WIRE_EXTRA = ETH_PREAMBLE + ETH_FCS + ETH_IFG  # line bytes around each frame
_LAST_BIT = ETH_PREAMBLE + ETH_FCS  # line bytes of a frame up to its last bit, beside the frame
_INF = math.inf
# Flow keys: the frame up to the UDP/TCP ports, untagged IPv4 without options / IPv6.
_KEY4 = ETH_HLEN + IPV4_HLEN + 4
_KEY6 = ETH_HLEN + IPV6_HLEN + 4
_FLOW_CACHE = 1 << 16  # flows remembered per ingress port (about 200 bytes each)
_RAND_BATCH = 4096  # RED coin flips drawn at a time


class Classify(Enum):
    """Where a frame's traffic class comes from."""

    DSCP = "dscp"
    PCP = "pcp"


class Scheduler(Enum):
    """How an egress port picks between its class queues."""

    STRICT = "strict"  # the highest class with a frame ready
    DWRR = "dwrr"  # deficit weighted round robin on bytes (Shreedhar & Varghese)


class DropReason(Enum):
    """Why a frame that had a queue to go to was dropped (counter suffix)."""

    DYNAMIC_THRESHOLD = "dynamic_threshold"
    BUFFER_FULL = "buffer_full"
    HEADROOM_OVERFLOW = "headroom_overflow"


class SwitchDrop(Enum):
    """Why a frame was dropped before a queue was chosen (counter `drop.<value>`)."""

    NO_ROUTE = "no_route"
    TTL = "ttl"
    NOT_IP = "not_ip"
    BAD_IP_HEADER = "bad_ip_header"
    TRUNCATED = "truncated"
    OVERSIZE = "oversize"
    NOT_OUR_MAC = "not_our_mac"
    MAC_CONTROL = "mac_control"  # a MAC Control opcode the switch does not act on
    MCAST_OFF_TREE = "mcast_off_tree"  # a group frame in on a port not on the flood tree


_DROPS = tuple(SwitchDrop)
(_D_NO_ROUTE, _D_TTL, _D_NOT_IP, _D_BAD_IP, _D_TRUNC, _D_OVERSIZE, _D_MAC, _D_MACCTL,
 _D_MCAST_OFF_TREE) = range(len(_DROPS))


# --- configuration ----------------------------------------------------------------------------


def _fail(name: str, why: str) -> ValueError:
    return ValueError(f"{name}: {why}")


@dataclass(frozen=True)
class RedConfig:
    """RED/WRED ECN marking of one class (defaults: the DCQCN paper, Zhu et al. 2015:
    Kmin 5 KB, Kmax 200 KB, Pmax 1%)."""

    kmin_bytes: int = 5_000
    kmax_bytes: int = 200_000
    pmax: float = 0.01

    def check(self, where: str) -> None:
        if self.kmin_bytes < 0:
            raise _fail(f"{where}.kmin_bytes", f"{self.kmin_bytes} is negative")
        if self.kmin_bytes > self.kmax_bytes:
            raise _fail(f"{where}.kmin_bytes", f"Kmin {self.kmin_bytes} is above Kmax "
                        f"{self.kmax_bytes}")
        if not 0.0 <= self.pmax <= 1.0:
            raise _fail(f"{where}.pmax", f"{self.pmax} is not a probability in [0, 1]")

    def probability(self, depth: int) -> float:
        """The marking probability of an ECT frame that finds `depth` bytes queued."""
        if depth < self.kmin_bytes:
            return 0.0
        if depth >= self.kmax_bytes:
            return 1.0
        return self.pmax * (depth - self.kmin_bytes) / (self.kmax_bytes - self.kmin_bytes)


@dataclass(frozen=True)
class PfcConfig:
    """Priority flow control (802.1Qbb) of the switch's lossless classes."""

    enabled: bool = True
    classes: tuple[int, ...] = (3,)  # lossless classes (= priorities)
    # XOFF threshold of an ingress PG: a fixed number of bytes, or (None) dynamic:
    # alpha x the free shared pool, Broadcom's dynamic threshold applied at ingress.
    xoff_bytes: int | None = None
    alpha: float = 0.125
    # XON = XOFF threshold - this (None: 2 MTU frames).
    xon_offset_bytes: int | None = None
    # Headroom per (port, lossless class): None computes it (pfc_headroom_bytes); a value
    # must be at least what that gives for every port.
    headroom_bytes: int | None = None
    # Time the sender upstream may take to act on a PFC frame beyond finishing its frame in
    # progress (802.1Qbb allows a bounded response delay); added to the headroom.
    response_ns: float = 0.0
    # The storm breaker of the egress queues of lossless classes (see PfcWatchdog).
    watchdog: PfcWatchdog = PfcWatchdog()

    def check(self) -> None:
        if len(set(self.classes)) != len(self.classes) or \
                any(not 0 <= c < NUM_CLASSES for c in self.classes):
            raise _fail("pfc.classes", f"{self.classes} must be distinct classes in 0..7")
        if self.xoff_bytes is not None and self.xoff_bytes <= 0:
            raise _fail("pfc.xoff_bytes", f"{self.xoff_bytes} must be positive")
        if not self.alpha > 0:
            raise _fail("pfc.alpha", f"{self.alpha} must be > 0")
        if self.xon_offset_bytes is not None and self.xon_offset_bytes < 0:
            raise _fail("pfc.xon_offset_bytes", f"{self.xon_offset_bytes} is negative")
        if self.headroom_bytes is not None and self.headroom_bytes < 0:
            raise _fail("pfc.headroom_bytes", f"{self.headroom_bytes} is negative")
        if not self.response_ns >= 0:
            raise _fail("pfc.response_ns", f"{self.response_ns} is negative")

    @property
    def lossless(self) -> tuple[int, ...]:
        return self.classes if self.enabled else ()


DSCP_TO_CLASS = tuple(d >> 3 for d in range(64))  # the class selector: DSCP's top 3 bits
PCP_TO_CLASS = tuple(range(NUM_CLASSES))
_DCQCN_RED = RedConfig()


@dataclass(frozen=True)
class SwitchConfig:
    """One switch's parameters. Strings are accepted for the enums (YAML scenarios)."""

    # About a Broadcom Trident II, the switch of the DCQCN paper's testbed.
    buffer_bytes: int = 12 * 1024 * 1024
    alpha: float = 1.0  # dynamic threshold of lossy egress queues
    mtu_bytes: int = 9216  # largest frame (without FCS, tags included); longer: dropped
    fwd_latency_ns: float = 500.0
    classify: Classify = Classify.DSCP
    dscp_map: tuple[int, ...] = DSCP_TO_CLASS
    pcp_map: tuple[int, ...] = PCP_TO_CLASS
    default_priority: int = 0  # untagged frames' priority when classifying by PCP
    scheduler: Scheduler = Scheduler.STRICT
    dwrr_weights: tuple[float, ...] = (1.0,) * NUM_CLASSES
    red: tuple[RedConfig | None, ...] = (_DCQCN_RED,) * NUM_CLASSES  # None: no marking
    pfc: PfcConfig = PfcConfig()
    # HPCC's in-band telemetry: a record of the egress port on every RoCEv2 frame sent
    # (nicsim.wire.telemetry; see "INT" in the module docstring).
    int_telemetry: bool = False

    def __post_init__(self) -> None:
        for name, enum in (("classify", Classify), ("scheduler", Scheduler)):
            v = getattr(self, name)
            if not isinstance(v, enum):
                try:
                    object.__setattr__(self, name, enum(v))
                except ValueError:
                    names = ", ".join(e.value for e in enum)
                    raise _fail(name, f"unknown {v!r} (one of {names})") from None
        if not self.buffer_bytes > 0:
            raise _fail("buffer_bytes", f"{self.buffer_bytes} must be positive")
        if not self.alpha > 0:
            raise _fail("alpha", f"{self.alpha} must be > 0")
        if self.mtu_bytes < ETH_MIN_FRAME:
            raise _fail("mtu_bytes", f"{self.mtu_bytes} is below the {ETH_MIN_FRAME}-byte "
                        "minimum frame")
        if not self.fwd_latency_ns >= 0:
            raise _fail("fwd_latency_ns", f"{self.fwd_latency_ns} is negative")
        for name, size in (("dscp_map", 64), ("pcp_map", NUM_CLASSES)):
            m = getattr(self, name)
            if len(m) != size or any(not (isinstance(c, int) and 0 <= c < NUM_CLASSES)
                                     for c in m):
                raise _fail(name, f"needs {size} classes in 0..7, got {tuple(m)}")
        if not 0 <= self.default_priority < NUM_CLASSES:
            raise _fail("default_priority", f"{self.default_priority} is not in 0..7")
        w = self.dwrr_weights
        if len(w) != NUM_CLASSES or any(
                isinstance(x, bool) or not isinstance(x, int | float) or not x > 0
                or not math.isfinite(x) for x in w):
            raise _fail("dwrr_weights", f"needs 8 positive numbers, got {tuple(w)}")
        if len(self.red) != NUM_CLASSES:
            raise _fail("red", f"needs one entry (or None) per class, got {len(self.red)}")
        for c, r in enumerate(self.red):
            if r is not None:
                r.check(f"red[{c}]")
        self.pfc.check()

    @property
    def xon_offset(self) -> int:
        off = self.pfc.xon_offset_bytes
        return 2 * self.mtu_bytes if off is None else off


@dataclass(frozen=True)
class PortSpec:
    """What the buffer check needs to know of a switch port: its link."""

    rate_gbps: float
    prop_ns: float


def pfc_headroom_bytes(rate_gbps: float, prop_ns: float, mtu_bytes: int,
                       lossless_classes: int = 1, response_ns: float = 0.0) -> int:
    """Bytes that can still arrive on one (port, lossless class) after the switch decides to
    pause it, which its reserved headroom must hold:

        H = M                      the frame whose arrival made the XOFF decision
          + (M + W)                the PFC frame waits behind a max frame that the reverse
                                   link (our egress to the sender) has just started
          + n (P + W)              the PFC frame's own time on the wire, behind the PFC
                                   frames of the port's other lossless classes (n of them)
          + R/8 (2 d + t_resp)     the cable round trip (the PFC frame goes up, the last
                                   data comes down) and the sender's response time
          + (M + W)                the frame the sender has just started when the PFC frame
                                   arrives: it finishes it (802.1Qbb: stop after the frame)

    M = mtu_bytes (largest frame, no FCS), P = 60 (a PFC frame, minimum size), W = 24 line
    bytes around each frame (preamble + SFD 8, FCS 4, inter-frame gap 12), R the link rate in
    Gb/s (R/8 bytes per ns), d the propagation delay of the cable in ns, t_resp the
    sender's response time beyond finishing its frame. Time on the wire counts as bytes at
    the line rate, both directions having the same rate; buffered bytes (frames without
    preamble, FCS and gap) are fewer than line bytes, so the bound holds with margin.
    Rounded up to whole bytes.
    """
    w = _WIRE_EXTRA
    m = mtu_bytes
    fixed = m + (m + w) + lossless_classes * (ETH_MIN_FRAME + w) + (m + w)
    return math.ceil(fixed + rate_gbps / 8.0 * (2.0 * prop_ns + response_ns))


def check_switch_config(cfg: SwitchConfig, ports: Sequence[PortSpec]) -> list[int]:
    """Check a switch config against the ports it will have (before a run); returns each
    port's headroom per lossless class (0 without PFC). Raises ValueError, one line naming
    the field, when a configured headroom cannot hold the bytes in flight or the buffer
    cannot hold one MTU frame on top of all the headroom it reserves."""
    lossless = cfg.pfc.lossless
    heads = []
    for i, p in enumerate(ports):
        if not p.rate_gbps > 0 or not p.prop_ns >= 0:
            raise _fail(f"port {i}", f"rate {p.rate_gbps} Gb/s / delay {p.prop_ns} ns")
        if not lossless:
            heads.append(0)
            continue
        need = pfc_headroom_bytes(p.rate_gbps, p.prop_ns, cfg.mtu_bytes, len(lossless),
                                  cfg.pfc.response_ns)
        have = cfg.pfc.headroom_bytes
        if have is not None and have < need:
            raise _fail("pfc.headroom_bytes",
                        f"{have} bytes cannot hold the {need} bytes in flight on port {i} "
                        f"({p.rate_gbps:g} Gb/s, {p.prop_ns:g} ns cable, {cfg.mtu_bytes}-byte "
                        "MTU)")
        heads.append(need if have is None else have)
    reserved = sum(heads) * len(lossless)
    if cfg.buffer_bytes < cfg.mtu_bytes + reserved:
        raise _fail("buffer_bytes",
                    f"{cfg.buffer_bytes} bytes is less than one {cfg.mtu_bytes}-byte frame plus "
                    f"{reserved} bytes of PFC headroom ({len(ports)} ports x {len(lossless)} "
                    "lossless classes)")
    return heads


# --- the switch -------------------------------------------------------------------------------


class _Port:
    """One switch port: its egress queues and transmitter, and its ingress PG accounting."""

    __slots__ = (
        "idx", "link", "end", "mac", "rate", "npb", "pause_ns", "headroom",
        # egress
        "flows", "queues", "queued", "mask", "ctrl", "depth", "free", "wake_at", "token", "wake",
        "paused_until",
        "pause_since", "paused_acc", "deficit", "dwrr_cur", "dwrr_fresh",
        "enq", "enq_bytes", "drop_dt", "drop_full", "marked", "max_depth",
        "rx_frames", "rx_bytes", "ctrl_frames", "ctrl_bytes", "pause_sent", "resume_sent",
        "pause_received", "pause_8023x", "bad_pfc",
        # ingress priority groups (lossless classes)
        "pg_shared", "pg_head", "pg_max", "pg_head_max", "xoff", "xoff_count",
        "drop_headroom", "refresh_gen",
        # PFC watchdog (egress lossless classes): watching, stormed, the last pause heard,
        # and its counters
        "wd_watch", "wd_storm", "wd_last_pause", "wd_storms", "wd_restores", "wd_dropped",
        "wd_dropped_bytes", "wd_ignored",
        # INT (nicsim.wire.telemetry): the link rate's code, bytes sent, bytes INT added,
        # frames stamped
        "int_code", "int_tx", "int_added", "int_stamped",
    )

    def __init__(self, idx: int, link: Link, mac: bytes, headroom: int) -> None:
        self.idx = idx
        self.link = link
        self.end = 0
        self.mac = mac
        self.rate = link.cfg.rate_gbps
        self.npb = 8.0 / self.rate  # ns per byte
        self.pause_ns = quanta_ns(MAX_QUANTA, self.rate)
        self.headroom = headroom
        z = [0] * NUM_CLASSES
        # Flow key -> routing decision, for frames arriving on this port (Switch._receive).
        self.flows: dict[bytes, tuple[_Port, int, bytes, bytes, int, bool]] = {}
        self.queued = 0  # frames in all class queues
        self.mask = 0  # bit c set: class c's queue has frames
        self.queues: list[deque[tuple[float, bytes, _Port]]] = \
            [deque() for _ in range(NUM_CLASSES)]
        self.ctrl: deque[bytes] = deque()
        self.depth = list(z)
        self.free = 0.0  # when the transmitter is next idle
        self.wake_at = _INF  # the transmitter's pending timer (inf: none)
        self.token = 0  # the pending timer's number; older timers are stale
        self.wake: Callable[[Entry], None] = _no_wake
        self.paused_until = [0.0] * NUM_CLASSES
        self.pause_since = [0.0] * NUM_CLASSES
        self.paused_acc = [0.0] * NUM_CLASSES
        self.deficit = [0.0] * NUM_CLASSES
        self.dwrr_cur = NUM_CLASSES - 1
        self.dwrr_fresh = False
        self.enq, self.enq_bytes = list(z), list(z)  # dequeued: see Switch._serve
        self.drop_dt, self.drop_full, self.marked, self.max_depth = \
            list(z), list(z), list(z), list(z)
        self.rx_frames = self.rx_bytes = 0
        self.ctrl_frames = self.ctrl_bytes = 0  # control frames sent (PFC)
        self.pause_sent = self.resume_sent = self.pause_received = 0
        self.pause_8023x = self.bad_pfc = 0
        self.pg_shared, self.pg_head, self.pg_max, self.pg_head_max = \
            list(z), list(z), list(z), list(z)
        self.xoff = [False] * NUM_CLASSES
        self.xoff_count, self.drop_headroom, self.refresh_gen = list(z), list(z), list(z)
        self.wd_watch = [False] * NUM_CLASSES
        self.wd_storm = [False] * NUM_CLASSES
        self.wd_last_pause = [0.0] * NUM_CLASSES
        self.wd_storms, self.wd_restores, self.wd_dropped, self.wd_dropped_bytes, \
            self.wd_ignored = list(z), list(z), list(z), list(z), list(z)
        self.int_code = -1
        self.int_tx = self.int_added = self.int_stamped = 0


def _csum_update(hc: int, delta: int) -> int:
    """RFC 1624 eqn. 3: the new IPv4 header checksum from the old one and the sum of
    (~m + m') over the changed 16-bit words, in one's complement arithmetic."""
    s = (~hc & 0xFFFF) + delta
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _set_csum(h: bytearray, off: int, hc: int) -> bytes:
    h[off + 10] = hc >> 8
    h[off + 11] = hc & 0xFF
    return bytes(h)


def _no_wake(_ev: Entry) -> None:  # pragma: no cover - replaced in add_port
    raise AssertionError("port has no transmitter")


class Switch:
    """An L3 (routed) output-queued switch; see the module docstring for the model.

    `add_port` attaches it to a link, `add_route` fills its routing table (the topology
    builder does both), `counters()` and `depth()` show what happened.
    """

    def __init__(self, env: Sim, name: str, cfg: SwitchConfig,
                 seed: int) -> None:
        self.env = env
        self.name = name
        self.cfg = cfg
        self.ports: list[_Port] = []
        self._routes: dict[bytes, tuple[tuple[_Port, bytes], ...]] = {}
        self._flood_ports: list[_Port] | None = None  # None: every port
        self._mcast_flooded = 0
        # Salt and coin flips differ between switches of one world even if a topology gives
        # them all the same seed: the name goes into both.
        tag = zlib.crc32(name.encode())
        self._salt = int(np.random.default_rng([seed, tag, 1]).integers(1 << 32))
        self._rng = np.random.default_rng([seed, tag, 0])
        # As Python floats (the same values): a numpy scalar per coin costs more than the coin.
        self._u: list[float] = self._rng.random(_RAND_BATCH).tolist()
        self._ui = 0
        self._drops = [0] * len(_DROPS)
        self._lossless = tuple(c in cfg.pfc.lossless for c in range(NUM_CLASSES))
        self._wd = cfg.pfc.watchdog if cfg.pfc.watchdog.enabled and cfg.pfc.lossless else None
        self._xoff_static = cfg.pfc.xoff_bytes
        self._pfc_alpha = cfg.pfc.alpha
        self._xon_offset = cfg.xon_offset
        self._alpha = cfg.alpha
        self._mtu = cfg.mtu_bytes
        self._remember = not general()  # each flow's decision (nicsim.sim.paths)
        self._fwd = float(cfg.fwd_latency_ns)
        self._pcp = cfg.classify is Classify.PCP
        self._dscp_map = cfg.dscp_map
        self._pcp_map = cfg.pcp_map
        self._default_tc = cfg.pcp_map[cfg.default_priority]
        # RED per class as (kmin, kmax, pmax / (kmax - kmin)), or None.
        self._red = tuple(
            None if r is None else
            (r.kmin_bytes, r.kmax_bytes,
             r.pmax / (r.kmax_bytes - r.kmin_bytes) if r.kmax_bytes > r.kmin_bytes else 0.0)
            for r in cfg.red)
        wmin = min(cfg.dwrr_weights)
        # A turn of the lightest class may send one max frame; others in proportion.
        self._quantum = tuple(w / wmin * cfg.mtu_bytes for w in cfg.dwrr_weights)
        self._dwrr = cfg.scheduler is Scheduler.DWRR
        self._specs: list[PortSpec] = []
        self._shared = cfg.buffer_bytes  # the shared pool: buffer minus reserved headroom
        self._used = 0  # shared pool bytes in use
        self._max_used = 0
        self._int = cfg.int_telemetry

    # --- building ---------------------------------------------------------------------------

    def add_port(self, link: Link, mac: bytes) -> int:
        """Attach a new port to `link` (its rate is the link's); returns the port number.
        Raises ValueError if the buffer cannot take the port's PFC headroom."""
        if len(mac) != 6:
            raise ValueError(f"{self.name}: MAC address must be 6 bytes, got {len(mac)}")
        specs = self._specs + [PortSpec(link.cfg.rate_gbps, link.cfg.prop_ns)]
        heads = check_switch_config(self.cfg, specs)
        ps = _Port(len(self.ports), link, bytes(mac), heads[-1])
        if self._int:
            try:
                ps.int_code = telemetry.rate_code(ps.rate)
            except ValueError as e:
                raise ValueError(f"{self.name}: int_telemetry: {e}") from None
        ps.end = link.attach(partial(self._receive, ps), direct=True)
        ps.wake = partial(self._serve, ps)
        self._specs = specs
        self.ports.append(ps)
        self._shared = self.cfg.buffer_bytes - sum(heads) * len(self.cfg.pfc.lossless)
        return ps.idx

    def add_route(self, dst_ip: bytes, hops: Sequence[tuple[int, bytes]]) -> None:
        """Route `dst_ip` (4 or 16 bytes, a host route) to `hops`: (port, next hop MAC), more
        than one for an ECMP group. A later call for the same address replaces the route."""
        if len(dst_ip) not in (4, 16):
            raise ValueError(f"{self.name}: destination must be 4 or 16 bytes, not "
                             f"{len(dst_ip)}")
        if not hops:
            raise ValueError(f"{self.name}: route to {dst_ip.hex()} has no next hop")
        group = []
        for port, mac in hops:
            if not 0 <= port < len(self.ports) or len(mac) != 6:
                raise ValueError(f"{self.name}: bad next hop (port {port}, MAC {mac.hex()})")
            ps = self.ports[port]
            group.append((ps, bytes(mac) + ps.mac))  # the new Ethernet addresses
        self._routes[bytes(dst_ip)] = tuple(group)
        for ps in self.ports:
            ps.flows.clear()  # decisions made with the old table

    # --- reading ----------------------------------------------------------------------------

    def depth(self, port: int, tc: int) -> int:
        """Bytes queued now in egress class `tc` of `port`."""
        return self.ports[port].depth[tc]

    @property
    def shared_bytes(self) -> int:
        """The shared pool: the buffer minus the PFC headroom reserved."""
        return self._shared

    @property
    def used_bytes(self) -> int:
        """Shared pool bytes in use now (headroom use is per PG, in the counters)."""
        return self._used

    def headroom(self, port: int) -> int:
        """The headroom reserved per lossless class on `port` (0 without PFC)."""
        return self.ports[port].headroom

    def ecmp_member(self, frame: bytes, members: int) -> int:
        """Which member of an ECMP group of `members` this switch gives `frame`'s flow."""
        off = ETH_HLEN
        et = frame[12] << 8 | frame[13]
        if et in (ETH_P_8021Q, ETH_P_8021AD):
            off += VLAN_TAG_LEN
            et = frame[16] << 8 | frame[17]
        return self._ecmp(frame, off, et == ETH_P_IPV6, members)

    def counters(self) -> dict[str, int]:
        """Every counter by name (see the module docstring), at the current time."""
        now = self.env.now
        out: dict[str, int] = {}
        tot = {r.value: 0 for r in DropReason}
        marked = 0
        for ps in self.ports:
            p = f"p{ps.idx}"
            out[f"{p}.rx_frames"] = ps.rx_frames
            out[f"{p}.rx_bytes"] = ps.rx_bytes
            out[f"{p}.tx_frames"] = ps.ctrl_frames + sum(
                self._dequeued(ps, c) for c in range(NUM_CLASSES))
            out[f"{p}.tx_bytes"] = ps.ctrl_bytes + ps.int_added + sum(
                ps.enq_bytes[c] - ps.depth[c] - ps.wd_dropped_bytes[c]
                for c in range(NUM_CLASSES))
            if self._int:
                out[f"{p}.int_stamped"] = ps.int_stamped
                out[f"{p}.int_bytes"] = ps.int_added
            out[f"{p}.pause_sent"] = ps.pause_sent
            out[f"{p}.resume_sent"] = ps.resume_sent
            out[f"{p}.pause_received"] = ps.pause_received
            out[f"{p}.pause_8023x_received"] = ps.pause_8023x
            out[f"{p}.bad_pfc_received"] = ps.bad_pfc
            for c in range(NUM_CLASSES):
                q = f"{p}.q{c}"
                out[f"{q}.enqueued"] = ps.enq[c]
                out[f"{q}.enqueued_bytes"] = ps.enq_bytes[c]
                out[f"{q}.dequeued"] = self._dequeued(ps, c)
                out[f"{q}.dequeued_bytes"] = ps.enq_bytes[c] - ps.depth[c] - \
                    ps.wd_dropped_bytes[c]
                out[f"{q}.dropped.dynamic_threshold"] = ps.drop_dt[c]
                out[f"{q}.dropped.buffer_full"] = ps.drop_full[c]
                out[f"{q}.ecn_marked"] = ps.marked[c]
                out[f"{q}.max_depth_bytes"] = ps.max_depth[c]
                out[f"{q}.paused_ns"] = round(self._paused_ns(ps, c, now))
                tot["dynamic_threshold"] += ps.drop_dt[c]
                tot["buffer_full"] += ps.drop_full[c]
                tot["headroom_overflow"] += ps.drop_headroom[c]
                marked += ps.marked[c]
            for c in self.cfg.pfc.lossless:
                g = f"{p}.pg{c}"
                out[f"{g}.max_bytes"] = ps.pg_max[c]
                out[f"{g}.headroom_max_bytes"] = ps.pg_head_max[c]
                out[f"{g}.xoff"] = ps.xoff_count[c]
                out[f"{g}.dropped.headroom_overflow"] = ps.drop_headroom[c]
                w = f"{p}.q{c}.pfc_wd"
                out[f"{w}.storms"] = ps.wd_storms[c]
                out[f"{w}.restores"] = ps.wd_restores[c]
                out[f"{w}.dropped"] = ps.wd_dropped[c]
                out[f"{w}.dropped_bytes"] = ps.wd_dropped_bytes[c]
                out[f"{w}.pauses_ignored"] = ps.wd_ignored[c]
        for d, n in zip(_DROPS, self._drops, strict=True):
            out[f"drop.{d.value}"] = n
        out["mcast_flooded"] = self._mcast_flooded
        for k, v in tot.items():
            out[f"dropped.{k}"] = v
        out["ecn_marked"] = marked
        out["buffer.shared_bytes"] = self._shared
        out["buffer.max_used_bytes"] = self._max_used
        return out

    @staticmethod
    def _dequeued(ps: _Port, c: int) -> int:
        """Frames class `c` of `ps` has sent (the watchdog's drops are not sent)."""
        return ps.enq[c] - len(ps.queues[c]) - ps.wd_dropped[c]

    @staticmethod
    def _paused_ns(ps: _Port, c: int, now: float) -> float:
        until = ps.paused_until[c]
        return ps.paused_acc[c] + max(0.0, min(now, until) - ps.pause_since[c])

    # --- ingress ----------------------------------------------------------------------------

    def _receive(self, ip: _Port, frame: bytes) -> None:
        """A frame's last bit has arrived on port `ip`: route, admit, mark, rewrite, enqueue.

        Runs per frame per hop, so the decision that depends only on the headers (checks,
        route, ECMP member, class, the rewritten header with and without CE) is looked up per
        flow: for an untagged IPv4 (no options) or IPv6 frame, the bytes up to the UDP ports
        hold every input of that decision, and the frames of a flow repeat them. Anything
        else, and a flow's first frame, takes `_route`.
        """
        n = len(frame)
        ip.rx_frames += 1
        ip.rx_bytes += n
        hit = None
        if n > _KEY6:
            b12 = frame[12]
            if b12 == 0x08 and frame[13] == 0x00 and frame[14] == 0x45:
                hit = ip.flows.get(frame[:_KEY4])
            elif b12 == 0x86 and frame[13] == 0xDD:
                hit = ip.flows.get(frame[:_KEY6])
        if hit is None:
            hit = self._route(ip, frame)
            if hit is None:
                return
        elif n > self._mtu:
            self._drops[_D_OVERSIZE] += 1
            return
        self._admit(ip, frame, hit)

    def _admit(self, ip: _Port, frame: bytes,
               hit: tuple[_Port, int, bytes, bytes, int, bool]) -> None:
        """Admit, mark and enqueue one routed frame (one copy of a flooded one)."""
        n = len(frame)
        eq, tc, head, head_ce, tail, ect = hit
        depth = eq.depth[tc]

        # Admission.
        free = self._shared - self._used
        if self._lossless[tc]:
            # Against the ingress PG: shared pool below XOFF, then headroom (see module doc).
            shared = ip.pg_shared[tc]
            xoff = self._xoff_static
            if xoff is None:
                xoff = self._pfc_alpha * free
            if not ip.xoff[tc] and n <= free and shared + n <= xoff:
                ip.pg_shared[tc] = shared + n
                self._used += n
                if self._used > self._max_used:
                    self._max_used = self._used
                pg = shared + n + ip.pg_head[tc]
            else:
                hr = ip.pg_head[tc] + n
                if not ip.xoff[tc]:
                    self._xoff(ip, tc)
                if hr > ip.headroom:
                    ip.drop_headroom[tc] += 1
                    return
                ip.pg_head[tc] = hr
                if hr > ip.pg_head_max[tc]:
                    ip.pg_head_max[tc] = hr
                pg = shared + hr
            if pg > ip.pg_max[tc]:
                ip.pg_max[tc] = pg
        else:
            if n > free:
                eq.drop_full[tc] += 1
                return
            if depth + n > self._alpha * free:
                eq.drop_dt[tc] += 1
                return
            self._used += n
            if self._used > self._max_used:
                self._max_used = self._used

        # ECN: RED on the depth this frame finds, ECT only (RFC 3168 5).
        if ect:
            red = self._red[tc]
            if red is not None and depth >= red[0]:
                if depth >= red[1]:
                    head = head_ce
                else:
                    i = self._ui
                    if i == _RAND_BATCH:
                        self._u = self._rng.random(_RAND_BATCH).tolist()
                        i = 0
                    self._ui = i + 1
                    if self._u[i] < (depth - red[0]) * red[2]:
                        head = head_ce
                if head is head_ce:
                    eq.marked[tc] += 1

        ready = self.env.now + self._fwd
        eq.queues[tc].append((ready, head + frame[tail:], ip))
        eq.queued += 1
        eq.mask |= 1 << tc
        depth += n
        eq.depth[tc] = depth
        if depth > eq.max_depth[tc]:
            eq.max_depth[tc] = depth
        eq.enq[tc] += 1
        eq.enq_bytes[tc] += n
        t = ready if ready > eq.free else eq.free
        if t < eq.wake_at:
            self._wake_at(eq, t)

    def _route(self, ip: _Port, frame: bytes) -> tuple[_Port, int, bytes, bytes, int, bool] | None:
        """Parse, check and route a frame: (egress port, class, rewritten header, the same
        with ECN CE, offset where the unchanged rest of the frame starts, ECT?), or None when
        the frame goes no further (a drop, counted, or a MAC Control frame, acted on). The
        answer of an untagged frame is remembered for its flow (see _receive)."""
        n = len(frame)
        if n < ETH_HLEN:
            self._drops[_D_TRUNC] += 1
            return None
        et = frame[12] << 8 | frame[13]
        off = ETH_HLEN
        pcp = -1
        if et in (ETH_P_8021Q, ETH_P_8021AD):
            # 802.1Q tag: TPID, then PCP (3 bits), DEI, VID; a QinQ frame has a second tag
            # after the service tag. The outer tag's PCP is the frame's priority.
            if n < off + VLAN_TAG_LEN + 2:
                self._drops[_D_TRUNC] += 1
                return None
            pcp = frame[14] >> 5
            et = frame[16] << 8 | frame[17]
            off += VLAN_TAG_LEN
            if et == ETH_P_8021Q:
                if n < off + VLAN_TAG_LEN + 2:
                    self._drops[_D_TRUNC] += 1
                    return None
                et = frame[off + 2] << 8 | frame[off + 3]
                off += VLAN_TAG_LEN
        if et == ETH_P_IPV4:
            if n < off + IPV4_HLEN:
                self._drops[_D_TRUNC] += 1
                return None
            vihl = frame[off]
            if vihl >> 4 != 4 or vihl & 0xF < 5:
                self._drops[_D_BAD_IP] += 1
                return None
            v6 = False
            tos = frame[off + 1]
            ttl = frame[off + 8]
            dip = frame[off + 16:off + 20]
        elif et == ETH_P_IPV6:
            if n < off + IPV6_HLEN:
                self._drops[_D_TRUNC] += 1
                return None
            if frame[off] >> 4 != 6:
                self._drops[_D_BAD_IP] += 1
                return None
            v6 = True
            tos = (frame[off] & 0xF) << 4 | frame[off + 1] >> 4  # the traffic class
            ttl = frame[off + 7]  # hop limit
            dip = frame[off + 24:off + 40]
        elif et == ETH_P_MAC_CONTROL and off == ETH_HLEN:
            self._mac_control(ip, frame)
            return None
        else:
            self._drops[_D_NOT_IP] += 1
            return None
        if n > self._mtu:
            self._drops[_D_OVERSIZE] += 1
            return None
        group = bool(frame[0] & 1)
        if frame[0:6] != ip.mac and not (group and is_multicast_ip(dip)):
            self._drops[_D_MAC] += 1
            return None
        # RFC 1812 5.3.1 / RFC 8200 3: a router decrements TTL / hop limit and discards the
        # packet if that leaves 0.
        if ttl <= 1:
            self._drops[_D_TTL] += 1
            return None
        if self._pcp:
            tc = self._pcp_map[pcp] if pcp >= 0 else self._default_tc
        else:
            tc = self._dscp_map[tos >> 2]
        ecn = tos & 3
        ect = ecn == Ecn.ECT0.value or ecn == Ecn.ECT1.value
        if group:
            self._flood(ip, frame, off, v6, tos, ttl, tc, ect)
            return None
        hops = self._routes.get(dip)
        if hops is None:
            self._drops[_D_NO_ROUTE] += 1
            return None
        eq, l2 = hops[0] if len(hops) == 1 else hops[self._ecmp(frame, off, v6, len(hops))]
        head, head_ce, tail = self._rewrite(frame, off, v6, tos, ttl, l2)
        hit = (eq, tc, head, head_ce, tail, ect)
        if self._remember and off == ETH_HLEN and (v6 or frame[ETH_HLEN] == 0x45):
            flows = ip.flows
            if len(flows) >= _FLOW_CACHE:
                flows.clear()
            flows[frame[:_KEY6 if v6 else _KEY4]] = hit
        return hit

    def _flood(self, ip: _Port, frame: bytes, off: int, v6: bool, tos: int, ttl: int, tc: int,
               ect: bool) -> None:
        """An IP multicast frame: a copy out of every flood port but the one it came in on,
        with the group's Ethernet address kept and the egress port's as the source. Flood
        ports are the fabric's spanning tree (set_flood_ports), so no copy comes back round
        a loop; a group frame arriving on a port off the tree is dropped."""
        ports = self.ports if self._flood_ports is None else self._flood_ports
        if ip not in ports:
            self._drops[_D_MCAST_OFF_TREE] += 1
            return
        self._mcast_flooded += 1
        for eq in ports:
            if eq is not ip:
                head, head_ce, tail = self._rewrite(frame, off, v6, tos, ttl,
                                                    frame[0:6] + eq.mac)
                self._admit(ip, frame, (eq, tc, head, head_ce, tail, ect))

    def set_flood_ports(self, ports: Sequence[int]) -> None:
        """The ports multicast frames are flooded to (a spanning tree of the fabric); all
        ports until this is called."""
        for p in ports:
            if not 0 <= p < len(self.ports):
                raise ValueError(f"{self.name}: no port {p} to flood to")
        self._flood_ports = [self.ports[p] for p in sorted(set(ports))]

    @staticmethod
    def _rewrite(frame: bytes, off: int, v6: bool, tos: int, ttl: int,
                 l2: bytes) -> tuple[bytes, bytes, int]:
        """The forwarded header (new Ethernet addresses `l2`, TTL - 1), the same with ECN
        CE, and where the unchanged rest of the frame starts."""
        if v6:
            tail = off + 8
            h = bytearray(frame[:tail])
            h[off + 7] = ttl - 1
            h[0:12] = l2
            head = bytes(h)
            h[off + 1] |= 0x30  # ECN is bits 4-5 of the second byte
            head_ce = bytes(h)
        else:
            tail = off + 12
            h = bytearray(frame[:tail])
            h[off + 8] = ttl - 1
            h[0:12] = l2
            hc = h[off + 10] << 8 | h[off + 11]
            # RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') for each changed 16-bit word m -> m'.
            # TTL is the high byte of (TTL, protocol): ~m + m' = 0xFFFF - 0x0100.
            head = _set_csum(h, off, _csum_update(hc, 0xFEFF))
            # CE: the low byte of (version/IHL, TOS) goes from tos to tos | 3.
            h[off + 1] = tos | Ecn.CE.value
            head_ce = _set_csum(h, off, _csum_update(hc, 0xFEFF + 0xFFFF - tos + (tos | 3)))
        return head, head_ce, tail

    def _ecmp(self, frame: bytes, off: int, v6: bool, members: int) -> int:
        """ECMP member for the frame's 5-tuple: CRC-32 seeded with the switch's salt over the
        addresses and ports, then a non-linear mix (MurmurHash3's finalizer) of the CRC and
        the salt, so that two switches split one set of flows independently."""
        if v6:
            proto = frame[off + 6]
            h = zlib.crc32(frame[off + 8:off + 40], self._salt)
            l4 = off + IPV6_HLEN
        else:
            proto = frame[off + 9]
            h = zlib.crc32(frame[off + 12:off + 20], self._salt)
            l4 = off + (frame[off] & 0xF) * 4
        if proto == 17 or proto == 6:  # UDP / TCP: source and destination ports
            h = zlib.crc32(frame[l4:l4 + 4], h)
        h ^= proto << 24 ^ self._salt
        h ^= h >> 16
        h = h * 0x85EBCA6B & 0xFFFFFFFF
        h ^= h >> 13
        h = h * 0xC2B2AE35 & 0xFFFFFFFF
        h ^= h >> 16
        return h * members >> 32

    # --- PFC --------------------------------------------------------------------------------

    def _mac_control(self, ip: _Port, frame: bytes) -> None:
        """A MAC Control frame: PFC pauses / resumes this port's egress classes; PAUSE is
        counted (see module doc); MAC Control frames are never forwarded (802.3 31B)."""
        if len(frame) < ETH_HLEN + 2:
            self._drops[_D_TRUNC] += 1
            return
        opcode = frame[14] << 8 | frame[15]
        if opcode == PAUSE_OPCODE:
            ip.pause_8023x += 1
            return
        if opcode != PFC_OPCODE:
            self._drops[_D_MACCTL] += 1
            return
        try:
            pf = parse_pfc(frame)
        except PfcFormatError:
            ip.bad_pfc += 1
            return
        ip.pause_received += 1
        now = self.env.now
        for c, quanta in pf.pauses().items():
            if not self._lossless[c]:
                continue  # PFC is enabled per priority (802.1Qbb); others ignore it
            if quanta:
                ip.wd_last_pause[c] = now
            if ip.wd_storm[c]:
                ip.wd_ignored[c] += 1  # a stormed queue does not stop (see _wd_check)
                continue
            # The pause time runs from the frame's reception; a new frame replaces the time
            # left, and 0 ends the pause.
            self._set_pause(ip, c, now + quanta_ns(quanta, ip.rate), now)
            if quanta and self._wd is not None and ip.queues[c] and not ip.wd_watch[c]:
                self._wd_watch(ip, c)
        # A resumed class may send at once (after the frame in progress); a paused one stops.
        t = now if now > ip.free else ip.free
        if t < ip.wake_at and ip.queued:
            self._wake_at(ip, t)

    @staticmethod
    def _set_pause(ps: _Port, c: int, until: float, now: float) -> None:
        """Egress class `c` of `ps` is paused until `until` (now: resumed), from now on."""
        before = ps.paused_until[c]
        if before > now:
            ps.paused_acc[c] += now - ps.pause_since[c]
        else:
            ps.paused_acc[c] += before - ps.pause_since[c]
        ps.pause_since[c] = now
        ps.paused_until[c] = until

    # --- the PFC watchdog (PfcWatchdog; SONiC's pfcwd with action "drop") ---------------------

    def _wd_watch(self, ps: _Port, c: int) -> None:
        """A paused lossless queue with frames: look again after the detection time. It is
        stormed if the same frame is still at its head and the class still paused then."""
        assert self._wd is not None
        ps.wd_watch[c] = True
        head = ps.queues[c][0]
        self.env.timeout(self._wd.detect_ns).callbacks.append(
            lambda _e: self._wd_check(ps, c, head))

    def _wd_check(self, ps: _Port, c: int, head: tuple) -> None:
        ps.wd_watch[c] = False
        q = ps.queues[c]
        now = self.env.now
        if not q or ps.paused_until[c] <= now:
            return  # drained, or no longer paused: no storm
        if q[0] is not head:
            self._wd_watch(ps, c)  # frames left meanwhile: a pause, not a storm; watch on
            return
        assert self._wd is not None
        ps.wd_storm[c] = True
        ps.wd_storms[c] += 1
        self._set_pause(ps, c, now, now)  # pauses are ignored from now on
        self._wd_drop(ps, c)
        ps.wake = partial(self._serve_stormed, ps)
        self._wake_at(ps, now if now > ps.free else ps.free)
        self._wd_restore_later(ps, c, now + self._wd.restore_ns)

    def _wd_drop(self, ps: _Port, c: int) -> None:
        """Drop every frame of stormed class `c` of `ps`, giving its bytes back to the ingress
        priority group that holds them (which may then resume its sender)."""
        q = ps.queues[c]
        while q:
            _ready, frame, ip = q.popleft()
            n = len(frame)
            ps.queued -= 1
            ps.depth[c] -= n
            ps.wd_dropped[c] += 1
            ps.wd_dropped_bytes[c] += n
            self._release(ip, c, n)
        ps.mask &= ~(1 << c)

    def _serve_stormed(self, ps: _Port, ev: Entry) -> None:
        """The transmitter of a port with a stormed class: that class's frames are dropped
        instead of sent, the rest served as ever."""
        for c in range(NUM_CLASSES):
            if ps.wd_storm[c] and ps.queues[c]:
                self._wd_drop(ps, c)
        self._serve(ps, ev)

    def _wd_restore_later(self, ps: _Port, c: int, at: float) -> None:
        self.env.timeout(at - self.env.now).callbacks.append(
            lambda _e: self._wd_restore(ps, c))

    def _wd_restore(self, ps: _Port, c: int) -> None:
        """The storm is over once no pause has come for the restoration time."""
        assert self._wd is not None
        quiet_since = ps.wd_last_pause[c] + self._wd.restore_ns
        if quiet_since > self.env.now:
            self._wd_restore_later(ps, c, quiet_since)
            return
        ps.wd_storm[c] = False
        ps.wd_restores[c] += 1
        if not any(ps.wd_storm):
            ps.wake = partial(self._serve, ps)

    def _send_pfc(self, ps: _Port, tc: int, quanta: int) -> None:
        ps.ctrl.append(pfc_frame(ps.mac, {tc: quanta}))
        if quanta:
            ps.pause_sent += 1
        else:
            ps.resume_sent += 1
        now = self.env.now
        t = now if now > ps.free else ps.free
        if t < ps.wake_at:
            self._wake_at(ps, t)

    def _xoff(self, ps: _Port, tc: int) -> None:
        ps.xoff[tc] = True
        ps.xoff_count[tc] += 1
        self._send_pfc(ps, tc, MAX_QUANTA)
        ps.refresh_gen[tc] += 1
        self._refresh_later(ps, tc, ps.refresh_gen[tc])

    def _refresh_later(self, ps: _Port, tc: int, gen: int) -> None:
        # Re-send the pause at half its time, so that the sender never resumes on its own
        # while the PG is still above XON (the PFC frame's trip takes far less than that).
        ev = self.env.timeout(ps.pause_ns / 2)
        ev.callbacks.append(lambda _ev: self._refresh(ps, tc, gen))

    def _refresh(self, ps: _Port, tc: int, gen: int) -> None:
        if ps.xoff[tc] and ps.refresh_gen[tc] == gen:
            self._send_pfc(ps, tc, MAX_QUANTA)
            self._refresh_later(ps, tc, gen)

    def _release(self, ip: _Port, tc: int, n: int) -> None:
        """A lossless frame left: give its bytes back to its ingress PG, headroom first (the
        headroom is the PG's overflow above its shared allotment, so it empties before the
        shared part does); resume at XON, once the headroom is empty. So a PG that is not
        paused has an empty headroom, and each XOFF finds all of it free for the bytes in
        flight."""
        h = ip.pg_head[tc]
        if h >= n:
            ip.pg_head[tc] = h - n
        else:
            ip.pg_head[tc] = 0
            ip.pg_shared[tc] -= n - h
            self._used -= n - h
        if ip.xoff[tc] and not ip.pg_head[tc]:
            xoff = self._xoff_static
            if xoff is None:
                xoff = self._pfc_alpha * (self._shared - self._used)
            shared = ip.pg_shared[tc]
            if shared <= xoff - self._xon_offset or not shared:
                ip.xoff[tc] = False
                ip.refresh_gen[tc] += 1  # cancels the pending refresh
                self._send_pfc(ip, tc, 0)

    # --- egress -----------------------------------------------------------------------------

    def _wake_at(self, ps: _Port, t: float) -> None:
        """Have the transmitter look at its queues at time `t` (earlier than any timer it
        has pending; that one goes stale)."""
        ps.token += 1
        ps.wake_at = t
        self.env.at(t, Entry(ps.wake, ps.token))

    def _serve(self, ps: _Port, ev: Entry) -> None:
        """The transmitter's timer `ev`: unless an earlier timer superseded it, the
        transmitter is idle: send the next frame, or set a timer for when one can go.

        Runs per frame per hop: the dequeue counters are not kept here but derived
        (`counters`): a class has dequeued what it enqueued less what it holds, and a port
        has sent its control frames and what its classes dequeued."""
        if ev.value != ps.token:
            return  # superseded by an earlier timer
        now = self.env.now
        if ps.ctrl:
            frame = ps.ctrl.popleft()
            ps.ctrl_frames += 1
            ps.ctrl_bytes += len(frame)
        else:
            m = ps.mask
            if not m:
                ps.wake_at = _INF
                return
            qs = ps.queues
            pu = ps.paused_until
            if self._dwrr:
                tc = self._pick_dwrr(ps, now)
            else:
                # Strict priority: the highest class with a frame ready and not paused.
                tc = -1
                while m:
                    c = m.bit_length() - 1
                    if qs[c][0][0] <= now and pu[c] <= now:
                        tc = c
                        break
                    m ^= 1 << c
            if tc < 0:
                # Nothing may go now: wake when the earliest head is ready and unpaused.
                t = _INF
                m = ps.mask
                while m:
                    c = m.bit_length() - 1
                    m ^= 1 << c
                    r = qs[c][0][0]
                    if pu[c] > r:
                        r = pu[c]
                    if r < t:
                        t = r
                self._wake_at(ps, t)
                return
            q = qs[tc]
            _ready, frame, ip = q.popleft()
            if not q:
                ps.mask ^= 1 << tc
            ps.queued -= 1
            n = len(frame)
            ps.depth[tc] -= n
            if not self._lossless[tc]:
                self._used -= n
            elif ip.pg_head[tc] or ip.xoff[tc]:
                self._release(ip, tc, n)
            else:  # what _release does for a PG with nothing in its headroom, not paused
                ip.pg_shared[tc] -= n
                self._used -= n
        if self._int:
            frame = self._stamp(ps, frame, now)
        n = len(frame)
        w = n if n > ETH_MIN_FRAME else ETH_MIN_FRAME
        npb = ps.npb
        ps.link.carry(frame, ps.end, now + (w + _LAST_BIT) * npb)
        ps.free = free = now + (w + _WIRE_EXTRA) * npb
        ps.token += 1
        if ps.ctrl or ps.queued:
            ps.wake_at = free  # self._wake_at(ps, free), inline
            self.env.at(free, Entry(ps.wake, ps.token))
        else:
            ps.wake_at = _INF  # nothing waits: no timer until a frame comes

    @staticmethod
    def _stamp(ps: _Port, frame: bytes, now: float) -> bytes:
        """HPCC's INT record of this port, added to a RoCEv2 frame as it starts to leave
        (nicsim.wire.telemetry): the time, the bytes the port sent before it, the bytes still
        queued behind it (HPCC section 3.2: qLen, txBytes, ts, B). The frame's buffer
        accounting keeps its length as queued; the added bytes count in tx_bytes."""
        out = telemetry.stamp(frame, telemetry.pack_hop(ps.int_code, now, ps.int_tx,
                                                        sum(ps.depth)))
        if out is not None:
            ps.int_added += len(out) - len(frame)
            ps.int_stamped += 1
            frame = out
        ps.int_tx += len(frame)
        return frame

    def _pick_dwrr(self, ps: _Port, now: float) -> int:
        """Deficit round robin over the classes with a frame that may go now: a class's turn
        adds its quantum (weight x MTU / lightest weight) to its deficit and sends frames
        while the deficit covers them; a class with nothing queued loses its deficit."""
        qs = ps.queues
        pu = ps.paused_until
        deficit = ps.deficit
        quantum = self._quantum
        m = ps.mask
        while m:
            c = m.bit_length() - 1
            if qs[c][0][0] <= now and pu[c] <= now:
                break
            m ^= 1 << c
        else:
            return -1
        c = ps.dwrr_cur
        while True:
            q = qs[c]
            if q and q[0][0] <= now and pu[c] <= now:
                if not ps.dwrr_fresh:
                    deficit[c] += quantum[c]
                    ps.dwrr_fresh = True
                n = len(q[0][1])
                if n <= deficit[c]:
                    deficit[c] -= n
                    ps.dwrr_cur = c
                    return c
            elif not q:
                deficit[c] = 0.0
            c = c - 1 if c else NUM_CLASSES - 1
            ps.dwrr_cur = c
            ps.dwrr_fresh = False
