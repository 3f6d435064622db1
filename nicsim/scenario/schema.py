"""Scenario files: what `nicsim run FILE.yaml` accepts, validated with pydantic.

Every field's description here is its documentation: docs/reference/scenario.md is generated
from these models (scripts/docs_reference.py). Unknown fields are errors, types are strict
(`bytes: true` or `seed: "1"` are refused, not coerced), fields that an op does not use are
refused when given (an `imm` on a plain `write`), and every error is one line naming the
field, so a typo or a contradiction is caught rather than silently ignored.

Traffic names hosts. Until topologies are in, a world has hosts `a` and `b`; a host name is
checked against the world's hosts when the run is planned (nicsim.scenario.plan), so the
schema does not fix them.
"""

from __future__ import annotations

import re
import string
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from nicsim.nic.cc import cc_from_dict
from nicsim.nic.cc.config import CcConfigError
from nicsim.profiles.sections import (
    CpuSpec,
    NicSpec,
    PcieSpec,
    ProfileLinkSpec,
    Strict,
    WatchdogSpec,
)


class OpKind(StrEnum):
    WRITE = "write"
    WRITE_IMM = "write_imm"
    READ = "read"
    SEND = "send"
    SEND_IMM = "send_imm"
    CMP_SWAP = "cmp_swap"
    FETCH_ADD = "fetch_add"


ATOMICS = (OpKind.CMP_SWAP, OpKind.FETCH_ADD)
SENDS = (OpKind.SEND, OpKind.SEND_IMM)
WITH_IMM = (OpKind.WRITE_IMM, OpKind.SEND_IMM)

# Enums are named by their value in a file: strict mode would want the Python object.
Op = Annotated[OpKind, Field(strict=False)]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]
U64 = Annotated[int, Field(ge=0, le=(1 << 64) - 1)]
HostName = Annotated[str, Field(min_length=1, max_length=64)]


class FaultSpec(Strict):
    """Faults of a link: per-frame probabilities, each direction, drawn from `seed`."""

    loss: Probability = Field(0.0, description="a frame is lost")
    corrupt: Probability = Field(0.0, description="a frame has one random bit flipped")
    duplicate: Probability = Field(0.0, description="a frame arrives twice")
    reorder: Probability = Field(0.0, description="a frame is held back, so later ones pass "
                                 "it")
    reorder_ns: Annotated[float, Field(ge=0, description=(
        "a reordered (or duplicated) frame is held back by up to this, ns"))] = 2000.0


class LinkSpec(ProfileLinkSpec):
    """Every host's link: the one cable of two hosts, or each host's cable to its switch."""

    faults: FaultSpec = Field(FaultSpec(), description="its faults (in a fabric: on every "
                              "link, switch to switch too)")


class HostSpec(Strict):
    """Each host: the machine (a host profile) and its memory."""

    profile: str | None = Field(None, description=(
        "a host profile, by name or path (nicsim profiles --hosts lists them): its pcie and "
        "cpu fields go over the NIC profile's, and the scenario's own pcie and cpu fields "
        "over both (none: the host the NIC profile was fitted on)"))

    mem_mib: Annotated[int, Field(ge=0, le=1 << 20, description=(
        "simulated memory per host, MiB (0: what the traffic needs, rounded up to a power of "
        "two, at least 64)"))] = 0
    buffer_mib: Annotated[int | None, Field(ge=1, le=4096, description=(
        "memory each host registers for WR buffers, MiB (none: as the traffic needs; flows: "
        "64 MiB + 4 x the largest flow, per flows entry)"))] = None


