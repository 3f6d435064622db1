"""A physics checker: what no run may ever show, watched while it runs.

Attached to a world (`PhysicsChecker(world)`, once its links and NICs exist), it observes
through the public hooks only (each link's taps, each NIC's stage events) and lists every
violation of:

- **the wire's rate**: no transmitter puts frames on a link faster than its rate allows: each
  frame starts no earlier than the one before it has left, inter-frame gap included, so over
  any window no more than rate x window plus one frame goes out;
- **causality of completions**: a successful send completion lands in host memory no earlier
  than the last bit of its last packet leaving the port (UD and UC, IBA 9.8.1), or than the
  acknowledgement or response covering its last packet reaching the NIC (RC); and a payload
  placed from the wire lands no earlier than one PCIe latency after its packet arrived;
- **conservation**: each NIC's count of the frames it sent is what its wire carried and its
  count of frames received what reached it; on a link without faults a receiver got at least
  what the wire delivered to it; every frame a switch received was queued, dropped or (a MAC
  Control frame) consumed.

`violations` lists the first few of each kind; `finish()` (after the world is closed, so
that the frames still in flight have been seen) adds the end-of-run checks and returns every
line of `summary()`. The checker only observes: results are the same with it or without.
`enable()` (what `--check` and NICSIM_CHECK=1 do) checks every world that boots, and closing
one that broke an invariant raises PhysicsViolation.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nicsim.hwif import CqeOpcode, CqeStatus, QpType
from nicsim.sim.tracer import Stage
from nicsim.wire.packet import ETH_FCS, ETH_IFG, ETH_MIN_FRAME, ETH_PREAMBLE, Unbuilt
from nicsim.world import World

_SLACK_NS = 1.0  # the taps' start-of-frame times are rounded to whole nanoseconds
_KEEP = 5  # violations of one kind listed in full; the rest are counted
_ACK, _RC_RESPONSES = 0x11, range(0x0D, 0x13)  # RC READ responses to ATOMIC ACKNOWLEDGE


def _psn_ge(a: int, b: int) -> bool:
    """a >= b in 24-bit serial-number arithmetic (IBA 9.7.1)."""
    return ((a - b) & 0xFFFFFF) < 0x800000


def _bth(frame: bytes) -> tuple[int, int, int, int] | None:
    """(opcode, destination QP, PSN, BTH offset) of an untagged RoCE frame (v2 over IPv4 or
    IPv6, or v1), else None."""
    et = frame[12:14]
    if et == b"\x08\x00" and len(frame) > 23 and frame[23] == 17:
        b = 14 + (frame[14] & 0xF) * 4 + 8
    elif et == b"\x86\xdd" and len(frame) > 20 and frame[20] == 17:
        b = 14 + 40 + 8
    elif et == b"\x89\x15" and len(frame) > 20 and frame[20] == 0x1B:
        b = 14 + 40
    else:
        return None
    if len(frame) < b + 12:
        return None
    return (frame[b], int.from_bytes(frame[b + 5:b + 8], "big"),
            int.from_bytes(frame[b + 9:b + 12], "big") & 0xFFFFFF, b)


@dataclass
class _Wire:
    """One direction of one link: its transmitter's port, as the link's tap sees it."""

    port: str
    ns_per_byte: float
    next_free: float = -1e18  # when the transmitter may start its next frame
    frames: int = 0  # frames that went onto the wire


@dataclass
class _NicWatch:
    name: str
    latency_ns: float  # its PCIe one-way latency
    # Send WQEs started and not completed: (qpn, WQE index) -> (transport, dest QP, last PSN)
    ops: dict[tuple[int, int], tuple[QpType, int, int]] = field(default_factory=dict)
    acked: dict[int, int] = field(default_factory=dict)  # RC qpn -> highest PSN answered
    # UD and UC completions whose last packet the wire has not shown yet:
    # (dest QP, PSN) -> the CQEs' landing times
    waiting: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    frames_in: int = 0  # frames that reached the NIC (from its port, or handed to it)


class _Tap:
    def __init__(self, write: Callable[[bytes, float], None]) -> None:
        self.write = write


class PhysicsChecker:
    def __init__(self, world: World) -> None:
        self.world = world
        self.violations: list[str] = []
        self._counts: dict[str, int] = defaultdict(int)
        self._wires: dict[str, _Wire] = {}  # by transmitting port
        self._nics: dict[str, _NicWatch] = {}  # by port name ("a.eth0")
        ends = {(id(link), end): name for name, (link, end) in world.ports.items()}
        for host, nic in world.nics.items():
            watch = self._nics[f"{host}.eth0"] = _NicWatch(host, nic.pcie.cfg.latency_ns)
            t = nic.watch()
            t.subscribe(Stage.TRANSLATED, self._started(nic, watch))
            t.subscribe(Stage.CQE_WRITTEN, self._completed(watch))
            t.subscribe(Stage.PLACED, self._placed(nic, watch))
            t.subscribe(Stage.FRAME_IN, self._frame_in(watch))
            t.subscribe(Stage.QP_STATE, self._qp_state(watch))
            nic.port.loop_taps.append(_Tap(self._looped(nic, watch)))
        for link in world.links:
            for end in (0, 1):
                port = ends.get((id(link), end), f"{link.name}[{end}]")
                w = self._wires[port] = _Wire(port, 8.0 / link.cfg.rate_gbps)
                link.end_taps[end].append(_Tap(self._on_wire(w, self._nics.get(port))))

    # -- reporting ----------------------------------------------------------------------------

    def _violate(self, kind: str, line: str) -> None:
        self._counts[kind] += 1
        if self._counts[kind] <= _KEEP:
            self.violations.append(f"{kind}: {line}")

    def summary(self) -> list[str]:
        """Every violation kept, and how many more of each kind there were."""
        return self.violations + [f"{k}: and {n - _KEEP} more" for k, n in self._counts.items()
                                  if n > _KEEP]

    # -- the wire -----------------------------------------------------------------------------

    def _on_wire(self, w: _Wire, sender: _NicWatch | None) -> Callable[[bytes, float], None]:
        def seen(frame: bytes, sof: float) -> None:
            n = len(frame)
            if sof < w.next_free - _SLACK_NS:
                self._violate("wire rate", f"{w.port} started a frame at {sof:.0f} ns, "
                              f"{w.next_free - sof:.1f} ns before the one before it had left")
            slot = (max(n, ETH_MIN_FRAME) + ETH_PREAMBLE + ETH_FCS + ETH_IFG) * w.ns_per_byte
            w.next_free = sof + slot
            w.frames += 1
            last_bit = sof + (max(n, ETH_MIN_FRAME) + ETH_FCS) * w.ns_per_byte
            if sender is not None:
                hdr = _bth(frame)
                if hdr is not None:
                    self._left(sender, hdr, last_bit)
        return seen

    def _looped(self, nic: Any, watch: _NicWatch) -> Callable[[bytes, float], None]:
        def looped(frame: bytes, sof: float) -> None:
            """A frame the port turned around to its own NIC (a loopback) has left."""
            hdr = _bth(frame)
            if hdr is not None:
                n = max(len(frame), ETH_MIN_FRAME) + ETH_FCS
                self._left(watch, hdr, sof + n * 8.0 / nic.port.rate_gbps)
        return looped

    def _left(self, nic: _NicWatch, hdr: tuple[int, int, int, int], last_bit: float) -> None:
        """A packet of this NIC left its port: completions waiting for it may be checked."""
        _op, dqpn, psn, _at = hdr
        for t in nic.waiting.pop((dqpn, psn), ()):
            if t < last_bit - _SLACK_NS:
                self._violate("completion before the wire",
                              f"{nic.name}: a send to QP {dqpn:#x} completed at {t:.0f} ns, "
                              f"before its last packet (PSN {psn:#x}) had left the port at "
                              f"{last_bit:.0f} ns")

    def _frame_in(self, nic: _NicWatch) -> Callable[[Any], None]:
        def arrived(frame: Any) -> None:
            """A frame reached this NIC (from its port, or handed to it): an RC response
            answers up to its PSN."""
            nic.frames_in += 1
            if frame.__class__ is Unbuilt:
                op, dqpn, psn, syn = frame.opcode, frame.dqpn, frame.psn, frame.ext[:1]
            else:
                hdr = _bth(frame)
                if hdr is None:
                    return
                op, dqpn, psn, at = hdr
                syn = frame[at + 12:at + 13]
            if op not in _RC_RESPONSES:
                return
            if op == _ACK and (not syn or syn[0] >> 5):
                # An RNR NAK or NAK names the packet it refuses: those before it are
                # acknowledged (IBA 9.7.5.1.2, implicit acknowledgement).
                psn = (psn - 1) & 0xFFFFFF
            prev = nic.acked.get(dqpn)
            if prev is None or _psn_ge(psn, prev):
                nic.acked[dqpn] = psn
        return arrived

    # -- the NICs -----------------------------------------------------------------------------

    def _started(self, nic: Any, watch: _NicWatch) -> Callable[..., None]:
        def started(qpn: int, index: int, _t: float, _first: int, last: int,
                    dest_qpn: int) -> None:
            qp = nic.qps.get(qpn)
            if qp is not None:
                watch.ops[(qpn, index & 0xFFFF)] = (qp.type, dest_qpn, last)
        return started

    def _qp_state(self, watch: _NicWatch) -> Callable[..., None]:
        def moved(qpn: int, old: str, _new: str) -> None:
            if old == "RESET":  # a new connection (a QPN is reused): forget the old one
                watch.acked.pop(qpn, None)
                for key in [k for k in watch.ops if k[0] == qpn]:
                    del watch.ops[key]
        return moved

    def _completed(self, watch: _NicWatch) -> Callable[..., None]:
        def written(_cqn: int, qpn: int, index: int, opcode: int, status: int,
                    t: float) -> None:
            if opcode >= CqeOpcode.RECV:
                return
            op = watch.ops.pop((qpn, index & 0xFFFF), None)
            if op is None or status != CqeStatus.SUCCESS:
                return  # a local operation (memory windows), or an error
            transport, dest, last = op
            if transport is not QpType.RC:
                watch.waiting.setdefault((dest, last), []).append(t)
                return
            acked = watch.acked.get(qpn)
            if acked is None or not _psn_ge(acked, last):
                self._violate("completion before acknowledgement",
                              f"{watch.name} QP {qpn:#x} WQE {index} completed at {t:.0f} ns "
                              f"before its last PSN {last:#x} was acknowledged")
        return written

    def _placed(self, nic: Any, watch: _NicWatch) -> Callable[..., None]:
        env = nic.env

        def placed(dest_qpn: int, psn: int, t: float) -> None:
            # Nothing placed (no payload): last_done_at is an older write's.
            if t > env.now - _SLACK_NS and t < env.now + watch.latency_ns - _SLACK_NS:
                self._violate("faster than PCIe",
                              f"{watch.name}: the payload of PSN {psn:#x} from QP "
                              f"{dest_qpn:#x} landed {t - env.now:.0f} ns after it arrived, "
                              f"under the PCIe latency ({watch.latency_ns:g} ns)")
        return placed

    # -- the end of the run -------------------------------------------------------------------

    def finish(self) -> list[str]:
        """The end-of-run checks (call it once the world is closed); returns summary()."""
        for watch in self._nics.values():
            for (dqpn, psn), ts in watch.waiting.items():
                self._violate("completion before the wire",
                              f"{watch.name}: {len(ts)} send(s) to QP {dqpn:#x} completed, "
                              f"the first at {min(ts):.0f} ns, but their last packet (PSN "
                              f"{psn:#x}) never left the port")
            watch.waiting.clear()
        w = self.world
        for host, nic in w.nics.items():
            port, watch = f"{host}.eth0", self._nics[f"{host}.eth0"]
            sent, wire = nic.port.counters["tx_frames"], self._wires.get(port)
            if wire is not None and sent != wire.frames:
                self._violate("conservation", f"{port} counts {sent} frames sent; its wire "
                              f"carried {wire.frames}")
            got = nic.counters()["rx.packets"]
            if got != watch.frames_in:
                self._violate("conservation", f"{port} counts {got} frames received; "
                              f"{watch.frames_in} reached it")
        for name, (link, end) in w.ports.items():
            if link.faults is not None:
                continue
            peer = next((p for p, (lk, e) in w.ports.items() if lk is link and e == 1 - end),
                        None)
            # (a closing world's taps record what is still on its way: the link knows which)
            delivered = self._wires[name].frames - link.undelivered(1 - end)
            got = self._nics[peer].frames_in if peer in self._nics else \
                self._received(peer) if peer is not None else None
            # (A test may hand a receiver frames of its own: at least the wire's reached it.)
            if got is not None and got < delivered:
                self._violate("conservation", f"{peer} counts {got} frames received; the wire "
                              f"from {name} delivered {delivered}")
        for name, sw in w.switches.items():
            self._switch_adds_up(name, sw.counters())
        return self.summary()

    def _switch_adds_up(self, name: str, c: dict[str, int]) -> None:
        """Every frame a switch received is queued (or was, and left or was dropped by the
        PFC watchdog), dropped, or a MAC Control frame it consumed. (Not checked where IP
        multicast was flooded: a flooded frame becomes a copy per port.)"""
        if c.get("mcast_flooded"):
            return
        got = sum(v for k, v in c.items() if k.endswith(".rx_frames"))
        queued = sum(v for k, v in c.items() if k.endswith(".enqueued"))
        dropped = sum(v for k, v in c.items() if k.startswith("drop.")) + sum(
            c.get(f"dropped.{r}", 0) for r in ("dynamic_threshold", "buffer_full",
                                               "headroom_overflow"))
        control = sum(v for k, v in c.items() if k.endswith(("pause_received",
                                                             "pause_8023x_received",
                                                             "bad_pfc_received")))
        if got != queued + dropped + control:
            self._violate("conservation", f"{name} received {got} frames; it queued {queued}, "
                          f"dropped {dropped} and consumed {control} MAC Control frames "
                          f"({queued + dropped + control})")

    def _received(self, port: str) -> int | None:
        """What the switch port `port` counts as received (None: not a switch port)."""
        node, _, pname = port.partition(".")
        sw = self.world.switches.get(node)
        if sw is not None and pname.startswith("p"):
            return sw.counters().get(f"{pname}.rx_frames")
        return None


class PhysicsViolation(AssertionError):
    """What the physics checker found (one violation per line)."""


_open: list[PhysicsChecker] = []  # (enabled) checkers whose world has not closed yet


def _check_every_world(world: World) -> None:
    checker = PhysicsChecker(world)
    _open.append(checker)

    def closed() -> None:
        _open.remove(checker)
        found = checker.finish()
        if found:
            raise PhysicsViolation("\n".join(found))

    world.closing.append(closed)


def close_all() -> None:
    """Close every checked world still open (a program may never close its worlds), which
    checks each; raises PhysicsViolation for the first that broke an invariant."""
    while _open:
        _open[0].world.close()


def enable() -> None:
    """Check every world booted from now on (`--check`, NICSIM_CHECK=1): closing a world
    whose run broke an invariant raises PhysicsViolation, naming each violation."""
    if _check_every_world not in World.boot_hooks:
        World.boot_hooks.append(_check_every_world)


def disable() -> None:
    """Stop checking the worlds booted from now on."""
    if _check_every_world in World.boot_hooks:
        World.boot_hooks.remove(_check_every_world)


def enabled_by_environment() -> bool:
    """Enable the checks if NICSIM_CHECK is set to anything but 0 (child processes of a
    checked run inherit it); returns whether they are on."""
    if os.environ.get("NICSIM_CHECK", "0") not in ("", "0"):
        enable()
    return _check_every_world in World.boot_hooks
