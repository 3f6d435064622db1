"""The NIC: BAR registers, and the blocks wired together.

    doorbell -> SendEngine (scheduler) -> WqeFetch -> Requester -> Port ==link==> Port
    Port -> parse/ICRC -> Responder (requests) | Completer (responses) -> CqWriter

The host reaches the NIC only through `mmio_write`/`mmio_read` (its BAR) and the NIC reaches
the host only through its DMA engine.
"""

from __future__ import annotations

from nicsim.fabric.pfc import PAUSE_OPCODE, PfcFormatError, is_mac_control, parse_pfc
from nicsim.host.memory import PhysMem
from nicsim.host.pcie import MmioDevice
from nicsim.hwif import (
    DEV_ID,
    PAGE_SHIFT,
    PAGE_SIZE,
    UAR_BASE,
    WQE_INDEX_MASK,
    Access,
    DevFeature,
    QpState,
    QpType,
    Reg,
    UarReg,
    XlateStatus,
    features_word,
)
from nicsim.nic.cc import NotificationPoint, Signal, make_rate_control
from nicsim.nic.command import CommandProcessor
from nicsim.nic.completer import Completer
from nicsim.nic.config import NicConfig
from nicsim.nic.counters import Counters, bump, new_counters
from nicsim.nic.cq import CqCtx
from nicsim.nic.datagram import Datagram
from nicsim.nic.engines import Units, cycles_ns
from nicsim.nic.multicast import Multicast
from nicsim.nic.qp import QpCtx
from nicsim.nic.requester import Requester
from nicsim.nic.responder import Responder
from nicsim.nic.services import Services
from nicsim.nic.violations import PARSE_RULE, Rule
from nicsim.sim import Sim
from nicsim.sim.paths import general
from nicsim.sim.tracer import Stage, Tracer
from nicsim.wire import (
    Ecn,
    Kind,
    Transport,
    WireError,
    parse,
    telemetry,
)
from nicsim.wire.crc import crc32
from nicsim.wire.opcodes import Opcode
from nicsim.wire.packet import (
    ETH_P_ROCE_V1,
    L3_CACHE,
    PKEY_DEFAULT,
    Unbuilt,
    aeth_syndrome,
    compute_icrc,
    frame_end,
)

# What the receive fast path takes (Responder.middle): the packets of a message after its first.
_ACKNOWLEDGE = int(Opcode.RC_ACKNOWLEDGE)
_MIDDLES = (int(Opcode.RC_SEND_MIDDLE), int(Opcode.RC_RDMA_WRITE_MIDDLE),
            int(Opcode.RC_RDMA_WRITE_LAST))
# Enum members the per-packet and per-WQE paths compare with, bound once: CPython 3.11 looks
# an Enum member up through EnumType's __getattr__ hook (about 100 ns), a global in a few.
_RC = QpType.RC
_V1_TYPE = ETH_P_ROCE_V1.to_bytes(2, "big")  # a RoCE v1 frame's EtherType bytes
_OK = XlateStatus.OK
_BF, _SQ_DB, _RQ_DB, _CQ_ARM, _SRQ_DB = UarReg.BF, UarReg.SQ_DB, UarReg.RQ_DB, UarReg.CQ_ARM, \
    UarReg.SRQ_DB
_ERR, _RESET, _RTS = QpState.ERR, QpState.RESET, QpState.RTS
# Accesses that write the region (a page fault for them needs writable pages).
_WRITES = int(Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC)
# What a parse refusal expected, for its RX_VIOLATION (the parser's detail is what it found).
_PARSE_EXPECTED = {
    Rule.UNKNOWN_OPCODE: "an opcode of IBA table 38",
    Rule.BAD_TVER: "TVer 0",
    Rule.BAD_PAD: "no pad on an opcode without payload",
    Rule.HEADER_LENGTH: "the opcode's extension headers, payload only where it has one",
}