class QpSpec(Strict):
    """The attributes of every QP the traffic uses (RC)."""

    path_mtu: Annotated[int, Field(description=(
        "path MTU, bytes: 256, 512, 1024, 2048 or 4096"))] = 1024
    max_send_wr: Annotated[int, Field(ge=1, le=32768, description="send queue size, "
                                      "WRs")] = 128
    max_recv_wr: Annotated[int, Field(ge=1, le=32768, description="receive queue size, "
                                      "WRs")] = 128
    max_send_sge: Annotated[int, Field(ge=1, le=16, description="SGEs per send WQE")] = 4
    max_recv_sge: Annotated[int, Field(ge=1, le=16, description="SGEs per receive WQE")] = 4
    max_inline_data: Annotated[int, Field(ge=0, le=256, description="inline data limit, "
                                          "bytes")] = 0
    timeout: Annotated[int, Field(ge=0, le=31, description=(
        "transport timer: 4.096 us x 2^timeout (0: none)"))] = 14
    retry_cnt: Annotated[int, Field(ge=0, le=7, description="retries after a timeout or "
                                    "NAK")] = 7
    rnr_retry: Annotated[int, Field(ge=0, le=7, description="RNR retries (7: "
                                    "forever)")] = 7
    min_rnr_timer: Annotated[int, Field(ge=0, le=31, description=(
        "the RNR timer code the responder sends (IBA table 45)"))] = 12
    max_rd_atomic: Annotated[int, Field(ge=1, le=16, description=(
        "READs and atomics outstanding, each way"))] = 4
    dscp: Annotated[int, Field(ge=0, le=63, description=(
        "the QPs' DSCP (GRH traffic class >> 2); a switch's class is DSCP >> 3, so 26 is "
        "class 3, lossless by default"))] = 0

    @model_validator(mode="after")
    def _mtu(self) -> QpSpec:
        if self.path_mtu not in (256, 512, 1024, 2048, 4096):
            raise ValueError(f"path_mtu must be 256, 512, 1024, 2048 or 4096, not "
                             f"{self.path_mtu}")
        return self


def _refuse_unused(model: BaseModel, op: OpKind, rules: dict[str, tuple[OpKind, ...]]) -> None:
    """A field given for an op that does not use it is a contradiction, not a no-op."""
    for fld, ops in rules.items():
        if fld in model.model_fields_set and op not in ops:
            names = ", ".join(o.value for o in ops)
            raise ValueError(f"{fld}: {op.value} does not use it (only {names})")


class OpSpec(Strict):
    """An explicit work request. The `ops` run in order, `depth` of them outstanding."""

    op: Op = Field(description="the operation")
    bytes: Annotated[int, Field(ge=0, le=1 << 30, description=(
        "message length (atomics: exactly 8)"))] = 8
    sges: Annotated[int, Field(ge=1, le=16, description=(
        "the local buffer split into this many SGEs (at most qp.max_send_sge)"))] = 1
    recv_sges: Annotated[int, Field(ge=1, le=16, description=(
        "SENDs only: the receive buffer split into this many SGEs (at most "
        "qp.max_recv_sge)"))] = 1
    local_offset: Annotated[int, Field(ge=0, le=4095, description=(
        "misalignment of the local buffer within its page, bytes"))] = 0
    remote_offset: Annotated[int, Field(ge=0, le=4095, description=(
        "misalignment of the remote buffer within its page, bytes (atomics: 8-aligned)"))] = 0
    repeat: Annotated[int, Field(ge=1, le=100_000_000, description=(
        "run this op N times, each on fresh buffers"))] = 1
    imm: Annotated[int, Field(ge=0, le=0xFFFFFFFF, description=(
        "write_imm and send_imm only: the immediate data"))] = 0
    compare: U64 = Field(0, description="cmp_swap only: the compare value")
    swap_add: U64 = Field(1, description="atomics: the swap (cmp_swap) or add (fetch_add) "
                          "value")
    initial: U64 = Field(0, description="atomics: the remote value before the op")
    signaled: bool = Field(True, description="request a completion")
    src: HostName | None = Field(None, description="the requester (none: the first host)")
    dst: HostName | None = Field(None, description="the responder (none: the second host)")
    qp: Annotated[int, Field(ge=0, le=1023, description=(
        "which QP of the pair's pool (the pool grows to have it)"))] = 0

    @model_validator(mode="after")
    def _consistent(self) -> OpSpec:
        _refuse_unused(self, self.op, {
            "imm": WITH_IMM, "compare": (OpKind.CMP_SWAP,), "swap_add": ATOMICS,
            "initial": ATOMICS, "recv_sges": SENDS})
        if self.op in ATOMICS:
            if self.bytes != 8:
                raise ValueError("atomics operate on exactly 8 bytes (bytes: 8)")
            if self.remote_offset % 8:
                raise ValueError("atomics need an 8-byte aligned remote_offset")
            if self.sges != 1:
                raise ValueError("atomics take one SGE")
        if self.op in SENDS and self.bytes == 0 and self.recv_sges > 1:
            raise ValueError("a zero-length SEND needs recv_sges: 1")
        _distinct(self.src, self.dst)
        return self


