"""Per-QP state held by the NIC: the QPC fields plus the runtime state of the three engines."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from nicsim.hwif import WQE_INDEX_MASK, QpState, QpType, WqeOpcode
from nicsim.nic.translation import Walk
from nicsim.wire import FrameBuilder, Transport

PSN_MASK = 0xFFFFFF
# The transport each QP type speaks on the wire (the top three bits of its BTH opcodes, IBA
# 9.2 table 38). RC is the only one with acknowledgements (IBA 9.7); UC and UD are not (9.8).
QP_TRANSPORT = {QpType.RC: Transport.RC, QpType.UC: Transport.UC, QpType.UD: Transport.UD}


def psn_diff(a: int, b: int) -> int:
    """a - b in 24-bit serial-number arithmetic (IBA 9.7.1: PSNs wrap modulo 2^24)."""
    return ((a - b + 0x800000) & PSN_MASK) - 0x800000


class RespState(Enum):
    """Where the responder is inside a multi-packet request (IBA 9.7.4, opcode sequence)."""

    IDLE = "idle"
    IN_SEND = "in_send"
    IN_WRITE = "in_write"


@dataclass(slots=True)
class SendOp:
    """A WQE the requester has sent (or begun to send) and not yet completed. It keeps what
    is needed to send any of its packets again (go-back-N re-reads payload from memory)."""

    wqe: object  # the decoded SendWqe
    opcode: WqeOpcode
    signaled: bool
    first_psn: int
    last_psn: int
    length: int
    npkts: int
    walk: Walk | None = None  # the local buffer's translation (None: inline data)
    read_done: int = 0  # bytes of READ response placed so far
    consumes_recv: bool = False  # a SEND or WRITE with immediate: uses a receive WQE
    gap: bool = False  # a READ response is missing and has been re-requested
    keys: tuple[int, ...] = ()  # the lkeys `segs` came from, and the protection epoch they
    epoch: int = 0  # were last checked at (nicsim.nic.translation: translations held)

    @property
    def segs(self) -> list[tuple[int, int]]:
        return self.walk.segs if self.walk is not None else []

    @property
    def wqe_index(self) -> int:
        return self.wqe.index  # type: ignore[attr-defined]

    @property
    def waits_for_data(self) -> bool:
        return self.opcode in _WAITS_FOR_DATA


# FLUSH and ATOMIC WRITE (the Memory Placement annex): one packet each, no local buffer,
# answered by a READ RESPONSE without payload, so they wait like a READ.
PLACEMENT_OPS = (WqeOpcode.FLUSH, WqeOpcode.ATOMIC_WRITE)
_WAITS_FOR_DATA = (WqeOpcode.RDMA_READ, WqeOpcode.ATOMIC_CMP_AND_SWP,
                   WqeOpcode.ATOMIC_FETCH_AND_ADD, *PLACEMENT_OPS)


@dataclass(slots=True)
class RdRes:
    """A READ or atomic the responder executed, kept to answer a duplicate of it: the
    responder resources of IBA 9.7.5.1.1, as many as max_dest_rd_atomic (rxe's resp_res)."""

    first_psn: int
    last_psn: int
    rkey: int
    va: int
    length: int
    orig: int | None = None  # an atomic's original value (None for a READ)
    # FLUSH / ATOMIC WRITE: answered again (READ RESPONSE without payload), not executed
    # again (the Memory Placement annex's duplicate rules)
    placement: bool = False


@dataclass(slots=True)
class RespCtx:
    """Responder state of one QP."""

    state: RespState = RespState.IDLE
    walk: Walk = field(default_factory=Walk)  # the message's buffer, translated as it goes
    segs: list[tuple[int, int]] = field(default_factory=list)  # walk.segs
    seg_i: int = 0
    seg_off: int = 0
    msg_len: int = 0  # bytes placed so far in the current message
    rq_index: int = 0  # receive WQE being filled (SEND)
    rq_cap: int = 0  # bytes the message may place (receive SGEs, or the RETH length)
    recv_active: bool = False  # a receive WQE is taken by the message in progress
    data_ready_at: float = 0.0  # when the receive WQE's SGEs are known (RQ WQE fetch)
    unacked: int = 0  # packets since the last ACK
    unit_free: float = 0.0  # when the responder unit on this QP may take its next packet
    nak_sent: bool = False  # one NAK per expected PSN, RNR included (IBA 9.7.5.2.2)
    last_done_at: float = 0.0  # when the last payload write lands in host memory
    posted_at: float = 0.0  # when the last payload write was posted to PCIe
    reads_inflight: int = 0  # READ requests whose responses are still being sent
    jobs_queued: int = 0  # responses waiting in the send engine (READs, and ACKs behind them)
    keys: tuple[int, ...] = ()  # the keys `segs` came from (rkey; receive WQE lkeys) and the
    epoch: int = 0  # protection epoch they were last checked at (see nicsim.nic.translation)
    rd_res: deque[RdRes] = field(default_factory=deque)  # newest last
    # UC (nicsim.nic.unreliable): the message in progress was dropped, nothing is taken until
    # the next FIRST or ONLY; an SRQ's receive WQE a dropped message had taken, kept for the
    # next message (index, SGEs).
    dropping: bool = False
    held_wqe: tuple[int, list[tuple[int, int, int]]] | None = None
    wqe_sges: list[tuple[int, int, int]] = field(default_factory=list)  # the taken WQE's


@dataclass(slots=True)
class QpCtx:
    qpn: int
    type: QpType
    pd: int
    send_cqn: int
    recv_cqn: int
    sq_base: int
    sq_log_size: int
    sq_log_stride: int
    rq_base: int
    rq_log_size: int
    rq_log_stride: int
    state: QpState = QpState.RESET
    transport: Transport = Transport.RC  # from `type` (QP_TRANSPORT)
    reliable: bool = True  # acknowledged, retransmitted: RC only
    access: int = 0
    mtu: int = 1024
    dest_qpn: int = 0
    sq_psn: int = 0  # next PSN the requester assigns
    epsn: int = 0  # next PSN the responder expects
    msn: int = 0  # responder's message sequence number
    timeout: int = 14
    retry_cnt: int = 7
    rnr_retry: int = 7
    min_rnr_timer: int = 0
    max_rd_atomic: int = 1
    max_dest_rd_atomic: int = 1
    qkey: int = 0
    pkey: int = 0xFFFF
    dmac: bytes = bytes(6)
    smac: bytes = bytes(6)
    sgid: bytes = bytes(16)
    dgid: bytes = bytes(16)
    sgid_index: int = 0  # the GID table entry of sgid: its RoCE version (Framing.addresses)
    traffic_class: int = 64 << 8
    builder: FrameBuilder | None = None
    sq_pi: int = 0  # from the doorbell (16-bit)
    sq_fetch: int = 0  # next WQE index to fetch (16-bit)
    rq_pi: int = 0
    rq_ci: int = 0
    fetched: deque = field(default_factory=deque)  # decoded WQEs not yet executed
    rq_fetch: int = 0  # next receive WQE index to prefetch (16-bit)
    rq_cache: deque = field(default_factory=deque)  # (index, SGEs, ready) prefetched
    eng_free: float = 0.0  # when the send engine may start this QP's next WQE
    hdr_free: float = 0.0  # when a header unit may start this QP's next packet
    outstanding: deque = field(default_factory=deque)  # SendOps awaiting ACK/response
    resp: RespCtx = field(default_factory=RespCtx)
    scheduled: bool = False
    # The send cursor (see Requester.turn): the op being sent, its next packet, whether it is
    # a resend, the position in its buffer, the time it may start from; ops to resend next.
    cur: SendOp | None = None
    cur_k: int = 0
    cur_again: bool = False
    cur_pos: tuple[int, int] = (0, 0)
    cur_t: float = 0.0
    redo: deque = field(default_factory=deque)
    # Requester reliability state (IBA 9.7.6): what to resend, timers, retry budgets.
    resend_psn: int | None = None  # go back to this PSN before sending anything new
    acked_psn: int = -1  # last PSN an ACK covered (-1: none yet)
    timer_deadline: float | None = None  # transport timer (None: not armed)
    timer_pending: bool = False  # a SimPy event for the timer is scheduled
    retry_left: int = 7
    rnr_left: int = 7
    rnr_until: float = 0.0  # RNR NAK: no sending before this time
    odp_wait: bool = False  # its next send WQE waits for a page fault (nicsim.nic.odp)
    recv_msgs_sent: int = 0  # receive-consuming messages started (SEND, WRITE with imm)
    recv_outstanding: int = 0  # of those, not yet completed
    rd_outstanding: int = 0  # READs and atomics awaiting their response
    recv_limit: int | None = None  # from AETH credits: how many may be started (None: any)
    # What frames from the peer carry as IP source + destination (the QP's path, RoCEv2's
    # stand-in for the GRH's SGID/DGID); None until the path is set.
    rx_addrs: bytes | None = None
    uar: int = 0  # the doorbell page (UAR) the QP's doorbells must come through
    srq: Any = None  # the SrqCtx it receives from (nicsim.nic.srq), None: its own RQ
    # Congestion control (nicsim.nic.cc): the rate the send engine keeps (None: line rate),
    # when the next packet may go, the algorithm's state, the last CNP this QP caused.
    rate: float | None = None
    next_tx: float = 0.0
    last_tx: float = 0.0  # when the last paced packet was let go, and its wire bytes
    last_len: int = 0
    pace_gen: int = 0
    # Payload bytes this QP has taken in from the wire and placed: requests at its responder,
    # READ responses at its requester, datagrams. (A goodput that cannot outrun the wire.)
    payload_in: int = 0
    held: bool = False  # waiting for next_tx (SendEngine.hold)
    ccs: Any = None
    cnp_at: float = float("-inf")

    def __post_init__(self) -> None:
        self.transport = QP_TRANSPORT[self.type]
        self.reliable = self.type is QpType.RC

    @property
    def sq_pending(self) -> int:
        """WQEs the doorbell announced that have not been fetched yet."""
        return (self.sq_pi - self.sq_fetch) & WQE_INDEX_MASK

    @property
    def sq_stride(self) -> int:
        return 1 << self.sq_log_stride

    @property
    def rq_stride(self) -> int:
        return 1 << self.rq_log_stride
