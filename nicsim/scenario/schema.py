"""Scenario files: what `nicsim run FILE.yaml` accepts, validated with pydantic.

Every field is documented in docs/how-to/scenarios.md and, generated from these models, in
docs/reference/scenario.md. Unknown fields are errors, types are strict (`bytes: true` or `seed:
"1"` are refused, not coerced), fields that an op does not use are refused when given (an `imm` on a
plain `write`), and every error is one line naming the field, so a typo or a contradiction is caught
rather than silently ignored.

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
    loss: Probability = 0.0
    corrupt: Probability = 0.0
    duplicate: Probability = 0.0
    reorder: Probability = 0.0
    reorder_ns: Annotated[float, Field(ge=0)] = 2000.0


class LinkSpec(ProfileLinkSpec):
    faults: FaultSpec = FaultSpec()


class HostSpec(Strict):
    mem_mib: Annotated[int, Field(ge=0, le=1 << 20, description="0: as the traffic needs")] = 0
    buffer_mib: Annotated[int | None, Field(ge=1, le=4096)] = None


class QpSpec(Strict):
    path_mtu: Annotated[int, Field(description="256, 512, 1024, 2048 or 4096")] = 1024
    max_send_wr: Annotated[int, Field(ge=1, le=32768)] = 128
    max_recv_wr: Annotated[int, Field(ge=1, le=32768)] = 128
    max_send_sge: Annotated[int, Field(ge=1, le=16)] = 4
    max_recv_sge: Annotated[int, Field(ge=1, le=16)] = 4
    max_inline_data: Annotated[int, Field(ge=0, le=256)] = 0
    timeout: Annotated[int, Field(ge=0, le=31, description="4.096 us x 2^timeout")] = 14
    retry_cnt: Annotated[int, Field(ge=0, le=7)] = 7
    rnr_retry: Annotated[int, Field(ge=0, le=7, description="7: retry forever")] = 7
    min_rnr_timer: Annotated[int, Field(ge=0, le=31)] = 12
    max_rd_atomic: Annotated[int, Field(ge=1, le=16)] = 4
    dscp: Annotated[int, Field(ge=0, le=63, description="26: class 3, lossless by default")] = 0

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
    op: Op
    bytes: Annotated[int, Field(ge=0, le=1 << 30)] = 8
    sges: Annotated[int, Field(ge=1, le=16)] = 1
    recv_sges: Annotated[int, Field(ge=1, le=16)] = 1
    local_offset: Annotated[int, Field(ge=0, le=4095)] = 0
    remote_offset: Annotated[int, Field(ge=0, le=4095)] = 0
    repeat: Annotated[int, Field(ge=1, le=100_000_000)] = 1
    imm: Annotated[int, Field(ge=0, le=0xFFFFFFFF)] = 0
    compare: U64 = 0
    swap_add: U64 = 1
    initial: U64 = 0
    signaled: bool = True
    src: HostName | None = None
    dst: HostName | None = None
    qp: Annotated[int, Field(ge=0, le=1023)] = 0

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

    op: Op = OpKind.WRITE
    bytes: Annotated[int, Field(ge=0, le=1 << 30)] = 65536
    depth: Annotated[int, Field(ge=1, le=32768)] = 128
    count: Annotated[int | None, Field(ge=1, le=1_000_000_000)] = None
    duration_us: Annotated[float | None, Field(gt=0)] = None
    signal_every: Annotated[int, Field(ge=1, le=32768)] = 1
    inline: bool = False
    qps: Annotated[int, Field(ge=1, le=1024)] = 1
    src: HostName | None = None
    dst: HostName | None = None
    start_us: Annotated[float, Field(ge=0)] = 0.0

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

    kind: Annotated[PatternKind, Field(strict=False)]
    hosts: Annotated[list[HostName] | None, Field(min_length=2)] = None
    dst: HostName | None = None
    fan_in: Annotated[int | None, Field(ge=1)] = None
    op: Op = OpKind.WRITE
    bytes: Annotated[int, Field(ge=0, le=1 << 30)] = 65536
    rounds: Annotated[int, Field(ge=1, le=10_000_000)] = 1
    every_us: Annotated[float | None, Field(gt=0)] = None
    start_us: Annotated[float, Field(ge=0)] = 0.0

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

    cdf: Annotated[str, Field(min_length=1)] = "websearch"
    load: Annotated[float, Field(gt=0, le=1.0)] = 0.3
    count: Annotated[int | None, Field(ge=1, le=1_000_000_000)] = None
    duration_us: Annotated[float | None, Field(gt=0)] = None
    op: Op = OpKind.WRITE
    hosts: Annotated[list[HostName] | None, Field(min_length=2)] = None
    dst: HostName | None = None
    start_us: Annotated[float, Field(ge=0)] = 0.0
    qps: Annotated[int, Field(ge=1, le=1024)] = 8

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
    kmin_bytes: Annotated[int, Field(ge=0)] = 5_000
    kmax_bytes: Annotated[int, Field(ge=0)] = 200_000
    pmax: Probability = 0.01

    @model_validator(mode="after")
    def _band(self) -> RedSpec:
        if self.kmin_bytes > self.kmax_bytes:
            raise ValueError(f"kmin_bytes: Kmin {self.kmin_bytes} is above Kmax "
                             f"{self.kmax_bytes}")
        return self


class PfcSpec(Strict):
    enabled: bool = True
    classes: list[Annotated[int, Field(ge=0, le=7)]] = [3]
    xoff_bytes: Annotated[int | None, Field(gt=0)] = None
    alpha: Annotated[float, Field(gt=0)] = 0.125
    xon_offset_bytes: Annotated[int | None, Field(ge=0)] = None
    headroom_bytes: Annotated[int | None, Field(ge=0)] = None
    response_ns: Annotated[float, Field(ge=0)] = 0.0
    watchdog: WatchdogSpec = WatchdogSpec()  # of the switch's lossless egress queues


class SwitchSpec(Strict):
    buffer_bytes: Annotated[int, Field(gt=0)] = 12 * 1024 * 1024
    alpha: Annotated[float, Field(gt=0)] = 1.0
    mtu_bytes: Annotated[int, Field(ge=60, le=65535)] = 9216
    fwd_latency_ns: Annotated[float, Field(ge=0)] = 500.0
    classify: Literal["dscp", "pcp"] = "dscp"
    scheduler: Literal["strict", "dwrr"] = "strict"
    dwrr_weights: Annotated[list[Annotated[float, Field(gt=0)]],
                            Field(min_length=8, max_length=8)] = [1.0] * 8
    red: RedSpec | None = RedSpec()  # the ECN band of every class (null: no marking)
    pfc: PfcSpec = PfcSpec()


class TopologySpec(Strict):
    shape: Literal["back_to_back", "star", "leaf_spine", "fat_tree"] = "back_to_back"
    hosts: Annotated[int, Field(ge=2, le=4096)] = 2
    leaves: Annotated[int, Field(ge=1, le=1024)] = 2
    spines: Annotated[int, Field(ge=1, le=1024)] = 2
    hosts_per_leaf: Annotated[int, Field(ge=1, le=1024)] = 2
    k: Annotated[int, Field(ge=2, le=48)] = 4
    fabric_link: LinkSpec | None = None  # switch to switch (default: as `link`)
    link_faults: dict[str, FaultSpec] = {}  # by link name ("h3-sw0"): instead of link.faults
    taps: list[str] | None = None  # ports with a pcap tap (default: every host port)


class PfcStormSpec(Strict):
    """A fault: `host`'s NIC keeps sending PFC pauses for `priorities` (a stuck receive path,
    or a host that means harm), each refreshing the last before it runs out, from `start_us`
    until `stop_us` (none: to the end of the run)."""

    host: HostName
    priorities: Annotated[list[Annotated[int, Field(ge=0, le=7)]], Field(min_length=1)] = [3]
    start_us: Annotated[float, Field(ge=0)] = 0.0
    stop_us: Annotated[float | None, Field(gt=0)] = None

    @model_validator(mode="after")
    def _order(self) -> PfcStormSpec:
        if self.stop_us is not None and self.stop_us <= self.start_us:
            raise ValueError(f"stop_us: {self.stop_us} is not after start_us {self.start_us}")
        return self


class StopSpec(Strict):
    time_limit_us: Annotated[float | None, Field(gt=0)] = None
    stall_us: Annotated[float | None, Field(gt=0)] = None


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class Scenario(Strict):
    name: str = "scenario"
    seed: Annotated[int, Field(ge=0, le=(1 << 63) - 1)] = 1
    depth: Annotated[int, Field(ge=1, le=32768, description="WRs of `ops` outstanding")] = 1
    link: LinkSpec = LinkSpec()
    topology: TopologySpec = TopologySpec()
    switch: SwitchSpec = SwitchSpec()
    cc: str | dict[str, Any] | None = None
    profile: str | None = None  # a NIC profile (nicsim.profiles): name or path
    pcie: PcieSpec = PcieSpec()
    nic: NicSpec = NicSpec()
    cpu: CpuSpec = CpuSpec()
    host: HostSpec = HostSpec()
    qp: QpSpec = QpSpec()
    qps_per_pair: Annotated[int, Field(ge=1, le=1024)] = 1
    pcap: str | None = "traces/{name}.pcap"
    stop: StopSpec = StopSpec()
    sample_us: Annotated[float, Field(gt=0)] = 10.0
    ops: list[OpSpec] = []
    streams: list[StreamSpec] = []
    patterns: list[PatternSpec] = []
    flows: list[FlowsSpec] = []
    pfc_storms: list[PfcStormSpec] = []

    @model_validator(mode="before")
    @classmethod
    def _profile(cls, data: Any) -> Any:
        """A profile's sections go under the scenario's: what the scenario sets wins."""
        if not isinstance(data, dict) or data.get("profile") is None:
            return data
        ref = data["profile"]
        if not isinstance(ref, str):
            raise ValueError("profile: a profile name or a path to a profile file")
        from nicsim.profiles import ProfileError, load_profile

        try:
            prof = load_profile(ref)
        except ProfileError as e:
            raise ValueError(f"profile: {e}") from None
        out = dict(data)
        for section, values in prof.sections.items():
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
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(f"{source}: {one_line(e)}") from None


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