def _distinct(src: str | None, dst: str | None) -> None:
    if src is not None and src == dst:
        raise ValueError(f"src and dst are both {src!r}: a host does not send to itself")


class StreamSpec(Strict):
    """perftest-like: `qps` QPs, each with `depth` WRs outstanding, `count` WRs each or for
    `duration_us`; a completion every `signal_every` WRs (and always on the last)."""

    op: Op = Field(OpKind.WRITE, description="the operation (atomics: bytes 8)")
    bytes: Annotated[int, Field(ge=0, le=1 << 30, description="message size")] = 65536
    depth: Annotated[int, Field(ge=1, le=32768, description=(
        "WRs outstanding per QP (-t), at most qp.max_send_wr"))] = 128
    count: Annotated[int | None, Field(ge=1, le=1_000_000_000, description=(
        "WRs per QP (-n); give count or duration_us"))] = None
    duration_us: Annotated[float | None, Field(gt=0, description=(
        "post for this long (-D), then one last, signaled WR, us; give count or "
        "duration_us"))] = None
    signal_every: Annotated[int, Field(ge=1, le=32768, description=(
        "a completion every N WRs (--cq-mod), and always on the last; at most depth"))] = 1
    inline: bool = Field(False, description="post inline (-I; needs qp.max_inline_data >= "
                         "bytes)")
    qps: Annotated[int, Field(ge=1, le=1024, description="QPs, each its own loop "
                              "(-q)")] = 1
    src: HostName | None = Field(None, description="the requester (none: the first host)")
    dst: HostName | None = Field(None, description="the responder (none: the second host)")
    start_us: Annotated[float, Field(ge=0, description=(
        "when it starts, us from the start of the traffic"))] = 0.0

    @model_validator(mode="after")
    def _consistent(self) -> StreamSpec:
        if self.count is not None and self.duration_us is not None:
            raise ValueError("count and duration_us: give one")
        if self.count is None and self.duration_us is None:
            raise ValueError("a stream needs count or duration_us")
        if self.op in ATOMICS and self.bytes != 8:
            raise ValueError("atomics operate on exactly 8 bytes (bytes: 8)")
        if self.inline and self.op not in (OpKind.WRITE, OpKind.WRITE_IMM, *SENDS):
            raise ValueError(f"inline: {self.op.value} carries no inline data")
        if self.signal_every > self.depth:
            raise ValueError(f"signal_every: {self.signal_every} > depth {self.depth} (the "
                             f"window would never free)")
        _distinct(self.src, self.dst)
        return self


class PatternKind(StrEnum):
    INCAST = "incast"
    PERMUTATION = "permutation"
    ALL_TO_ALL = "all_to_all"


class PatternSpec(Strict):
    """Rounds of messages between hosts: incast (fan_in senders to dst), a random permutation
    (each host sends to one other and receives from one), or all-to-all."""

    kind: Annotated[PatternKind, Field(strict=False, description=(
        "incast: fan_in senders to dst; permutation: a random derangement each round (every "
        "host sends to one and receives from one); all_to_all: every host to every other"))]
    hosts: Annotated[list[HostName] | None, Field(min_length=2, description=(
        "the hosts taking part (none: all)"))] = None
    dst: HostName | None = Field(None, description="incast only: the receiver (none: the "
                                 "first of hosts)")
    fan_in: Annotated[int | None, Field(ge=1, description=(
        "incast only: senders per round, drawn at random each round (none: all the "
        "others)"))] = None
    op: Op = Field(OpKind.WRITE, description="write or send")
    bytes: Annotated[int, Field(ge=0, le=1 << 30, description="per message")] = 65536
    rounds: Annotated[int, Field(ge=1, le=10_000_000, description="how many rounds")] = 1
    every_us: Annotated[float | None, Field(gt=0, description=(
        "a round every this long, us (none: each round starts when the previous one is "
        "done)"))] = None
    start_us: Annotated[float, Field(ge=0, description=(
        "when the first round starts, us from the start of the traffic"))] = 0.0

    @model_validator(mode="after")
    def _consistent(self) -> PatternSpec:
        if self.op not in (OpKind.WRITE, OpKind.SEND):
            raise ValueError("op: a pattern's messages are write or send")
        if self.kind is not PatternKind.INCAST:
            for fld in ("dst", "fan_in"):
                if fld in self.model_fields_set:
                    raise ValueError(f"{fld}: only an incast has one")
        if self.hosts is not None and len(set(self.hosts)) != len(self.hosts):
            raise ValueError("hosts: a host is listed twice")
        return self


