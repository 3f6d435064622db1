"""QP1, the General Services Interface QP of a device (IBA 13.5): the kernel's MAD agent.

As Linux's ib_mad does when a device registers, the kernel creates one QP numbered 1 per port,
with its own CQ, PD and registered buffers in kernel memory. To the NIC it is an ordinary UD
QP (the QPC says UD; QPN 1 is one of the numbers the driver keeps back from users, IBA
10.2.4) whose Q_Key is the GSI's well-known 0x80010000: the NIC needs nothing special to
deliver a MAD, and the driver reaches it only through the hwif (commands, WQEs, doorbells,
CQEs), like any QP. The kernel posts its sends and receives with the nsnic WQE/CQE codec
(nicsim.driver.rings: one definition of the ring formats for user and kernel
consumers, as mlx5's formats are shared by the kernel driver and its user provider).

A MAD goes out as a UD SEND to QP 1 of the destination, Q_Key 0x80010000, and comes in with a
40-byte GRH in front of its 256 bytes, which tells whose GID sent it.
"""

from __future__ import annotations

import errno
import ipaddress
from dataclasses import dataclass

from nicsim.driver.abi import DoorbellPage
from nicsim.driver.enums import ibv_qp_state, ibv_wc_opcode, ibv_wc_status, ibv_wr_opcode
from nicsim.driver.kernel.cm.mad import GSI_QKEY, MAD_SIZE
from nicsim.driver.kernel.ib_core import IbDevice, KernelError
from nicsim.driver.kernel.uverbs import cq_resp, qp_resp
from nicsim.driver.rings import ProviderCq, ProviderError, ProviderQp

from nicsim.hwif import (
    GSI_QPN,
    Access,
    QpAttrMask,
    QpState,
    QpType,
    blank_qpc,
)

GRH_LEN = 40
RECV_DEPTH = 64
SEND_DEPTH = 64
_SLOT = GRH_LEN + MAD_SIZE  # one buffer: a GRH and a MAD
_SIGNALED = 2  # IBV_SEND_SIGNALED


@dataclass
class _Sge:
    addr: int
    length: int
    lkey: int


@dataclass
class _Wr:
    """The fields of a work request the provider reads (ibv_send_wr / ibv_recv_wr)."""

    wr_id: int
    sg: list[_Sge]
    num_sge: int = 1
    opcode: int = int(ibv_wr_opcode.IBV_WR_SEND)
    send_flags: int = _SIGNALED
    imm_data: int = 0
    remote_addr: int = 0
    rkey: int = 0
    compare_add: int = 0
    swap: int = 0
    invalidate_rkey: int = 0
    next_wr: None = None
    ah: object = None
    remote_qpn: int = GSI_QPN
    remote_qkey: int = GSI_QKEY


@dataclass
class _Ah:
    av: object
    closed: bool = False


@dataclass
class Received:
    """A MAD that arrived on QP1: who sent it (GID, QPN) and its 256 bytes."""

    sgid: bytes
    src_qp: int
    mad: bytes


@dataclass
class GsiCounters:
    sent: int = 0
    received: int = 0
    send_errors: int = 0
    recv_errors: int = 0
    no_send_slot: int = 0


