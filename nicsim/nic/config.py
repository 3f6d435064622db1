"""Configuration of one NIC: capacities, pipeline latencies, cache sizes."""

from __future__ import annotations

from dataclasses import dataclass, field

from nicsim.fabric.pfc import PfcWatchdog
from nicsim.host.pcie import PcieConfig
from nicsim.hwif import MAX_UAR, ODP_EQN, SCATTER_CQE_SIZES
from nicsim.knobs import knob
from nicsim.nic.cc.config import CcConfig


@dataclass(frozen=True)
class NicConfig:
    """One NIC. Every knob (nicsim.knobs) is a field of the scenario's `nic:` section and of
    a profile's (nicsim.profiles.sections makes their schema from these fields); the
    addresses, PCIe (`pcie:`), congestion control (`cc:`), the PFC priorities (from the
    fabric) and the PFC watchdog (its own section) are set apart."""

    mac: str = "02:00:00:00:00:01"
    ip: str = "10.0.0.1"
    pcie: PcieConfig = field(default_factory=PcieConfig)
    # Capacities the device reports.
    max_qp: int = knob(1 << 16, "QP numbers", ge=2, le=1 << 24)
    max_cq: int = knob(1 << 16, "CQ numbers", ge=1, le=1 << 24)
    log_mpt_entries: int = knob(16, "log2 of the MPT entries (keys), a table the "
                                "driver builds in host memory", ge=4, le=24)
    log_mtt_entries: int = knob(20, "log2 of the MTT entries (pages), a table the "
                                "driver builds in host memory", ge=4, le=30)
    max_qp_wr: int = knob(32768, "WRs a queue holds", ge=1, le=32768)
    max_sge: int = knob(16, "SGEs per WR", ge=1, le=32)
    max_cqe: int = knob(1 << 20, "CQEs a CQ holds", ge=1, le=1 << 22)
    max_qp_rd_atom: int = knob(16, "READs and atomics a QP may have outstanding", ge=1,
                               le=255)
    max_inline: int = knob(256, "bytes of inline data per WQE", ge=0, le=1024)
    max_uar: int = MAX_UAR  # doorbell pages: one per process that opens the device
    # Latencies of fixed-function stages, in ns.
    firmware_ns: float = knob(2000.0, "firmware (command processor) time of a mailbox "
                              "command, ns", ge=0)
    doorbell_ns: float = knob(20.0, "doorbell decode latency: an SQ doorbell reaching the NIC "
                              "to the scheduler seeing its WQEs, ns", ge=0)
    wqe_decode_ns: float = knob(10.0, "decoding a fetched WQE (latency), ns", ge=0)
    tx_pipeline_ns: float = knob(40.0, "payload in the NIC to first bit on the wire (framing, "
                                 "ICRC), ns", ge=0)
    loopback_ns: float = knob(100.0, "a frame to the NIC's own MAC: its last bit out to its "
                              "last bit in, ns", ge=0)
    rx_pipeline_ns: float = knob(60.0, "last bit in to the packet being acted on (parse, "
                                 "ICRC), ns", ge=0)
    tx_readahead: int = knob(32, "payload DMA reads in flight ahead of the wire (read tags)",
                             ge=1, le=256)
    tx_quantum: int = knob(1, "packets a QP sends per turn while other QPs wait", ge=1,
                           le=1024)
    # Send WQEs fetched by one DMA read, and the most a QP holds fetched ahead of execution:
    # the NIC prefetches at the doorbell and again when a QP's fetched WQEs run low, so the
    # payload stream never waits for a descriptor read (nicsim.nic.wqe_fetch).
    max_wqe_prefetch: int = knob(8, "send WQEs fetched by one descriptor DMA read, and the "
                                 "most a QP holds fetched ahead of execution", ge=1, le=64)
    rwqe_cache: int = knob(8, "receive WQEs a QP holds in the NIC, prefetched at the RQ "
                           "doorbell", ge=1, le=1024)
    dma_read_tags: int = knob(16, "descriptor (send and receive WQE) DMA reads in flight at "
                              "once", ge=1, le=1024)
    # The NIC clock and what each stage occupies one of its units for, in cycles (the
    # stage's initiation interval; its latency is the *_ns pipeline delay above), and how
    # many units each stage has (nicsim.nic.engines). An ASIC: a fast clock, many units; an
    # FPGA NIC: a slow clock, one or two.
    clock_mhz: float = knob(500.0, "the NIC's clock, which the *_cycles count in, MHz", gt=0,
                            le=10000)
    doorbell_cycles: int = knob(4, "doorbell decode, per doorbell (one decoder)", ge=0,
                                le=1 << 20)
    sched_cycles: int = knob(16, "scheduler pick, per WQE started", ge=0, le=1 << 20)
    wqe_parse_cycles: int = knob(32, "WQE parse and local key check, per WQE started", ge=0,
                                 le=1 << 20)
    header_cycles: int = knob(12, "header build (BTH, RETH, ICRC set-up), per packet sent",
                              ge=0, le=1 << 20)
    rx_parse_cycles: int = knob(4, "receive parse, per packet received (one parser)", ge=0,
                                le=1 << 20)
    resp_cycles: int = knob(12, "responder decision (PSN, rkey, placement), per request "
                            "packet", ge=0, le=1 << 20)
    cqe_cycles: int = knob(8, "CQE build, per completion (one CQE builder)", ge=0, le=1 << 20)
    send_engines: int = knob(24, "QP schedulers: a QP is served by one at a time", ge=1,
                             le=1024)
    responder_units: int = knob(4, "parallel responder units", ge=1, le=1024)
    bf_size: int = knob(256, "BlueFlame: bytes of a UAR page's WQE-by-MMIO buffer: 0 (none), "
                        "64, 128 or 256; a post of one WR whose WQE fits goes with its doorbell "
                        "by MMIO, no WQE fetch (only inline ones if NSNIC_POST_SEND_PREFER_BF=0)")
    scatter_to_cqe_bytes: int = knob(0, "scatter to CQE (DeviceCaps.cqe_inline): 0 (none), or "
                                     "32: CQEs are 64 bytes and a received SEND of at most 32 "
                                     "bytes on an RC or UC QP with its own RQ is written into "
                                     "its CQE (one PCIe write, no receive buffer translation); "
                                     "the provider copies it into the receive buffer at poll, "
                                     "as mlx5 does (MLX5_INLINE_SCATTER_32)")
    mpt_cache_entries: int = knob(512, "MPT entries the on-NIC translation cache holds", ge=1)
    mtt_cache_entries: int = knob(4096, "MTT entries the on-NIC translation cache holds", ge=1)
    ack_coalesce: int = knob(16, "responder ACKs: one every N packets, and on every packet "
                             "with AckReq", ge=1, le=1024)
    ecn_capable: bool = knob(True, "requests leave with ECT(0) (RFC 3168)")
    odp: bool = knob(True, "on-demand paging: page faults for MRs registered with "
                     "IBV_ACCESS_ON_DEMAND (false: a device without it, DevCap.ODP clear, "
                     "and IBV_ACCESS_ON_DEMAND is EOPNOTSUPP)")
    # Optional command sets (hwif.device_commands): a device without one reports it in
    # QUERY_DEVICE / FEATURES and answers its commands BAD_OPCODE.
    max_eq: int = knob(64, "event queues, DeviceCaps.max_eq (0: none, so completion "
                       "channels and asynchronous events are EOPNOTSUPP); odp needs more than "
                       "1", ge=0, le=64)
    max_srq: int = knob(1 << 16, "SRQ numbers 1..max_srq-1, DeviceCaps.max_srq (0: no SRQs, "
                        "ibv_create_srq is EOPNOTSUPP)", ge=0, le=1 << 24)
    multicast: bool = knob(True, "UD multicast groups, FEATURES MULTICAST (false: "
                           "ibv_attach_mcast is EOPNOTSUPP)")
    # Transports and operations a device may lack (DevCap.NO_*): ERNIC is RC only, no atomics.
    ud: bool = knob(True, "UD QPs (QP1, the CM's, is there either way)")
    uc: bool = knob(True, "UC QPs")
    atomics: bool = knob(True, "atomic operations (compare-and-swap, fetch-and-add), as "
                         "requester and responder")
    roce_v1: bool = knob(True, "RoCE v1 (a GRH on Ethernet, Annex A16) beside v2, FEATURES "
                         "ROCE_V1: the GID table has a v1 entry per address (false: v2 "
                         "entries only, as rxe and FPGA stacks)")
    # Priorities (802.1p, from DSCP >> 3) on which the port honours PFC pauses (none: PFC
    # frames are counted and ignored, and the port needs no event per frame).
    pfc_classes: tuple[int, ...] = ()
    # The storm breaker of those priorities' transmit queues (nicsim.fabric.pfc.PfcWatchdog).
    pfc_watchdog: PfcWatchdog = field(default_factory=PfcWatchdog)
    # Congestion control: reaction point (per-QP rates) and notification point (CNPs).
    cc: CcConfig = field(default_factory=CcConfig)

    def __post_init__(self) -> None:
        check_odp_eqs(self.odp, self.max_eq)
        if self.bf_size not in BF_SIZES:
            raise ValueError(f"bf_size must be 0 (no BlueFlame), 64, 128 or 256, not "
                             f"{self.bf_size}")
        if self.scatter_to_cqe_bytes not in SCATTER_CQE_SIZES:
            raise ValueError(f"scatter_to_cqe_bytes must be 0 (none) or 32, not "
                             f"{self.scatter_to_cqe_bytes}")


BF_SIZES = (0, 64, 128, 256)  # BlueFlame buffer sizes a device may have (hwif.BF_MAX)


def check_odp_eqs(odp: bool, max_eq: int) -> None:
    """ValueError unless the page faults of on-demand paging have their event queue."""
    if odp and max_eq <= ODP_EQN:
        raise ValueError(f"odp needs event queue {ODP_EQN} for its page faults: max_eq "
                         f"{max_eq} must be above {ODP_EQN} (or odp false)")