class FlowsSpec(Strict):
    """Open-loop flows: sizes from a CDF, Poisson arrivals at `load` of each sending host's
    link rate, random source and destination (or all to `dst`); each flow one message."""

    cdf: Annotated[str, Field(min_length=1, description=(
        "flow sizes: websearch (DCTCP's web search), fb_hadoop (Facebook's Hadoop cluster), "
        "or a CDF file (a relative path is from the scenario's directory)"))] = "websearch"
    load: Annotated[float, Field(gt=0, le=1.0, description=(
        "each sender offers this fraction of its link rate, in payload"))] = 0.3
    count: Annotated[int | None, Field(ge=1, le=1_000_000_000, description=(
        "flows in all; give count or duration_us"))] = None
    duration_us: Annotated[float | None, Field(gt=0, description=(
        "the flows arriving within this long, us; give count or duration_us"))] = None
    op: Op = Field(OpKind.WRITE, description="each flow is one write or send")
    hosts: Annotated[list[HostName] | None, Field(min_length=2, description=(
        "senders and receivers: random pairs of distinct hosts (none: all)"))] = None
    dst: HostName | None = Field(None, description="every flow to this host, from the "
                                 "others (none: random receivers)")
    start_us: Annotated[float, Field(ge=0, description=(
        "when arrivals start, us from the start of the traffic"))] = 0.0
    qps: Annotated[int, Field(ge=1, le=1024, description=(
        "QPs for flows in each pair's pool; a flow takes the least loaded"))] = 8
    qp_per_flow: bool = Field(False, description=(
        "each flow on a QP of its own that nothing else uses, all connected before the "
        "traffic starts (HPCC's ns-3 model); false: each pair's pool of `qps`, a flow on the "
        "least loaded, where a small flow may wait behind a large one"))

    @model_validator(mode="after")
    def _consistent(self) -> FlowsSpec:
        if self.count is not None and self.duration_us is not None:
            raise ValueError("count and duration_us: give one")
        if self.count is None and self.duration_us is None:
            raise ValueError("flows need count or duration_us")
        if self.op not in (OpKind.WRITE, OpKind.SEND):
            raise ValueError("op: a flow is one write or send")
        if self.hosts is not None and len(set(self.hosts)) != len(self.hosts):
            raise ValueError("hosts: a host is listed twice")
        return self


class RedSpec(Strict):
    """ECN marking (RED/WRED, the DCQCN paper's values) on the egress queue an arriving ECT
    frame joins: none below Kmin, probability rising linearly to Pmax at Kmax, every frame at
    or above Kmax."""

    kmin_bytes: Annotated[int, Field(ge=0, description="Kmin: queue depth, bytes")] = 5_000
    kmax_bytes: Annotated[int, Field(ge=0, description="Kmax: queue depth, bytes")] = 200_000
    pmax: Probability = Field(0.01, description="Pmax: the marking probability at Kmax")

    @model_validator(mode="after")
    def _band(self) -> RedSpec:
        if self.kmin_bytes > self.kmax_bytes:
            raise ValueError(f"kmin_bytes: Kmin {self.kmin_bytes} is above Kmax "
                             f"{self.kmax_bytes}")
        return self


