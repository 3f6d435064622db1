"""The ideal completion time of a message: the same message alone on an idle path, computed
from the model's own parameters, the denominator of FCT slowdown.

It follows the stages the model charges a message, from `ibv_post_send` to the completion
being polled (nicsim.nic, nicsim.host.pcie), with warm translation caches and nothing else
in flight:

  post_send CPU time; the doorbell MMIO write across PCIe and its decode; the WQE fetch (a
  DMA read of one WQE slot) and its decode, or, for a WQE that fits the BlueFlame buffer
  (inline data, or any if the provider prefers BlueFlame), the write that carries it with
  the doorbell; the first payload DMA read; the transmit
  pipeline; every packet on the wire at the line rate, or behind the PCIe read completions
  when those are slower;
  propagation (store and forward at each switch); the receive pipeline (a SEND's receive
  WQE is already in the NIC: prefetched when it was posted); the ACK back; the CQE written
  across PCIe; the poll that reads it.

A READ runs its request out, the responder's payload reads and the responses back, and
completes when its data has landed in host memory. An atomic is one request and one response
around the responder's 8-byte read. The bytes on the wire are those of the frames the model
builds (nicsim.wire): headers, extension headers, pad, ICRC, and preamble, FCS and IFG.

A lone message in a fresh world is slower than this: its first access misses the NIC's
translation caches. Tests hold the model to slowdown 1 (within a few percent) for warm lone
messages of every kind and size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nicsim.driver.rings import prefer_bf
from nicsim.host.host import CpuCosts
from nicsim.host.pcie import PcieConfig
from nicsim.hwif import (
    CQE_SIZE,
    SEND_WQE_CTRL_SIZE,
    SGE_SIZE,
    bf_burst_len,
    send_wqe_stride,
)
from nicsim.nic.config import NicConfig
from nicsim.scenario.build import Hop
from nicsim.scenario.schema import ATOMICS, SENDS, WITH_IMM, OpKind
from nicsim.wire import Ext, wire_bytes
from nicsim.wire.packet import BTH_LEN, ETH_HLEN, ETH_IFG, ICRC_LEN, IPV4_HLEN, UDP_HLEN

_HDR = ETH_HLEN + IPV4_HLEN + UDP_HLEN + BTH_LEN + ICRC_LEN  # around every RoCEv2 payload
MMIO_BYTES = 8  # a doorbell


@dataclass(frozen=True)
class IdealConfig:
    """What the ideal depends on: the path and the endpoint parameters."""

    mtu: int
    pcie: PcieConfig
    nic: NicConfig
    cpu: CpuCosts
    max_send_sge: int = 4
    max_inline: int = 0
    max_recv_sge: int = 4
    prefer_bf: bool = field(default_factory=prefer_bf)  # the provider's BlueFlame policy


class Ideal:
    def __init__(self, cfg: IdealConfig) -> None:
        self.cfg = cfg
        p = cfg.pcie
        self._bpns = p.bytes_per_ns
        self._rtt = 2 * p.latency_ns + p.host_mem_ns
        self._sq_stride = send_wqe_stride(cfg.max_send_sge, cfg.max_inline)

    # -- PCIe --------------------------------------------------------------------------------

    def _cpl(self, n: int) -> float:
        """Time the read completions of n bytes occupy the downstream link."""
        p = self.cfg.pcie
        return (n + max(1, -(-n // p.mps)) * p.tlp_overhead) / self._bpns

    def _read(self, n: int) -> float:
        """A DMA read of n bytes on an idle link: requests up, round trip, completions down."""
        p = self.cfg.pcie
        return max(1, -(-n // p.mrrs)) * p.tlp_overhead / self._bpns + self._rtt + self._cpl(n)

    def _wdur(self, n: int) -> float:
        p = self.cfg.pcie
        return (n + max(1, -(-n // p.mps)) * p.tlp_overhead) / self._bpns

    def _write(self, n: int) -> float:
        """A posted DMA write of n bytes, until it lands in host memory."""
        return self._wdur(n) + self.cfg.pcie.latency_ns

    # -- wire --------------------------------------------------------------------------------

    @staticmethod
    def _frame(payload: int, ext: int) -> int:
        return _HDR + ext + payload + (-payload & 3)

    @staticmethod
    def _ser(frame: int, rate: float) -> float:
        return wire_bytes(frame) * 8.0 / rate

    def _deliver(self, hops: list[Hop], start: float, frame: int) -> float:
        """When the last bit of a frame that starts on the first hop at `start` reaches the
        far end of the path (store and forward, and the forwarding latency, at each switch)."""
        t = start
        for i, h in enumerate(hops):
            if i:
                t += hops[i - 1].switch_ns
            t += self._ser(frame, h.rate_gbps) - ETH_IFG * 8.0 / h.rate_gbps + h.prop_ns
        return t

    def _burst(self, hops: list[Hop], ready0: float, msg: _Msg
               ) -> tuple[float, float, float]:
        """A message's packets, their payloads read from host memory one after the other from
        `ready0` (the first one's data in the NIC): when the first, the next to last and the
        last reach the far end. The line (the slowest hop) or the PCIe read completions set
        the pace."""
        tx = self.cfg.nic.tx_pipeline_ns
        rate = min(h.rate_gbps for h in hops)
        start0 = ready0 + tx
        first = self._deliver(hops, start0, msg.first_frame)
        if msg.k == 1:
            return first, first, first
        m = self.cfg.mtu
        mid = self._ser(self._frame(m, 0), rate)
        # Start of packet i: behind the previous one on the line, or behind its own read.
        line = start0 + self._ser(msg.first_frame, rate) + (msg.k - 3) * mid
        pcie = ready0 + (msg.k - 2) * self._cpl(m) + tx
        penult = self._deliver(hops, max(line, pcie), self._frame(m, 0)) if msg.k > 2 else first
        line += mid if msg.k > 2 else 0.0
        pcie += self._cpl(msg.last)
        return first, penult, self._deliver(hops, max(line, pcie), msg.last_frame)

    def _placed(self, first: float, penult: float, last: float, msg: _Msg,
                wait: float = 0.0) -> float:
        """When the receiver's DMA write of the last packet starts: after the receive
        pipeline, behind the writes of the packets before it (one PCIe link upstream), and
        no sooner than `wait` after the first packet's (a SEND's receive WQE fetch)."""
        rx = self.cfg.nic.rx_pipeline_ns
        if msg.k == 1:
            return last + rx + wait
        w = self._wdur(msg.first)
        before = max(penult + rx, first + rx + wait + (msg.k - 2) * w)
        return max(last + rx, before + w)

    # -- messages ----------------------------------------------------------------------------

    def ns(self, op: OpKind, n: int, fwd: list[Hop], back: list[Hop], inline: bool = False
           ) -> float:
        """Ideal time from posting a message of `n` bytes to polling its completion, over
        the path `fwd` (requester to responder) and `back`."""
        c = self.cfg
        nic = c.nic
        inline = inline and op is not OpKind.READ and op not in ATOMICS
        # A lone post goes by BlueFlame if its WQE fits (the provider's prefer_bf, as mlx5's
        # default), or only if it is inline.
        bf = bf_burst_len(SEND_WQE_CTRL_SIZE + (n if inline else SGE_SIZE), nic.bf_size) \
            if inline or c.prefer_bf else 0
        if bf:  # BlueFlame: the WQE comes with the doorbell, in 64-byte write-combined TLPs
            t = c.cpu.post_send + c.cpu.mmio_write * (-(-bf // 64) - 1) + \
                sum(min(64, bf - o) + c.pcie.tlp_overhead for o in range(0, bf, 64)) / \
                self._bpns + c.pcie.latency_ns + nic.doorbell_ns + nic.wqe_decode_ns
        else:
            t = c.cpu.post_send + (MMIO_BYTES + c.pcie.tlp_overhead) / self._bpns + \
                c.pcie.latency_ns + nic.doorbell_ns
            t += self._read(self._sq_stride) + nic.wqe_decode_ns  # the WQE
        if op is OpKind.READ:
            arr = self._deliver(fwd, t + nic.tx_pipeline_ns, self._frame(0, Ext.RETH.size))
            at = arr + nic.rx_pipeline_ns
            msg = self._msg(n, Ext.AETH.size, Ext.AETH.size, Ext.AETH.size)
            ready = at + (self._read(msg.first) if n else 0.0)
            landed = self._placed(*self._burst(back, ready, msg), msg) + self._write(msg.last)
            return landed + self._write(CQE_SIZE) + c.cpu.poll_cqe
        if op in ATOMICS:
            arr = self._deliver(fwd, t + nic.tx_pipeline_ns, self._frame(0, Ext.ATOMIC_ETH.size))
            at = arr + nic.rx_pipeline_ns + self._read(8)
            # (Responses other than READ data leave without the transmit pipeline.)
            back_arr = self._deliver(back, at, self._frame(0, Ext.AETH.size
                                                           + Ext.ATOMIC_ACK_ETH.size))
            landed = back_arr + nic.rx_pipeline_ns + self._write(8)
            return landed + self._write(CQE_SIZE) + c.cpu.poll_cqe
        first_ext = 0 if op in SENDS else Ext.RETH.size
        last_ext = Ext.IMMDT.size if op in WITH_IMM else 0
        msg = self._msg(n, first_ext, last_ext)
        ready = t if inline or not n else t + self._read(msg.first)
        # The responder ACKs the last packet once its write is under way; a SEND's data
        # waits for the receive WQE, which the responder fetches at the first packet.
        # (A SEND's receive WQE is in the NIC's cache: prefetched when it was posted.)
        wait = 0.0
        acked = self._placed(*self._burst(fwd, ready, msg), msg, wait)
        back_arr = self._deliver(back, acked, self._frame(0, Ext.AETH.size))
        return back_arr + self._write(CQE_SIZE) + c.cpu.poll_cqe

    def _msg(self, n: int, first_ext: int, last_ext: int, only_ext: int | None = None
             ) -> _Msg:
        m = self.cfg.mtu
        k = max(1, -(-n // m))
        last = n - m * (k - 1)
        if k == 1:
            f = self._frame(n, first_ext + last_ext if only_ext is None else only_ext)
            return _Msg(k, n, last, f, f)
        return _Msg(k, m, last, self._frame(m, first_ext), self._frame(last, last_ext))


@dataclass(frozen=True, slots=True)
class _Msg:
    """A message's packets: how many, the first and last payloads, their frame lengths
    (every middle packet carries one MTU and no extension header)."""

    k: int
    first: int
    last: int
    first_frame: int
    last_frame: int
