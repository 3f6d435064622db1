"""Scenario files: what `nicsim run FILE.yaml` accepts, validated with pydantic.

Every field is documented in README.md ("Scenario files"); unknown fields are errors, so a
typo is caught rather than silently ignored.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OpKind(StrEnum):
    WRITE = "write"
    WRITE_IMM = "write_imm"
    READ = "read"
    SEND = "send"
    SEND_IMM = "send_imm"
    CMP_SWAP = "cmp_swap"
    FETCH_ADD = "fetch_add"


Probability = Annotated[float, Field(ge=0.0, le=1.0)]


class FaultSpec(Strict):
    loss: Probability = 0.0
    corrupt: Probability = 0.0
    duplicate: Probability = 0.0
    reorder: Probability = 0.0
    reorder_ns: Annotated[float, Field(ge=0)] = 2000.0


class LinkSpec(Strict):
    rate_gbps: Annotated[float, Field(gt=0, le=1600)] = 100.0
    prop_ns: Annotated[float, Field(ge=0)] = 50.0
    faults: FaultSpec = FaultSpec()


class PcieSpec(Strict):
    gen: Annotated[int, Field(ge=1, le=5)] = 3
    lanes: Annotated[int, Field(ge=1, le=32)] = 16
    mps: Annotated[int, Field(ge=128, le=4096)] = 256
    mrrs: Annotated[int, Field(ge=128, le=4096)] = 512
    latency_ns: Annotated[float, Field(ge=0)] = 200.0


class NicSpec(Strict):
    tx_readahead: Annotated[int, Field(ge=1, le=256)] = 32
    ack_coalesce: Annotated[int, Field(ge=1, le=1024)] = 16
    mpt_cache_entries: Annotated[int, Field(ge=1)] = 512
    mtt_cache_entries: Annotated[int, Field(ge=1)] = 4096
    max_wqe_prefetch: Annotated[int, Field(ge=1, le=64)] = 8


class HostSpec(Strict):
    mem_mib: Annotated[int, Field(ge=0, le=1 << 20, description="0: as the ops need")] = 0


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

    @model_validator(mode="after")
    def _mtu(self) -> QpSpec:
        if self.path_mtu not in (256, 512, 1024, 2048, 4096):
            raise ValueError(f"path_mtu must be 256, 512, 1024, 2048 or 4096, not "
                             f"{self.path_mtu}")
        return self


class OpSpec(Strict):
    op: OpKind
    bytes: Annotated[int, Field(ge=0, le=1 << 30)] = 8
    sges: Annotated[int, Field(ge=1, le=16)] = 1
    recv_sges: Annotated[int, Field(ge=1, le=16)] = 1
    local_offset: Annotated[int, Field(ge=0, le=4095)] = 0
    remote_offset: Annotated[int, Field(ge=0, le=4095)] = 0
    repeat: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    imm: Annotated[int, Field(ge=0, le=0xFFFFFFFF)] = 0
    compare: Annotated[int, Field(ge=0, le=(1 << 64) - 1)] = 0
    swap_add: Annotated[int, Field(ge=0, le=(1 << 64) - 1)] = 1
    initial: Annotated[int, Field(ge=0, le=(1 << 64) - 1)] = 0
    signaled: bool = True

    @model_validator(mode="after")
    def _atomics(self) -> OpSpec:
        if self.op in (OpKind.CMP_SWAP, OpKind.FETCH_ADD):
            if self.bytes != 8:
                raise ValueError("atomics operate on exactly 8 bytes (bytes: 8)")
            if self.remote_offset % 8:
                raise ValueError("atomics need an 8-byte aligned remote_offset")
            if self.sges != 1:
                raise ValueError("atomics take one SGE")
        if self.op in (OpKind.SEND, OpKind.SEND_IMM) and self.bytes == 0 and self.recv_sges > 1:
            raise ValueError("a zero-length SEND needs recv_sges: 1")
        return self


class Scenario(Strict):
    name: str = "scenario"
    seed: int = 1
    depth: Annotated[int, Field(ge=1, le=4096, description="WRs kept outstanding")] = 1
    link: LinkSpec = LinkSpec()
    pcie: PcieSpec = PcieSpec()
    nic: NicSpec = NicSpec()
    host: HostSpec = HostSpec()
    qp: QpSpec = QpSpec()
    pcap: str | None = "traces/{name}.pcap"
    timeout_us: Annotated[float, Field(gt=0)] = 1_000_000.0
    ops: Annotated[list[OpSpec], Field(min_length=1)]

    @model_validator(mode="after")
    def _fits(self) -> Scenario:
        for i, o in enumerate(self.ops):
            if o.sges > self.qp.max_send_sge:
                raise ValueError(f"ops[{i}].sges {o.sges} > qp.max_send_sge "
                                 f"{self.qp.max_send_sge}")
            if o.recv_sges > self.qp.max_recv_sge:
                raise ValueError(f"ops[{i}].recv_sges {o.recv_sges} > qp.max_recv_sge "
                                 f"{self.qp.max_recv_sge}")
        if self.depth > self.qp.max_send_wr:
            raise ValueError(f"depth {self.depth} > qp.max_send_wr {self.qp.max_send_wr}")
        return self


class ScenarioError(Exception):
    """A scenario file that cannot be used; the message is one line naming the field."""


def _one_line(e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(x) if not isinstance(x, int) else f"[{x}]" for x in err["loc"])
    loc = loc.replace(".[", "[")
    msg = err["msg"].removeprefix("Value error, ")
    more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
    return f"{loc or 'scenario'}: {msg}{more}"


def parse_scenario(text: str, source: str = "<scenario>") -> Scenario:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ScenarioError(f"{source}:{where} not valid YAML: "
                            f"{getattr(e, 'problem', None) or e}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a mapping with at least 'ops'")
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(f"{source}: {_one_line(e)}") from None


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ScenarioError(f"{path}: {e.strerror}") from None
    return parse_scenario(text, str(path))


DEFAULT = Path(__file__).with_name("default.yaml")