class PfcSpec(Strict):
    """Priority flow control (IEEE 802.1Qbb) of the switches' lossless classes."""

    enabled: bool = Field(True, description="PFC for the lossless classes (false: every class "
                          "is lossy)")
    classes: list[Annotated[int, Field(ge=0, le=7)]] = Field(
        [3], description="the lossless classes (priorities)")
    xoff_bytes: Annotated[int | None, Field(gt=0, description=(
        "XOFF when a port's class holds this many bytes (none: dynamic, alpha x the free "
        "shared buffer)"))] = None
    alpha: Annotated[float, Field(gt=0, description=(
        "the dynamic XOFF threshold's alpha"))] = 0.125
    xon_offset_bytes: Annotated[int | None, Field(ge=0, description=(
        "XON this far below XOFF, and once the headroom is empty, bytes (none: 2 x "
        "mtu_bytes)"))] = None
    headroom_bytes: Annotated[int | None, Field(ge=0, description=(
        "reserved per port and lossless class, bytes (none: computed; if given, at least the "
        "computed figure)"))] = None
    response_ns: Annotated[float, Field(ge=0, description=(
        "the sender's reaction time beyond finishing its frame, added to the headroom, "
        "ns"))] = 0.0
    watchdog: WatchdogSpec = Field(WatchdogSpec(), description=(
        "the PFC watchdog of the switch's lossless egress queues (a stormed queue's frames "
        "are dropped)"))


class SwitchSpec(Strict):
    """Every switch of a world (a fabric's): output-queued, store-and-forward, 8 traffic
    classes per port."""

    buffer_bytes: Annotated[int, Field(gt=0, description=(
        "shared packet buffer, bytes (12 MiB: about a Broadcom Trident II, the DCQCN paper's "
        "switch)"))] = 12 * 1024 * 1024
    alpha: Annotated[float, Field(gt=0, description=(
        "dynamic threshold of a lossy queue: at most alpha x the free shared buffer "
        "(Choudhury and Hahne)"))] = 1.0
    mtu_bytes: Annotated[int, Field(ge=60, le=65535, description=(
        "largest frame (without FCS, tags included), bytes; longer ones are dropped"))] = 9216
    fwd_latency_ns: Annotated[float, Field(ge=0, description=(
        "a frame's last bit in to its being eligible to leave, ns"))] = 500.0
    classify: Literal["dscp", "pcp"] = Field("dscp", description=(
        "a frame's class: DSCP >> 3 (dscp), or the VLAN PCP (pcp)"))
    scheduler: Literal["strict", "dwrr"] = Field("strict", description=(
        "between an egress port's classes: strict priority (class 7 first), or dwrr with "
        "dwrr_weights"))
    dwrr_weights: Annotated[list[Annotated[float, Field(gt=0)]],
                            Field(min_length=8, max_length=8, description=(
                                "dwrr: the weights of classes 0..7"))] = [1.0] * 8
    red: RedSpec | None = Field(RedSpec(), description="the ECN marking of every class "
                                "(none: no marking)")
    pfc: PfcSpec = Field(PfcSpec(), description="priority flow control")
    int_telemetry: bool | None = Field(None, description=(
        "in-band telemetry for HPCC: every RoCEv2 frame a switch sends gets a record of the "
        "egress port (queue, bytes sent, time, rate) after its IP datagram (null: on when "
        "the cc algorithm uses INT)"))