class Gsi:
    """QP1 of device `dev` (port 1)."""

    def __init__(self, dev: IbDevice) -> None:
        hw = dev.hw
        host = hw.host
        self.dev = dev
        self.host = host
        self.aspace = host.new_address_space()  # kernel memory
        self.uctx = u = dev.open(self.aspace, privileged=True)
        self.pd = dev.alloc_pd(u)
        size = (RECV_DEPTH + SEND_DEPTH) * _SLOT
        self.buf = self.aspace.mmap(size)
        self.mr = dev.reg_mr(u, self.pd, self.buf, size, int(Access.LOCAL_WRITE))
        self.cq = dev.create_cq(u, RECV_DEPTH + SEND_DEPTH)
        self.qp = dev.create_qp(u, self.pd, int(QpType.UD), self.cq, self.cq,
                                (SEND_DEPTH, RECV_DEPTH, 1, 1, 0), special_qpn=GSI_QPN)
        db = DoorbellPage(hw.bar, u.uar)
        self._qps: dict[int, ProviderQp] = {}
        self._pq = ProviderQp(host, self.aspace, db, qp_resp(u, self.qp), 1, 1, 0, False,
                              ud=True)
        self._qps[GSI_QPN] = self._pq
        self._pcq = ProviderCq(host, self.aspace, cq_resp(u, self.cq), self._qps)
        self.counters = GsiCounters()
        self._free_send = list(range(SEND_DEPTH))
        self._to_rts()
        for i in range(RECV_DEPTH):
            self._post_recv(i)

    def _to_rts(self) -> None:
        """RESET->INIT (P_Key index, port, the GSI Q_Key)->RTR->RTS, as ib_mad does."""
        M = QpAttrMask
        for state, mask in ((QpState.INIT, M.STATE | M.PKEY_INDEX | M.PORT | M.QKEY),
                            (QpState.RTR, M.STATE), (QpState.RTS, M.STATE | M.SQ_PSN)):
            a = blank_qpc(GSI_QPN)
            a.state, a.qkey, a.sq_psn = state, GSI_QKEY, 0
            self.dev.modify_qp(self.qp, a, int(mask))
        self._pq.state = int(ibv_qp_state.IBV_QPS_RTS)

    def sgid_index(self) -> int:
        """The GID table entry MADs and connections go from: the RoCE v2 GID of the netdev's
        address (rdma_cm's default GID type, cma_get_default_gid_type)."""
        hw = self.dev.hw
        return hw.gid_index(ip_gid(hw.fn.netdev.ip))

    @property
    def cq_ring(self) -> tuple[int, int]:
        """The physical range of the CQ ring (what a waiter watches for the NIC's writes)."""
        pa = self.aspace.translate(self._pcq.r.ring_va)
        return pa, pa + self._pcq.ring_bytes

    def _slot(self, i: int) -> int:
        return self.buf + i * _SLOT

    def _post_recv(self, i: int) -> None:
        self._pq.post_recv(_Wr(i, [_Sge(self._slot(i), _SLOT, self.mr.hw.key)]))

    def send(self, dgid: bytes, mad: bytes) -> None:
        """Send one MAD to QP1 of the port that owns `dgid`. KernelError if there is no route
        (EHOSTUNREACH) or every send buffer is in flight (ENOBUFS)."""
        assert len(mad) == MAD_SIZE
        self.poll()  # take back the send buffers of completed sends
        if not self._free_send:
            self.counters.no_send_slot += 1
            raise KernelError("QP1 has no free send buffer", errno.ENOBUFS)
        av = self.dev.resolve_av(1, 1, dgid, self.sgid_index(), 0, 64, 0, 0)
        i = self._free_send.pop()
        va = self._slot(RECV_DEPTH + i)
        self.aspace.write(va, mad)
        try:
            self._pq.post_send(_Wr(RECV_DEPTH + i, [_Sge(va, MAD_SIZE, self.mr.hw.key)],
                                   ah=_Ah(av)))
        except ProviderError as e:
            self._free_send.append(i)
            raise KernelError(f"QP1 send: {e}", e.errno) from None
        self.counters.sent += 1

    def poll(self) -> list[Received]:
        """The MADs that arrived (their receive buffers are posted again); send completions
        free their buffers."""
        out: list[Received] = []
        while True:
            wcs = self._pcq.poll(16) if self._pcq_ready() else []
            if not wcs:
                return out
            for wc in wcs:
                if wc.opcode == ibv_wc_opcode.IBV_WC_RECV or wc.wr_id < RECV_DEPTH:
                    if wc.status == ibv_wc_status.IBV_WC_SUCCESS and \
                            wc.byte_len >= GRH_LEN + MAD_SIZE:
                        raw = self.aspace.read(self._slot(wc.wr_id), _SLOT)
                        out.append(Received(_grh_sgid(raw[:GRH_LEN]), wc.src_qp,
                                            raw[GRH_LEN:]))
                        self.counters.received += 1
                    else:
                        self.counters.recv_errors += 1
                    self._post_recv(wc.wr_id)
                else:
                    if wc.status != ibv_wc_status.IBV_WC_SUCCESS:
                        self.counters.send_errors += 1
                    self._free_send.append(wc.wr_id - RECV_DEPTH)

    def _pcq_ready(self) -> bool:
        """Whether the CQ's next entry is written (so poll() does not wait: the kernel reads
        it from its completion handler, it does not poll a ring in a loop)."""
        return self._pcq.ready()


def _grh_sgid(grh: bytes) -> bytes:
    """The source GID of a received GRH: RoCEv2 over IPv4 puts the IPv4 header in its last 20
    bytes (the source address is IPv4-mapped); over IPv6 the GRH is the IPv6 header."""
    if grh[:20] == bytes(20) and grh[20] >> 4 == 4:
        return bytes(10) + b"\xff\xff" + grh[32:36]
    return bytes(grh[8:24])


def gid_ip(gid: bytes) -> str:
    """The IP address a RoCEv2 GID stands for."""
    a = ipaddress.IPv6Address(gid)
    return str(a.ipv4_mapped or a)


def ip_gid(ip: str) -> bytes:
    a = ipaddress.ip_address(ip)
    return bytes(10) + b"\xff\xff" + a.packed if a.version == 4 else a.packed
