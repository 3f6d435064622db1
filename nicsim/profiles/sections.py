"""The sections a profile and a scenario share (`link`, `pcie`, `nic`, `cpu`), as pydantic
models: one definition, so a field means the same in both. The `nic` and `pcie` sections are
made from the knobs of NicConfig and PcieConfig (nicsim.knobs): their defaults, bounds and
meanings are written once, next to the code that uses them."""

from __future__ import annotations

import typing
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from nicsim.host.pcie import PcieConfig
from nicsim.hwif import SCATTER_CQE_SIZES
from nicsim.knobs import knobs
from nicsim.nic.config import BF_SIZES, NicConfig, check_odp_eqs


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ProfileLinkSpec(Strict):
    """What a NIC profile says of its link (nicsim.profiles)."""

    rate_gbps: Annotated[float, Field(gt=0, le=1600, description=(
        "line rate, Gb/s; preamble and SFD, FCS and the inter-frame gap take wire time too "
        "(in a fabric: every host's link)"))] = 100.0
    prop_ns: Annotated[float, Field(ge=0, description="propagation delay, ns")] = 50.0



NsFloat = Annotated[float, Field(ge=0)]


def _section(cls: type, doc: str) -> type[Strict]:
    """A strict pydantic model with one field per knob of the dataclass `cls`."""
    hints = typing.get_type_hints(cls)
    fields: dict[str, typing.Any] = {}
    for f in knobs(cls):
        bounds = {k: f.metadata[k] for k in ("ge", "gt", "le") if k in f.metadata}
        field = Field(description=f.metadata["doc"] or None, **bounds)
        fields[f.name] = (Annotated[hints[f.name], field], f.default)
    return create_model(f"_{cls.__name__}Knobs", __base__=Strict, __doc__=doc, **fields)


PcieSpec = _section(PcieConfig, "The PCIe link between a host and its NIC (PcieConfig).")


class WatchdogSpec(Strict):
    """A PFC watchdog (nicsim.fabric.pfc.PfcWatchdog): a lossless queue paused with frames
    waiting and none leaving for `detect_ms` is stormed (pauses ignored; a switch drops its
    frames) until no pause has come for `restore_ms`."""

    enabled: bool = Field(True, description="the watchdog runs (false: none)")
    detect_ms: Annotated[float, Field(gt=0, le=60_000, description=(
        "a paused queue with frames waiting and none leaving this long is stormed, ms"))] = 200.0
    restore_ms: Annotated[float, Field(gt=0, le=60_000, description=(
        "a stormed queue recovers once no pause has come for this long, ms"))] = 200.0


class NicSpec(_section(NicConfig, "")):  # type: ignore[misc]
    """Every knob of nicsim.nic.config.NicConfig (capacities the device reports in
    QUERY_DEVICE and enforces, fixed-function latencies, the sizes of its queues and caches),
    and its PFC watchdog. The `*_cycles` count cycles of `clock_mhz`: what a stage occupies
    one of its units for (its initiation interval, which bounds rates); the `*_ns` fields are
    latencies."""

    pfc_watchdog: WatchdogSpec = Field(WatchdogSpec(), description=(
        "the PFC watchdog of the NIC's transmit queues (a stormed queue's frames are sent, "
        "pauses ignored)"))

    @model_validator(mode="after")
    def _consistent(self) -> NicSpec:
        if self.bf_size not in BF_SIZES:
            raise ValueError(f"bf_size must be 0 (no BlueFlame), 64, 128 or 256, not "
                             f"{self.bf_size}")
        check_odp_eqs(self.odp, self.max_eq)
        if self.scatter_to_cqe_bytes not in SCATTER_CQE_SIZES:
            raise ValueError(f"scatter_to_cqe_bytes must be 0 (none) or 32, not "
                             f"{self.scatter_to_cqe_bytes}")
        return self

    def config(self) -> dict[str, typing.Any]:
        """The NicConfig fields this section sets (the watchdog apart)."""
        return self.model_dump(exclude={"pfc_watchdog"})


class CpuSpec(Strict):
    """The host CPU's time for verbs calls (nicsim.host.host.CpuCosts), and the socket
    path's costs (the fields marked "sockets", used by nicsim.apps.echo's TCP model)."""

    post_send_ns: NsFloat = Field(80.0, description="a post send: the WQE written, the "
                                  "doorbell stored, ns")
    post_recv_ns: NsFloat = Field(30.0, description="a post receive, ns")
    poll_empty_ns: NsFloat = Field(20.0, description="a poll that finds no CQE, ns")
    poll_cqe_ns: NsFloat = Field(40.0, description="a poll, per CQE it returns, ns")
    syscall_ns: NsFloat = Field(700.0, description="a uverbs command's user/kernel "
                                "crossing, ns")
    mmio_write_ns: NsFloat = Field(20.0, description="an MMIO store on the control path "
                                   "(and each 64 B of a BlueFlame write past the first), ns")
    odp_fault_ns: NsFloat = Field(4000.0, description="the driver's ODP page-fault "
                                  "handler, per fault, ns")
    odp_page_ns: NsFloat = Field(300.0, description="the ODP page-fault handler, per page "
                                 "it makes present, ns")
    spread: Annotated[float, Field(ge=0, le=10, description=(
        "each CPU cost is drawn from [c, c*(1+spread)] by the host's seeded generator "
        "(0: exact)"))] = 0.0
    # The socket path's cost model (nicsim.apps.echo): what a send() and a receive cost the
    # host beyond the wire. Assumed orders of magnitude for a current x86 server kernel, not
    # fitted to a measurement: a profile that knows better sets them.
    sock_syscall_ns: NsFloat = Field(300.0, description="sockets: a send()/recv() entry "
                                     "and exit, ns")
    sock_copy_gbps: Annotated[float, Field(gt=0, description=(
        "sockets: copy into and out of the kernel, Gb/s (80: about 10 GB/s)"))] = 80.0
    tcp_tx_seg_ns: NsFloat = Field(700.0, description="sockets: tcp_sendmsg to the driver's "
                                   "transmit, per segment, ns")
    tcp_rx_seg_ns: NsFloat = Field(900.0, description="sockets: NAPI poll, IP and TCP "
                                   "receive, socket queue, per segment, ns")
    irq_ns: NsFloat = Field(1000.0, description="sockets: interrupt delivery, handler and "
                            "softirq raise, per burst, ns")
    wakeup_ns: NsFloat = Field(2500.0, description="sockets: waking the blocked reader "
                               "(scheduler and context switch), ns")