class TopologySpec(Strict):
    """The network: hosts `a` and `b` on one cable, or hosts `h0`, `h1`, ... on switches."""

    shape: Literal["back_to_back", "star", "leaf_spine", "fat_tree"] = Field(
        "back_to_back", description=(
            "back_to_back: hosts a, b on one cable; star: hosts h0..h{n-1} on switch sw0; "
            "leaf_spine: leaves leaf0.. of hosts_per_leaf hosts, every leaf cabled to every "
            "spine spine0..; fat_tree: the k-ary fat tree of Al-Fares et al."))
    hosts: Annotated[int, Field(ge=2, le=4096, description="star: hosts")] = 2
    leaves: Annotated[int, Field(ge=1, le=1024, description="leaf_spine: leaf "
                                 "switches")] = 2
    spines: Annotated[int, Field(ge=1, le=1024, description="leaf_spine: spine "
                                 "switches")] = 2
    hosts_per_leaf: Annotated[int, Field(ge=1, le=1024, description="leaf_spine: hosts on "
                                         "each leaf")] = 2
    k: Annotated[int, Field(ge=2, le=48, description=(
        "fat_tree: even; k pods of k/2 edge (edge{p}_{i}) and k/2 aggregation (agg{p}_{i}) "
        "switches, (k/2)^2 cores, k^3/4 hosts"))] = 4
    fabric_link: LinkSpec | None = Field(None, description=(
        "the switch-to-switch links' rate and delay (none: as link; their faults come from "
        "link.faults and link_faults)"))
    link_faults: dict[str, FaultSpec] = Field({}, description=(
        "faults of single links by name, instead of link.faults: the two ends in the order "
        "the shape cables them (h3-sw0, leaf0-spine1)"))
    taps: list[str] | None = Field(None, description=(
        "the ports with a pcap tap: h0.eth0 for a host, sw0.p3 for port 3 of a switch, "
        "numbered in cabling order (none: every host port)"))


class PfcStormSpec(Strict):
    """A fault: `host`'s NIC keeps sending PFC pauses for `priorities` (a stuck receive path,
    or a host that means harm), each refreshing the last before it runs out, from `start_us`
    until `stop_us` (none: to the end of the run)."""

    host: HostName = Field(description="the host whose NIC sends the pauses")
    priorities: Annotated[list[Annotated[int, Field(ge=0, le=7)]], Field(
        min_length=1, description="the priorities it pauses")] = [3]
    start_us: Annotated[float, Field(ge=0, description=(
        "when it starts, us from the start of the traffic"))] = 0.0
    stop_us: Annotated[float | None, Field(gt=0, description=(
        "when it stops, us from the start of the traffic (none: at the end of the "
        "run)"))] = None

    @model_validator(mode="after")
    def _order(self) -> PfcStormSpec:
        if self.stop_us is not None and self.stop_us <= self.start_us:
            raise ValueError(f"stop_us: {self.stop_us} is not after start_us {self.start_us}")
        return self


