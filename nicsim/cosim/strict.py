"""A strict peer: the model NIC's receive path as a scoreboard for a design's RoCE packets.

The model NIC already decides, for every frame that reaches it, whether its sender kept the
protocol: the parser checks the headers and the ICRC, header validation the address, QP,
transport and P_Key, the responder the PSN, the opcode sequence and the lengths, the
completer that a response answers something it sent. A bad frame is dropped or NAKed and a
counter moves; the NIC also says why to its observers (Stage.RX_VIOLATION with a
nicsim.nic.violations.Rule). `StrictChecker` subscribes to that and to the frames coming in,
keeps a per-QP log of what each packet was against what the NIC expected at that moment,
and raises `ProtocolViolation` on the first violation: the NIC's own decision is the oracle,
nothing is checked twice.

ModelPeer(strict=True) (nicsim.cosim.peer) attaches one to the peer's NIC, whose only cable
goes to the design, so every frame judged is one the design sent. Nothing here needs cocotb:
a checker works on any model NIC (tests/test_strict_peer.py feeds it frames by hand).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from nicsim.nic.nic import Nic
from nicsim.nic.qp import PSN_MASK, QpCtx, RespState
from nicsim.nic.violations import CLAUSE, Rule
from nicsim.sim.tracer import Stage
from nicsim.wire import Packet, WireError, parse
from nicsim.wire.opcodes import Pos
from nicsim.wire.packet import Unbuilt, mac_str

# What may come next in each responder state (IBA 9.7.4.1.3), as the log shows it.
_NEXT = {RespState.IDLE: "FIRST/ONLY", RespState.IN_SEND: "SEND MID/LAST",
         RespState.IN_WRITE: "WRITE MID/LAST"}
NO_QP = -1  # the log of frames that did not parse as far as a destination QP


@dataclass(slots=True)
class Entry:
    """One packet the NIC received: what it was (actual) against what the NIC expected when
    it arrived (from the QP's state then), and the NIC's verdict (`ok` or the rule broken)."""

    n: int  # the frame's number among those the NIC received, from 1
    t_ns: float  # when it arrived (SimPy time)
    qpn: int  # its destination QP (NO_QP if it did not parse that far)
    opcode: str  # actual
    psn: int | None  # actual
    length: int | None  # actual payload bytes
    pad: int | None
    expect_opcode: str = "-"
    expect_psn: str = "-"
    expect_length: str = "-"
    verdict: str = "ok"

    def line(self) -> str:
        psn = f"{self.psn:#08x}" if self.psn is not None else "-"
        ln = "-" if self.length is None else f"{self.length}+{self.pad}" if self.pad \
            else str(self.length)
        return (f"{self.n:>5} {self.t_ns:>11.1f}  {self.expect_opcode:<15} {self.opcode:<26}"
                f" {self.expect_psn:>17} {psn:>8}  {self.expect_length:>9} {ln:>8}  "
                f"{self.verdict}")


LOG_HEADER = (f"{'#':>5} {'t ns':>11}  {'expected op':<15} {'actual op':<26} "
              f"{'expected PSN':>17} {'PSN':>8}  {'exp. len':>9} {'len+pad':>8}  verdict")


def format_log(entries: Iterable[Entry]) -> str:
    """The log as a table (expected against actual, one line per packet)."""
    return "\n".join([LOG_HEADER, *(e.line() for e in entries)])


class ProtocolViolation(AssertionError):
    """The design broke a rule of the protocol (an AssertionError: cocotb and pytest report
    the test failed, with this message). `rule`, `qpn`, `expected`, `actual`, `frame`
    (its bytes) and `log` (the QP's last entries, this packet's last) are kept."""

    def __init__(self, rule: Rule, qpn: int, expected: str, actual: str, frame: bytes,
                 entry: Entry | None, log: list[Entry]) -> None:
        self.rule, self.qpn, self.expected, self.actual = rule, qpn, expected, actual
        self.frame, self.entry, self.log = frame, entry, log
        qp = f"QP {qpn:#x}" if qpn >= 0 else "no QP"
        where = f"frame {entry.n} at {entry.t_ns:.1f} ns" if entry is not None else "a frame"
        lines = [f"{qp}: {rule.value}, {CLAUSE[rule]}",
                 f"  expected: {expected}",
                 f"  actual:   {actual}",
                 f"  {where}: {summary(frame)}",
                 *("    " + ln for ln in hexdump(frame)),
                 f"  {qp}, the last {len(log)} packet{'s' if len(log) != 1 else ''} from the"
                 " design (oldest first; times are the model's):",
                 *("    " + ln for ln in format_log(log).splitlines())]
        super().__init__("\n".join(lines))


def summary(frame: bytes) -> str:
    """One line about a frame: addresses, BTH fields, lengths and ICRC (what parses)."""
    n = len(frame)
    if n < 14:
        return f"{n} bytes"
    head = f"{n} bytes, {mac_str(frame[6:12])} > {mac_str(frame[0:6])}"
    try:
        p = parse(frame, check_icrc=False, cache=False)
    except WireError as e:
        return f"{head}, not parsed: {e}"
    ip = (".".join(str(b) for b in p.sip), ".".join(str(b) for b in p.dip)) if not p.ipv6 \
        else (p.sip.hex(), p.dip.hex())
    flags = " AckReq" if p.ackreq else ""
    return (f"{head}, {ip[0]} > {ip[1]}, {p.name} DestQP {p.dqpn:#x} PSN {p.psn:#08x}{flags},"
            f" pad {p.pad}, payload {p.payload_len}, ICRC {p.icrc:#010x}")


def hexdump(frame: bytes, head: int = 64, tail: int = 16) -> list[str]:
    """The frame's first `head` and last `tail` bytes, 16 a line with their offsets."""
    n = len(frame)
    tail_at = (n - tail) // 16 * 16  # (whole lines: each starts at its offset)
    spans = [(0, n)] if tail_at <= head else [(0, head), (tail_at, n)]
    out: list[str] = []
    for i, (a, b) in enumerate(spans):
        if i:
            out.append("...")
        out += [f"{off:04x}  {frame[off:min(off + 16, b)].hex(' ')}" for off in range(a, b, 16)]
    return out


class StrictChecker:
    """Judges every frame `nic` receives by the NIC's own receive path: a per-QP log of the
    last `depth` packets, and ProtocolViolation on the first violation of a rule not in
    `tolerate` (those are logged only)."""

    def __init__(self, nic: Nic, tolerate: Iterable[Rule] = (), depth: int = 32) -> None:
        self.nic = nic
        self.tolerate = frozenset(tolerate)
        self.depth = depth
        self.logs: dict[int, deque[Entry]] = {}
        self.violations: list[ProtocolViolation] = []  # every one, tolerated or not
        self.first: ProtocolViolation | None = None  # the first not tolerated
        self.frames = 0
        self._frame = b""
        self._entry: Entry | None = None
        tracer = nic.watch()
        tracer.subscribe(Stage.FRAME_IN, self._frame_in)
        tracer.subscribe(Stage.RX_VIOLATION, self._violation)

    def log(self, qpn: int | None = None) -> list[Entry]:
        """The log of QP `qpn` (the NIC's QP number: the design's destination QP), oldest
        first; every QP's, in arrival order, if None."""
        if qpn is not None:
            return list(self.logs.get(qpn, ()))
        return sorted((e for q in self.logs.values() for e in q), key=lambda e: e.n)

    def check(self) -> None:
        """Raise the first violation again (one a program caught, say), if there was one."""
        if self.first is not None:
            raise self.first

    # -- the NIC's events -------------------------------------------------------------------

    def _frame_in(self, frame: bytes | Unbuilt) -> None:
        if frame.__class__ is Unbuilt:
            frame = frame.build()  # type: ignore[union-attr]
        self.frames += 1
        self._frame = bytes(frame)  # type: ignore[arg-type]
        now = self.nic.env.now
        try:
            p = parse(self._frame, check_icrc=False, cache=False)
        except WireError as e:
            entry = Entry(self.frames, now, NO_QP, f"({e.reason.value})", None, None, None)
        else:
            # (RC's opcodes without their prefix: the log's column stays narrow)
            entry = Entry(self.frames, now, p.dqpn, p.name.removeprefix("RC_"), p.psn,
                          p.payload_len, p.pad)
            qp = self.nic.qps.get(p.dqpn)
            if qp is not None:
                _expect(entry, qp, p)
        self._entry = entry
        log = self.logs.get(entry.qpn)
        if log is None:
            log = self.logs[entry.qpn] = deque(maxlen=self.depth)
        log.append(entry)

    def _violation(self, rule: Rule, qpn: int, expected: str, actual: str) -> None:
        entry = self._entry
        if entry is not None:
            entry.verdict = rule.value if entry.verdict == "ok" else \
                f"{entry.verdict}, {rule.value}"
        key = entry.qpn if entry is not None else qpn
        v = ProtocolViolation(rule, qpn, expected, actual, self._frame, entry,
                              list(self.logs.get(key, ())))
        self.violations.append(v)
        if rule in self.tolerate or self.first is not None:
            return
        self.first = v
        raise v


def _expect(e: Entry, qp: QpCtx, p: Packet) -> None:
    """What the NIC expected of packet `p` to QP `qp` when it arrived, from the QP's state
    (the values its receive path compares with): for a request, the responder's expected PSN,
    the opcodes that may follow and the length that fits; for a response, the PSNs the
    requester has outstanding."""
    info = p.info
    mtu = qp.mtu
    if info.is_request:
        r = qp.resp
        e.expect_psn = f"{qp.epsn:#08x}"
        e.expect_opcode = _NEXT[r.state]
        if not info.has_payload:
            e.expect_length = "0"
        elif info.pos in (Pos.FIRST, Pos.MIDDLE):
            e.expect_length = str(mtu)
        elif r.state is RespState.IN_WRITE:
            e.expect_length = str(r.rq_cap - r.msg_len)
        elif info.pos is Pos.ONLY and p.reth_len is not None:
            e.expect_length = str(p.reth_len)
        else:
            e.expect_length = f"1-{mtu}" if info.pos is Pos.LAST else f"<={mtu}"
        return
    out = qp.outstanding
    last = (qp.sq_psn - 1) & PSN_MASK
    e.expect_opcode = "a response"
    if out:
        e.expect_psn = f"{out[0].first_psn:#08x}-{last:#08x}"
        op = out[0]
        if op.waits_for_data and info.has_payload:
            done = op.read_done
            e.expect_psn = f"{(op.first_psn + done // mtu) & PSN_MASK:#08x}"
            rest = op.length - done
            e.expect_length = str(min(rest, mtu))
    else:
        e.expect_psn = f"<={last:#08x} (none out)"
    if not info.has_payload:
        e.expect_length = "0"


__all__ = ["CLAUSE", "Entry", "ProtocolViolation", "Rule", "StrictChecker", "format_log",
           "hexdump", "summary"]
