"""The receive side of Unreliable Connected QPs (IBA 9.8.3, error classes of 9.9.3).

UC has RC's connection, PSNs and multi-packet SEND and RDMA WRITE messages, and nothing that
makes them reliable: no ACK, no NAK, no retransmission. The responder (nicsim.nic.responder)
places a UC message exactly as an RC one; this module is what it does instead of answering:

- PSN and message sequence: a packet whose PSN is not the expected one, or one that does not
  continue the message in progress, is dropped, and with it the rest of that message; the
  responder then takes nothing until a FIRST or ONLY packet, whose PSN it adopts (it
  resynchronizes on the next message, IBA 9.8.3; rxe's check_psn/check_op_seq for UC). A
  FIRST or ONLY arriving in the middle of a message ends that message the same way and starts
  its own.
- A message the responder cannot execute (no receive WQE, a bad R_Key, no REMOTE_WRITE right,
  a length that does not match, a SEND longer than its receive buffers) is dropped silently:
  the sender hears nothing and the QP stays in RTS (class D, rxe's UC handling).
- A receive WQE that a dropped message had begun to fill is not completed: the next message
  fills it again from its start (rxe's class D1 handling resets its scatter state). A WQE
  taken from an SRQ stays with the QP for its next message.
- A fault of the receiving side itself (the receive WQE's own L_Key, its buffer deregistered
  under the message) completes that WQE in error and moves the QP to ERR, as on RC, without
  a NAK.

Counters (the responder's): `uc_msgs_dropped` (messages lost here, whatever the reason),
`uc_pkts_dropped` (packets discarded because their message was lost or was never begun),
`uc_resyncs` (a FIRST or ONLY taken at a PSN other than the expected one).
"""

from __future__ import annotations

from nicsim.hwif import WQE_INDEX_MASK, CqeOpcode, CqeStatus
from nicsim.nic.aeth import Syndrome
from nicsim.nic.completer import Completer
from nicsim.nic.qp import QpCtx, RespState
from nicsim.nic.violations import Rule
from nicsim.wire import Kind, Packet

UC_COUNTERS = ("uc_msgs_dropped", "uc_pkts_dropped", "uc_resyncs")
_CONTINUES = {RespState.IN_SEND: Kind.SEND, RespState.IN_WRITE: Kind.WRITE}
_NEXT = {RespState.IDLE: "a FIRST or ONLY opcode", RespState.IN_SEND: "SEND MIDDLE or LAST",
         RespState.IN_WRITE: "RDMA WRITE MIDDLE or LAST"}


class UcReceive:
    def __init__(self, completer: Completer, counters: dict[str, int]) -> None:
        self.completer = completer
        self.counters = counters  # the responder's (UC_COUNTERS among them)
        # What the last packet `accept` judged broke (rule, expected, actual), None if
        # nothing: a gap in the PSNs or a message cut short is loss to UC, which it survives
        # (9.8.3), and a protocol error for a sender on a link that loses nothing. The
        # responder passes it to its observers (RX_VIOLATION).
        self.broke: tuple[Rule, str, str] | None = None

    def accept(self, qp: QpCtx, p: Packet) -> bool:
        """Whether a UC request packet is to be executed (its PSN and place in a message
        fit); the message in progress is dropped when it cannot be."""
        r = qp.resp
        info = p.info
        self.broke = None
        if p.psn != qp.epsn and not r.dropping:
            self.broke = (Rule.PSN_SEQUENCE, f"PSN {qp.epsn:#08x}", f"PSN {p.psn:#08x}")
        elif r.state is RespState.IDLE and not r.dropping and not info.is_first:
            self.broke = (Rule.OPCODE_SEQUENCE, _NEXT[r.state], info.opcode.name)
        if p.psn != qp.epsn or r.dropping or r.state is RespState.IDLE:
            if not info.is_first:
                self.counters["uc_pkts_dropped"] += 1
                self._cut(qp)
                r.dropping = True
                return False
            if r.state is not RespState.IDLE:
                self._cut(qp)  # a new message: the one in progress lost its end
            if p.psn != qp.epsn:
                self.counters["uc_resyncs"] += 1
                qp.epsn = p.psn
            r.dropping = False
            return True
        if info.is_first or info.kind is not _CONTINUES[r.state]:
            broke = (Rule.OPCODE_SEQUENCE, _NEXT[r.state], info.opcode.name)
            self._cut(qp)
            ok = self.accept(qp, p)  # starts a message of its own, or is dropped
            self.broke = broke
            return ok
        return True

    def refuse(self, qp: QpCtx, syndrome: int, t: float, recv_status: CqeStatus | None) -> None:
        """What an RC responder answers with a NAK (`syndrome`), a UC one does silently: a
        fault of its own receive WQE (NAK remote operational error on RC) completes that WQE
        with `recv_status` and fails the QP; anything else drops the message."""
        r = qp.resp
        if syndrome == Syndrome.NAK_REM_OP and recv_status is not None and r.recv_active:
            comp = self.completer
            comp.post_recv(qp, r.rq_index, CqeOpcode.RECV, recv_status, r.msg_len, 0, 0, t)
            if qp.srq is None:
                qp.rq_ci = (qp.rq_ci + 1) & WQE_INDEX_MASK
            self._reset(qp)
            comp.qp_error(qp)
            return
        self.counters["uc_pkts_dropped"] += 1
        if r.state is RespState.IDLE and not r.recv_active:
            self.counters["uc_msgs_dropped"] += 1  # refused at its first packet
        self._cut(qp)
        r.dropping = True

    def _cut(self, qp: QpCtx) -> None:
        """Drop the message in progress, if there is one; its receive WQE waits for the
        next message."""
        r = qp.resp
        if r.state is RespState.IDLE and not r.recv_active:
            return
        self.counters["uc_msgs_dropped"] += 1
        if r.recv_active and qp.srq is not None:
            r.held_wqe = (r.rq_index, r.wqe_sges)
        self._reset(qp)

    @staticmethod
    def _reset(qp: QpCtx) -> None:
        r = qp.resp
        r.state = RespState.IDLE
        r.rq_cap = 0
        r.msg_len = 0
        r.recv_active = False