class StopSpec(Strict):
    """When a run stops before its traffic is done."""

    time_limit_us: Annotated[float | None, Field(gt=0, description=(
        "stop after this much simulated time, us; WRs still outstanding are reported (none: "
        "no limit)"))] = None
    stall_us: Annotated[float | None, Field(gt=0, description=(
        "stop when nothing progresses this long while work is outstanding, us (none: 2 x "
        "(qp.retry_cnt + 1) transport timeouts, at least 1 ms; 1 s if qp.timeout is "
        "0)"))] = None


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class Scenario(Strict):
    """A scenario: the world's parameters and its traffic (`ops`, `streams`, `patterns`,
    `flows`: at least one entry in all)."""

    name: str = Field("scenario", description=(
        "names the run and its files: letters, digits, '.', '_' and '-', starting with a "
        "letter or digit, at most 100"))
    seed: Annotated[int, Field(ge=0, le=(1 << 63) - 1, description=(
        "seeds payload data, flow arrivals and sizes, patterns and link faults"))] = 1
    depth: Annotated[int, Field(ge=1, le=32768, description=(
        "WRs of ops kept outstanding (at most qp.max_send_wr)"))] = 1
    link: LinkSpec = Field(LinkSpec(), description="every host's link")
    topology: TopologySpec = Field(TopologySpec(), description="the network of hosts and "
                                   "switches")
    switch: SwitchSpec = Field(SwitchSpec(), description="every switch's settings")
    cc: str | dict[str, Any] | None = Field(None, description=(
        "congestion control in every NIC: a preset or algorithm (none, dcqcn_paper, "
        "dcqcn_mlx, dcqcn_tuned, hpcc, timely, dctcp), or a mapping: {algorithm: hpcc, eta: "
        "0.9}, {preset: dcqcn_mlx, rai_mbps: 100, cnp: {interval_us: 50}} (preset dcqcn_mlx "
        "if none is given), or a Python file of your own, {module: ./my_cc.py, <its "
        "parameters>} (relative to the scenario's directory; docs/how-to/add-cc.md); none: "
        "no rate limits, CNPs counted and ignored"))
    profile: str | None = Field(None, description=(
        "a NIC profile, by name or path: its link, pcie, nic and cpu fields go under the "
        "scenario's own (none: the model's defaults, as nsnic-100g)"))
    pcie: PcieSpec = Field(PcieSpec(), description="the PCIe link between each host and its "
                           "NIC")
    nic: NicSpec = Field(NicSpec(), description="every NIC")
    cpu: CpuSpec = Field(CpuSpec(), description="the hosts' CPU costs")
    host: HostSpec = Field(HostSpec(), description="the hosts' memory")
    qp: QpSpec = Field(QpSpec(), description="every QP of the traffic")
    qps_per_pair: Annotated[int, Field(ge=1, le=1024, description=(
        "QPs in each host pair's pool, at least (a stream or flows entry may ask for "
        "more)"))] = 1
    pcap: str | None = Field("traces/{name}.pcap", description=(
        "capture of the link (null: none); {name} is the only placeholder; in a fabric, "
        "one file per tapped port, the port's name before the extension"))
    stop: StopSpec = Field(StopSpec(), description="when a run stops early")
    sample_us: Annotated[float, Field(gt=0, description=(
        "time-series sampling interval, simulated us (with --out)"))] = 10.0
    ops: list[OpSpec] = Field([], description="explicit work requests, in order")
    streams: list[StreamSpec] = Field([], description="perftest-like loops")
    patterns: list[PatternSpec] = Field([], description="rounds of messages between hosts")
    flows: list[FlowsSpec] = Field([], description="open-loop flows: sizes from a CDF, Poisson "
                                   "arrivals")
    pfc_storms: list[PfcStormSpec] = Field([], description="NICs that keep pausing their "
                                           "link (a fault)")

    @model_validator(mode="before")
    @classmethod
    def _profile(cls, data: Any) -> Any:
        """A profile's sections go under the scenario's, the host profile's over the NIC
        profile's: what the scenario sets wins."""
        if not isinstance(data, dict):
            return data
        ref = data.get("profile")
        host = data.get("host")
        host_ref = host.get("profile") if isinstance(host, dict) else None
        if ref is None and host_ref is None:
            return data
        from nicsim.profiles import ProfileError, load_host_profile, load_profile, with_host

        sections: dict[str, dict[str, Any]] = {}
        for where, r in (("profile", ref), ("host.profile", host_ref)):
            if r is not None and not isinstance(r, str):
                raise ValueError(f"{where}: a profile name or a path to a profile file")
        try:
            if ref is not None:
                sections = load_profile(ref).sections
        except ProfileError as e:
            raise ValueError(f"profile: {e}") from None
        try:
            if host_ref is not None:
                sections = with_host(sections, load_host_profile(host_ref))
        except ProfileError as e:
            raise ValueError(f"host.profile: {e}") from None
        out = dict(data)
        for section, values in sections.items():
            mine = out.get(section)
            out[section] = {**values, **mine} if isinstance(mine, dict) else \
                (dict(values) if mine is None else mine)
        return out

    @model_validator(mode="after")
    def _fits(self) -> Scenario:
        if not NAME.fullmatch(self.name):
            raise ValueError("name: letters, digits, '.', '_' and '-', starting with a letter "
                             "or digit, at most 100 (it names files)")
        if self.pcap is not None:
            try:
                fields = {f for _, f, _, _ in string.Formatter().parse(self.pcap) if f is not None}
            except ValueError as e:
                raise ValueError(f"pcap: {e}") from None
            if fields - {"name"}:
                raise ValueError(f"pcap: unknown placeholder {{{sorted(fields - {'name'})[0]}}}"
                                 " (only {name})")
        if self.cc is not None:
            try:
                cc_from_dict(self.cc)
            except CcConfigError as e:
                raise ValueError(str(e)) from None
        if not (self.ops or self.streams or self.patterns or self.flows):
            raise ValueError("no traffic: give ops, streams, patterns or flows")
        q = self.qp
        for i, o in enumerate(self.ops):
            if o.sges > q.max_send_sge:
                raise ValueError(f"ops[{i}].sges: {o.sges} > qp.max_send_sge {q.max_send_sge}")
            if o.recv_sges > q.max_recv_sge:
                raise ValueError(f"ops[{i}].recv_sges: {o.recv_sges} > qp.max_recv_sge "
                                 f"{q.max_recv_sge}")
        if self.ops and self.depth > q.max_send_wr:
            raise ValueError(f"depth: {self.depth} > qp.max_send_wr {q.max_send_wr}")
        run = 0
        for i, o in enumerate(self.ops):
            run = 0 if o.signaled else run + o.repeat
            if run > self.depth or run == self.depth and i < len(self.ops) - 1:
                raise ValueError(f"ops[{i}].signaled: {run} unsignaled WRs in a row fill the "
                                 f"window (depth {self.depth}) and nothing would complete "
                                 f"them: at most {self.depth - 1} in a row, or a larger depth")
        for i, s in enumerate(self.streams):
            if s.depth > q.max_send_wr:
                raise ValueError(f"streams[{i}].depth: {s.depth} > qp.max_send_wr "
                                 f"{q.max_send_wr}")
            if s.inline and s.bytes > q.max_inline_data:
                raise ValueError(f"streams[{i}].inline: {s.bytes} bytes > qp.max_inline_data "
                                 f"{q.max_inline_data}")
        return self

    def pcap_path(self) -> str | None:
        """The pcap template with the name filled in (the name is a plain file name, so
        `{name}` never leads out of the template's directory)."""
        return self.pcap.format(name=self.name) if self.pcap else None