class Nic(Services, MmioDevice):
    def __init__(self, env: Sim, name: str, cfg: NicConfig, mem: PhysMem) -> None:
        super().__init__(env, name, cfg, mem, self.receive)  # type: ignore[arg-type]
        # Reg.FEATURES: the optional features this configuration has
        self.features = (DevFeature.FLUSH | DevFeature.ATOMIC_WRITE
                         | (DevFeature.MULTICAST if cfg.multicast else DevFeature(0))
                         | (DevFeature.ROCE_V1 if cfg.roce_v1 else DevFeature(0))
                         | (DevFeature.BLUEFLAME if cfg.bf_size else DevFeature(0)))
        self.qps: dict[int, QpCtx] = {}
        self.cq.on_overrun = self._cq_overrun
        self._db_unit = Units(1)
        self._db_cost = cycles_ns(cfg.doorbell_cycles, cfg.clock_mhz)
        # The blocks, each given what it uses; the three calls against the grain of their
        # order (nicsim.nic.interfaces) are wired in after.
        self.completer = Completer(env, cfg, self.cq, self.engine, self.dma, self.mmu)
        # Congestion control: the reaction point (None: cc none) and the notification point.
        self.cc = make_rate_control(env, cfg.cc, lambda: self.port.rate_gbps,
                                    self.engine.rate_changed)
        self.datagram = Datagram(env, cfg, self.mac, self.framing, self.engine, self.fetch,
                                 self.mmu, self.dma, self.pcie, self.cq, self.completer,
                                 self.srq, self.port)
        self.requester = Requester(env, cfg, self.engine, self.fetch, self.mmu, self.dma,
                                   self.cq, self.completer, self.windows, self.datagram,
                                   self.cc, self.port)
        self.completer.requests = self.requester
        self.datagram.requester = self.requester
        self.responder = Responder(env, cfg, self.engine, self.fetch, self.mmu, self.dma,
                                   self.pcie, self.completer, self.windows, self.srq,
                                   self.port)
        self.rx = new_counters("packets", "bytes", "roce_packets", "not_for_us", "unknown_qpn",
                               "qp_type_mismatch", "bad_pkey", "bad_src_ip", "bad_dst_ip",
                               "bad_roce_version",
                               "bad_padcount", "cnp", "cnp_ignored", "ce_marked")
        self.mcast = Multicast(self.qps, self.port, self.rx, self.datagram)
        self.commands = CommandProcessor(
            env, cfg, self.features, dma=self.dma, pcie=self.pcie, xlate=self.xlate,
            qps=self.qps, cq=self.cq, eq=self.eq, srq=self.srq, mcast=self.mcast,
            windows=self.windows, faults=self.odp, fetch=self.fetch, engine=self.engine,
            completer=self.completer, cc=self.cc, port=self.port, framing=self.framing)
        self.engine.start(self.requester, self.fetch)
        self.np = NotificationPoint(env, cfg.cc.cnp, self.framing.builder_for, self.port.send)
        # The signals the algorithm asks for reach it; the others cost an attribute test.
        cc = self.cc
        signals = cc.signals if cc is not None else Signal.NONE
        if cc is not None and signals & (Signal.ACK | Signal.RTT):
            self.completer.on_acked = cc.acked
        if cc is not None and signals & Signal.NAK:
            self.completer.on_nak = cc.on_nak
        self._int = cc if signals & Signal.INT else None  # INT echoed and delivered
        if cc is not None and self._int is not None:
            self.responder.int_echo = cc.echo_int
        self.regs: dict[int, int] = {}
        # Unbuilt packets the receive fast path took, per frame length: each one is a packet,
        # its bytes and a RoCE packet in `rx`, added when the counters are read.
        self._fast_rx: dict[int, int] = {}
        self.drops: Counters = new_counters()  # parse drops by ParseError reason
        self.tracer: Tracer | None = None
        self._fast = not general()  # the receive fast path (nicsim.sim.paths)

    def watch(self) -> Tracer:
        """The tracer this NIC's stage events go to, made and attached if there is none yet:
        every observer subscribes to the one tracer."""
        if self.tracer is None:
            self.observe(Tracer())
        assert self.tracer is not None
        return self.tracer

    def observe(self, tracer: Tracer | None) -> None:
        """Emit this NIC's stage events (nicsim.sim.tracer) to `tracer` (None: stop; other
        observers subscribe through `watch`)."""
        self.tracer = tracer
        for block in (self.requester, self.responder, self.completer, self.cq, self.commands,
                      self.datagram):
            block.tracer = tracer

    # -- BAR --------------------------------------------------------------------------------

    def mmio_write(self, offset: int, value: int) -> None:
        if offset >= UAR_BASE:
            self._doorbell(offset >> PAGE_SHIFT, offset & (PAGE_SIZE - 1), value)
        elif offset == Reg.EQ_DB:
            self.eq.doorbell(value)
        elif offset == Reg.CMD_GO:
            r = self.regs
            self.commands.go(r.get(Reg.CMD_OPCODE, 0), r.get(Reg.CMD_IN, 0),
                             r.get(Reg.CMD_OUT, 0), r.get(Reg.CMD_MOD, 0))
        else:
            self.regs[offset] = value

    def mmio_write_block(self, offset: int, data: bytes) -> None:
        """A write-combined burst: a BlueFlame doorbell with its WQE (hwif UarReg.BF)."""
        bf = self.cfg.bf_size
        n = len(data)
        if offset < UAR_BASE or offset & (PAGE_SIZE - 1) != _BF or not bf or n < 8 \
                or n > bf or n & 7:
            self.engine.counters["bf_bad_write"] += 1
            return
        self._doorbell(offset >> PAGE_SHIFT, _SQ_DB, int.from_bytes(data[:8], "little"),
                       data[8:])

    def _doorbell(self, uar: int, reg: int, value: int, bf: bytes | None = None) -> None:
        """A write to doorbell page `uar`. It counts only for QPs and CQs created with that
        page: a process can reach its own UAR only, so it cannot ring another's queues."""
        c = self.engine.counters
        if reg == _CQ_ARM:
            cq = self.cq.cqs.get(value >> 32)
            if cq is None or cq.uar != uar:
                c["doorbell_bad_target"] += 1
                return
            self.cq.arm(cq, bool(value & (1 << 31)))
            return
        if reg == _SRQ_DB:
            srq = self.srq.srqs.get(value >> 32)
            if srq is None or srq.uar != uar:
                c["doorbell_bad_target"] += 1
                return
            srq.rq_pi = value & WQE_INDEX_MASK
            return
        qp = self.qps.get(value >> 32)
        if qp is None or qp.uar != uar or reg not in (_SQ_DB, _RQ_DB):
            c["doorbell_bad_target"] += 1
            return
        if reg == _SQ_DB:
            c["doorbells"] += 1
            if self.tracer is not None:
                self.tracer.emit(Stage.DOORBELL, qp.qpn, value & WQE_INDEX_MASK)
            # The doorbell decoder takes one doorbell per doorbell_cycles; the scheduler
            # learns of the new WQEs doorbell_ns after decoding starts. Doorbells keep their
            # order (one decoder).
            now = self.env.now
            at = self._db_unit.take(now, self._db_cost) + self.cfg.doorbell_ns
            if at > now:
                self.env.timeout(at - now).callbacks.append(
                    lambda _e: self._sq_doorbell(qp, value, bf))
            else:
                self._sq_doorbell(qp, value, bf)
        else:
            qp.rq_pi = value & WQE_INDEX_MASK
            if qp.state is _ERR:
                self.completer.flush_recv(qp)
            elif qp.state is not _RESET:
                self.fetch.prefetch_rq(qp)

    def _sq_doorbell(self, qp: QpCtx, value: int, bf: bytes | None = None) -> None:
        pi = value & WQE_INDEX_MASK
        qp.sq_pi = pi
        if qp.state is _RTS or qp.state is _ERR:
            if qp.state is _RTS:
                if bf is not None and not self.fetch.take_bf(qp, pi, bf):
                    self.engine.counters["bf_as_doorbell"] += 1
                self.fetch.prefetch_sq(qp)
                if qp.timer_deadline is None and qp.reliable and qp.rnr_until <= self.env.now:
                    self.requester.arm_timer(qp)  # (see Requester.restart_timer)
            self.engine.kick(qp)

    def mmio_read(self, offset: int) -> int:
        if offset == Reg.DEV_ID:
            return DEV_ID
        if offset == Reg.FEATURES:
            return features_word(self.features, self.cfg.bf_size)
        if offset == Reg.CMD_STATUS:
            return self.commands.read_status()
        return self.regs.get(offset, 0)

    def _cq_overrun(self, cq: CqCtx) -> None:
        """A CQ overran: every QP that completes work into it goes to ERR."""
        for qp in list(self.qps.values()):
            if cq.cqn in (qp.send_cqn, qp.recv_cqn) and qp.state is not QpState.ERR:
                self.completer.qp_error(qp)

    # -- receive ----------------------------------------------------------------------------

    def receive(self, frame: bytes | Unbuilt) -> None:
        if self.tracer is not None:
            self.tracer.emit(Stage.FRAME_IN, frame)
        rx = self.rx
        if frame.__class__ is Unbuilt:
            # A packet whose bytes were not made (nicsim.wire.packet.Unbuilt): the header
            # checks of the paths below, on its fields. Its ICRC is right by construction;
            # anything these checks refuse takes the general path, built.
            u: Unbuilt = frame  # type: ignore[assignment]
            qp = self.qps.get(u.dqpn)
            b = u.builder
            n = u.n
            ours = (qp is not None and qp.type is _RC and b.addrs == qp.rx_addrs
                    and b.path.dmac == self.mac and qp.pkey == PKEY_DEFAULT)
            op = u.opcode
            if (ours and op in _MIDDLES and not u.ext and not u.solicited
                    and not len(u.payload) & 3
                    and self.responder.middle(qp, op, u.psn, u.ackreq, u.payload)):
                f = self._fast_rx
                f[n] = f.get(n, 0) + 1
                return
            rx["packets"] += 1
            rx["bytes"] += n
            if not ours:
                self._general(u.build(), None, False, False)
                return
            rx["roce_packets"] += 1
            if op == _ACKNOWLEDGE:
                self.completer.ack(qp, u.psn, aeth_syndrome(u.ext))
                return
            # Every check of the general path holds (an RC packet from this QP's path, to us,
            # whole words of payload and pad, no ECN mark): what is left of it.
            p = u.packet()
            if p.info.is_request:
                self.responder.request(qp, p)
            else:
                self.completer.response(qp, p)
            return
        n = len(frame)
        rx["packets"] += 1
        rx["bytes"] += n
        checked = ce_done = False
        # The fast path: on IPv4, the MIDDLE of a WRITE or SEND or the LAST of a WRITE (no
        # pad, no SE, TVer 0) for one of our QPs, from its path: most packets of bulk
        # traffic. The checks of the general path below are made on the header bytes (a
        # flow's L3 and UDP checks are remembered by the parser, nicsim.wire.packet), then the
        # ICRC, and the responder takes the packet if it continues the message in progress.
        l3 = L3_CACHE.get(frame[12:42]) if self._fast and n > 58 and frame[14] == 0x45 \
            else None
        if l3 is not None and l3[0] > n:
            l3 = None  # cut short: the parser says how
        if l3 is not None:
            end, b = l3[0], l3[1]
            if (frame[b] in _MIDDLES and not frame[b + 1] & 0xBF and end - b > 16
                    and frame[0:6] == self.mac):
                qp = self.qps.get(int.from_bytes(frame[b + 5:b + 8], "big"))
                if (qp is not None and qp.type is _RC and frame[26:34] == qp.rx_addrs
                        and frame[b + 2] << 8 | frame[b + 3] == qp.pkey):
                    icrc = crc32(memoryview(frame)[b + 5:end - 4],
                                 crc32(frame[b:b + 4] + b"\xff", l3[2]))
                    if icrc != int.from_bytes(frame[end - 4:end], "little"):
                        self.drops["bad_icrc"] = self.drops.get("bad_icrc", 0) + 1
                        if self.tracer is not None:
                            got = int.from_bytes(frame[end - 4:end], "little")
                            self._broke(Rule.BAD_ICRC, qp.qpn, f"ICRC {icrc:#010x}",
                                        f"ICRC {got:#010x}")
                        return
                    rx["roce_packets"] += 1
                    if frame[15] & 3 == 3:  # ECN CE (RFC 3168): the notification point
                        rx["ce_marked"] += 1
                        self.np.marked(qp)
                        ce_done = True
                    if self._int is not None and n > end:
                        self._int_in(qp, frame, end, True, 0)
                    if self.responder.middle(qp, frame[b], int.from_bytes(frame[b + 9:b + 12],
                                                                          "big"),
                                             frame[b + 8] >= 0x80,
                                             memoryview(frame)[b + 12:end - 4]):
                        return
                    checked = True
        self._general(frame, l3, checked, ce_done)

    def _general(self, frame: bytes, l3: tuple[int, int, int, bool] | None, checked: bool,
                 ce_done: bool) -> None:
        """The receive path for every packet the fast path did not take. `checked`: the fast
        path checked its ICRC and counted it; `ce_done`: and its ECN mark."""
        rx = self.rx
        try:
            p = parse(frame, check_icrc=not checked, l3=l3, cache=self._fast)
        except WireError as e:
            if is_mac_control(frame):
                self._mac_control(frame)
                return
            bump(self.drops, e.reason.value)
            if self.tracer is not None:
                self._parse_violation(frame, e)
            return
        if not checked:
            rx["roce_packets"] += 1
        if frame[0:6] != self.mac:
            if frame[0] & 1 and frame[0:6] in self.port.mcast_macs:
                self.mcast.receive(p)  # a group address the port's filter passes
                return
            rx["not_for_us"] += 1
            if self.tracer is not None:
                self._broke(Rule.WRONG_ADDRESS, p.dqpn, f"destination MAC {self.mac.hex(':')}",
                            f"destination MAC {frame[0:6].hex(':')}")
            return
        info = p.info
        qp = self.qps.get(p.dqpn)
        if qp is None:
            rx["unknown_qpn"] += 1
            if self.tracer is not None:
                self._broke(Rule.UNKNOWN_QP, p.dqpn, f"one of QPs {sorted(self.qps)}",
                            f"DestQP {p.dqpn:#x} ({p.name})")
            return
        if info.kind is Kind.CNP:
            self._cnp(qp, frame, p.ipv6)
            return
        if info.transport is Transport.UD and qp.type is QpType.UD:
            if p.pkey != qp.pkey:
                rx["bad_pkey"] += 1
                return
            self.datagram.receive(qp, p)
            return
        if info.transport is not qp.transport:  # (a UD QP's were served above)
            rx["qp_type_mismatch"] += 1
            if self.tracer is not None:
                self._broke(Rule.TRANSPORT_MISMATCH, qp.qpn, f"a {qp.transport.name} opcode",
                            p.name)
            return
        if p.pkey != qp.pkey:
            rx["bad_pkey"] += 1
            if self.tracer is not None:
                self._broke(Rule.BAD_PKEY, qp.qpn, f"P_Key {qp.pkey:#06x}", f"P_Key {p.pkey:#06x}")
            return
        # A connected QP takes packets only from its path: the IP source must be the peer
        # and the destination this QP's own address (IBA 9.6 header validation; under
        # RoCEv2 the IP addresses stand for the GRH's SGID and DGID, Annex A17; rxe's
        # check_addr). Anything else is dropped silently, never executed or answered.
        want = qp.rx_addrs
        if want is not None and (frame[22:54] if p.ipv6 else frame[26:34]) != want:
            mine = want[len(want) // 2:]
            rx["bad_dst_ip" if (p.dip != mine) else "bad_src_ip"] += 1
            if self.tracer is not None:
                self._broke(Rule.WRONG_ADDRESS, qp.qpn, f"IP source, destination {want.hex()}",
                            (frame[22:54] if p.ipv6 else frame[26:34]).hex())
            return
        if want is not None and (frame[12:14] == _V1_TYPE) is not qp.builder.path.roce_v1:
            rx["bad_roce_version"] += 1  # the peer's GIDs, but not the QP's RoCE version
            if self.tracer is not None:
                v1 = qp.builder.path.roce_v1
                self._broke(Rule.WRONG_ADDRESS, qp.qpn, f"RoCE v{1 if v1 else 2}",
                            f"RoCE v{2 if v1 else 1}")
            return
        if (p.payload_len + ((p._f1 >> 4) & 3)) & 3:
            rx["bad_padcount"] += 1  # payload and pad fill whole 4-byte words (IBA 9.2)
            if self.tracer is not None:
                self._broke(Rule.BAD_PAD, qp.qpn,
                            f"pad {-p.payload_len & 3} after {p.payload_len} payload bytes",
                            f"pad {p.pad} ({p.payload_len + p.pad} bytes of payload and pad)")
            return
        if self._int is not None and (end := telemetry.datagram_end(frame)) > 0 and \
                len(frame) > end:
            self._int_in(qp, frame, end, info.is_request, p.psn)
        if info.is_request:
            if not ce_done and p.ecn is Ecn.CE:
                rx["ce_marked"] += 1
                self.np.marked(qp)
            self.responder.request(qp, p)
        else:
            self.completer.response(qp, p)

    def _broke(self, rule: Rule, qpn: int, expected: str, actual: str) -> None:
        """The packet of the last FRAME_IN broke `rule` (nicsim.nic.violations): tell the
        observers. (Called only when there is a tracer.)"""
        assert self.tracer is not None
        self.tracer.emit(Stage.RX_VIOLATION, rule, qpn, expected, actual)

    def _parse_violation(self, frame: bytes, e: WireError) -> None:
        """A frame the parser refused: the rule it broke, if it was a RoCE packet at all."""
        rule = PARSE_RULE.get(e.reason)
        if rule is None:
            return  # not IP, not UDP, not the RoCEv2 port: other traffic
        qpn, expected = -1, _PARSE_EXPECTED.get(rule, "a well-formed RoCEv2 packet")
        if rule is Rule.BAD_ICRC:
            p = parse(frame, check_icrc=False, cache=False)
            qpn = p.dqpn
            expected = f"ICRC {compute_icrc(frame, p.l3_off, frame_end(frame)):#010x}"
        self._broke(rule, qpn, expected, e.detail or e.reason.value)

    def _int_in(self, qp: QpCtx, frame: bytes, end: int, request: bool, psn: int) -> None:
        """A frame with bytes after its IP datagram (nicsim.wire.telemetry): a request's
        INT records are echoed by the next ACK; an ACK's echo goes to the algorithm."""
        tr = telemetry.trailer(frame, end)
        if tr is None or self._int is None:
            return
        if request:
            if not telemetry.is_echo(tr):
                self._int.int_request(qp, tr)
        elif telemetry.is_echo(tr):
            self._int.on_int(qp, psn, telemetry.hops(tr))

    def _mac_control(self, frame: bytes) -> None:
        """A MAC Control frame: PFC pauses the port's priorities (802.1Qbb); an 802.3x
        PAUSE is counted and ignored (RoCE fabrics use PFC). A malformed one is a port
        counter, not a parse drop: rx_drop counts RoCEv2 parse errors only."""
        try:
            pf = parse_pfc(frame)
        except PfcFormatError:
            if len(frame) >= 16 and frame[14:16] == PAUSE_OPCODE.to_bytes(2, "big"):
                self.port.count("pause_ignored")
            else:
                self.port.count("mac_control_malformed")
            return
        self.port.pause(pf)

    def _cnp(self, qp: QpCtx, frame: bytes, ipv6: bool) -> None:
        """A CNP for `qp` (Annex A17.9.3): its rate control reacts, if the CNP comes from the
        QP's peer (a CNP from anywhere else must not slow a connection down)."""
        rx = self.rx
        rx["cnp"] += 1
        want = qp.rx_addrs
        if qp.type is not QpType.RC or want is None or \
                (frame[22:54] if ipv6 else frame[26:34]) != want or qp.state is not QpState.RTS:
            rx["cnp_ignored"] += 1
            return
        if self.cc is None:
            rx["cnp_ignored"] += 1  # cc none: the NIC does not react to CNPs
            return
        self.cc.on_cnp(qp)

    # -- reporting --------------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """Every counter of every block, as 'block.name'."""
        out: dict[str, int] = {}
        rx = dict(self.rx)
        for n, k in self._fast_rx.items():
            rx["packets"] += k
            rx["bytes"] += n * k
            rx["roce_packets"] += k
        blocks = {
            "rx": rx, "rx_drop": self.drops, "port": self.port.counters,
            "pcie": self.pcie.counters, "sched": self.engine.counters,
            "wqe_fetch": self.fetch.counters, "requester": self.requester.counters,
            "responder": self.responder.counters, "completer": self.completer.counters,
            "datagram": self.datagram.counters, "odp": self.odp.counters,
            "mcast": self.mcast.counters,
            "cq": self.cq.counters, "cmd": self.commands.counters,
            "np": self.np.counters, "cc": self.cc.counters if self.cc else {},
            "xlate": {"mpt_hits": self.xlate.mpt_hits, "mpt_misses": self.xlate.mpt_misses,
                      "mtt_hits": self.xlate.mtt_hits, "mtt_misses": self.xlate.mtt_misses},
        }
        for b, cs in blocks.items():
            for k, v in cs.items():
                out[f"{b}.{k}"] = int(v)
        for p in self.port.pfc:
            out[f"port.paused_ns.prio{p}"] = int(self.port.paused_ns()[p])
        return out
