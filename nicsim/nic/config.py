"""Configuration of one NIC: capacities, pipeline latencies, cache sizes."""

from __future__ import annotations

from dataclasses import dataclass, field

from nicsim.fabric.pfc import PfcWatchdog
from nicsim.host.pcie import PcieConfig
from nicsim.hwif import MAX_UAR, ODP_EQN
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
    # Send WQEs fetched by one DMA read, and the most a QP holds fetched ahead of execution:
    # the NIC prefetches at the doorbell and again when a QP's fetched WQEs run low, so the
    # payload stream never waits for a descriptor read (nicsim.nic.wqe_fetch).
    max_wqe_prefetch: int = 8
    # Receive WQEs a QP holds in the NIC, prefetched at the RQ doorbell: an incoming SEND
    # finds its receive WQE on chip instead of reading it from host memory.
    rwqe_cache: int = 8
    # Descriptor DMA reads (send and receive WQEs) in flight at once: the read tags the
    # descriptor fetcher has (payload reads have tx_readahead).
    dma_read_tags: int = 16
    # The NIC clock and what each stage occupies one of its units for, in cycles (the
    # stage's initiation interval; its latency is the *_ns pipeline delay above), and how
    # many units each stage has (nicsim.nic.engines). An ASIC: a fast clock, many units; an
    # FPGA NIC: a slow clock, one or two.
    clock_mhz: float = 500.0
    doorbell_cycles: int = 4  # doorbell decode, per doorbell (one decoder)
    sched_cycles: int = 16  # scheduler pick, per WQE started
    wqe_parse_cycles: int = 32  # WQE parse and local key check, per WQE started
    header_cycles: int = 12  # header build (BTH, RETH, ICRC set-up), per packet sent
    rx_parse_cycles: int = 4  # receive parse, per packet received (one parser)
    resp_cycles: int = 12  # responder decision (PSN, rkey, placement), per request packet
    cqe_cycles: int = 8  # CQE build, per completion (one CQE builder)
    send_engines: int = 24  # QP schedulers: a QP is served by one at a time
    responder_units: int = 4
    # BlueFlame: bytes of a UAR page's WQE-by-MMIO buffer (hwif.BF_OFFSET; 0: none). A post
    # of one small WQE writes it with the doorbell and the NIC skips the WQE fetch.
    bf_size: int = 256
    # On-demand paging (nicsim.nic.odp): the NIC raises page faults for regions registered
    # without pinning. False: a device without it (DevCap.ODP clear: its commands are
    # BAD_OPCODE).
    odp: bool = True
    # Optional command sets (hwif.device_commands): event queues (0: none, so no completion
    # or asynchronous events), SRQ numbers (0: no SRQs) and UD multicast groups. A device
    # without one reports it in QUERY_DEVICE / FEATURES and answers its commands BAD_OPCODE.
    max_eq: int = 64
    max_srq: int = 1 << 16
    multicast: bool = True
    # Address translation cache.
    mpt_cache_entries: int = 512
    mtt_cache_entries: int = 4096
    # Responder ACK coalescing: an ACK every N packets, and on every packet with AckReq.
    ack_coalesce: int = 16
    ecn_capable: bool = True
    # Priorities (802.1p, from DSCP >> 3) on which the port honours PFC pauses (none: PFC
    # frames are counted and ignored, and the port needs no event per frame).
    pfc_classes: tuple[int, ...] = ()
    # The storm breaker of those priorities' transmit queues (nicsim.fabric.pfc.PfcWatchdog).
    pfc_watchdog: PfcWatchdog = field(default_factory=PfcWatchdog)
    # Congestion control: reaction point (per-QP rates) and notification point (CNPs).
    cc: CcConfig = field(default_factory=CcConfig)

    def __post_init__(self) -> None:
        check_odp_eqs(self.odp, self.max_eq)


def check_odp_eqs(odp: bool, max_eq: int) -> None:
    """ValueError unless the page faults of on-demand paging have their event queue."""
    if odp and max_eq <= ODP_EQN:
        raise ValueError(f"odp needs event queue {ODP_EQN} for its page faults: max_eq "
                         f"{max_eq} must be above {ODP_EQN} (or odp false)")