class ScenarioError(Exception):
    """A scenario that cannot be used; the message is one line naming the field."""


_FIELD_MSG = re.compile(r"[a-z_][a-z0-9_]*(\[\d+\])?(\.[a-z_][a-z0-9_]*(\[\d+\])?)*: ")


def one_line(e: ValidationError) -> str:
    """The first error of a validation, as one line for the user: the field, then why."""
    err = e.errors()[0]
    loc = ".".join(str(x) if not isinstance(x, int) else f"[{x}]" for x in err["loc"])
    loc = loc.replace(".[", "[")
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] in ("enum", "literal_error"):
        msg = f"{msg}, not {err['input']!r}"
    more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
    # A model's own check names the field it is about ("imm: ..."): put it after the model's
    # location, so the line names the field in full ("ops[0].imm: ...").
    if _FIELD_MSG.match(msg):
        return f"{loc}.{msg}{more}" if loc else f"{msg}{more}"
    return f"{loc or 'scenario'}: {msg}{more}"


def validate(data: Any, source: str = "<scenario>") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a mapping (name, ops, flows, ...)")
    data = _cc_module_path(data, source)
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(f"{source}: {one_line(e)}") from None


def _cc_module_path(data: dict[str, Any], source: str) -> dict[str, Any]:
    """A relative `cc.module` is from the scenario file's directory: made absolute here,
    where the file is known (a scenario that is not a file: the working directory)."""
    cc = data.get("cc")
    if not isinstance(cc, dict) or not isinstance(cc.get("module"), str):
        return data
    mod = Path(cc["module"]).expanduser()
    src = Path(source)
    if mod.is_absolute() or source.startswith("<") or not src.is_file():
        return data
    return {**data, "cc": {**cc, "module": str(src.resolve().parent / mod)}}


def load_data(text: str, source: str = "<scenario>") -> dict[str, Any]:
    """The YAML mapping of a scenario, before validation (overrides apply to it)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ScenarioError(f"{source}:{where} not valid YAML: "
                            f"{getattr(e, 'problem', None) or e}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a mapping (name, ops, flows, ...)")
    return data


def read_text(path: str | Path) -> str:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except IsADirectoryError:
        raise ScenarioError(f"{path}: is a directory, not a scenario file") from None
    except OSError as e:
        raise ScenarioError(f"{path}: {e.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{path}: not a text file (byte {e.start} is not UTF-8); a "
                            f"scenario is YAML") from None


def parse_scenario(text: str, source: str = "<scenario>") -> Scenario:
    return validate(load_data(text, source), source)


def load_scenario(path: str | Path) -> Scenario:
    return parse_scenario(read_text(path), str(path))


DEFAULT = Path(__file__).with_name("default.yaml")
