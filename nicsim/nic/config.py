"""Configuration of one NIC: capacities, pipeline latencies, cache sizes."""

from __future__ import annotations

from dataclasses import dataclass, field

from nicsim.host.pcie import PcieConfig
from nicsim.hwif import MAX_UAR
from nicsim.nic.cc.config import CcConfig


@dataclass(frozen=True)
class NicConfig:
    mac: str = "02:00:00:00:00:01"
    ip: str = "10.0.0.1"
    pcie: PcieConfig = field(default_factory=PcieConfig)
    max_qp: int = 1 << 16
    max_cq: int = 1 << 16
    log_mpt_entries: int = 16
    log_mtt_entries: int = 20
    max_qp_wr: int = 32768
    max_sge: int = 16
    max_cqe: int = 1 << 20
    max_qp_rd_atom: int = 16
    max_inline: int = 256
    max_uar: int = MAX_UAR  # doorbell pages: one per process that opens the device
    # Latencies of fixed-function stages, in ns.
    firmware_ns: float = 2000.0  # command processor per command
    doorbell_ns: float = 20.0  # doorbell decode to scheduler
    wqe_decode_ns: float = 10.0
    tx_pipeline_ns: float = 40.0  # payload in NIC to first bit on the wire (framing, ICRC)
    loopback_ns: float = 100.0  # a frame to our own MAC: its last bit out to its last bit in
    rx_pipeline_ns: float = 60.0  # last bit in to the packet being acted on (parse, ICRC)
    # Transmit read-ahead: payload DMA reads in flight ahead of the wire (like read tags).
    tx_readahead: int = 32
    # Packets a QP sends per turn while other QPs wait (packet-level round robin).
    tx_quantum: int = 1
    max_wqe_prefetch: int = 8  # WQEs fetched by one DMA read when several are pending
    # Address translation cache.
    mpt_cache_entries: int = 512
    mtt_cache_entries: int = 4096
    # Responder ACK coalescing: an ACK every N packets, and on every packet with AckReq.
    ack_coalesce: int = 16
    ecn_capable: bool = True
    # Priorities (802.1p, from DSCP >> 3) on which the port honours PFC pauses (none: PFC
    # frames are counted and ignored, and the port needs no event per frame).
    pfc_classes: tuple[int, ...] = ()
    # Congestion control: reaction point (per-QP rates) and notification point (CNPs).
    cc: CcConfig = field(default_factory=CcConfig)
