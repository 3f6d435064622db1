"""The sections a profile and a scenario share (`link`, `pcie`, `nic`, `cpu`), as pydantic
models: one definition, so a field means the same in both. The `nic` and `pcie` sections are
made from the knobs of NicConfig and PcieConfig (nicsim.knobs): their defaults, bounds and
meanings are written once, next to the code that uses them."""

from __future__ import annotations

import typing
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from nicsim.host.pcie import PcieConfig
from nicsim.knobs import knobs
from nicsim.nic.config import BF_SIZES, NicConfig, check_odp_eqs


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ProfileLinkSpec(Strict):
    """What a NIC profile says of its link (nicsim.profiles)."""

    rate_gbps: Annotated[float, Field(gt=0, le=1600)] = 100.0
    prop_ns: Annotated[float, Field(ge=0)] = 50.0



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

    enabled: bool = True
    detect_ms: Annotated[float, Field(gt=0, le=60_000)] = 200.0
    restore_ms: Annotated[float, Field(gt=0, le=60_000)] = 200.0


class NicSpec(_section(NicConfig, "")):  # type: ignore[misc]
    """Every knob of nicsim.nic.config.NicConfig (capacities the device reports,
    fixed-function latencies, the sizes of its queues and caches), and its PFC watchdog."""

    pfc_watchdog: WatchdogSpec = WatchdogSpec()  # of the NIC's transmit queues

    @model_validator(mode="after")
    def _consistent(self) -> NicSpec:
        if self.bf_size not in BF_SIZES:
            raise ValueError(f"bf_size must be 0 (no BlueFlame), 64, 128 or 256, not "
                             f"{self.bf_size}")
        check_odp_eqs(self.odp, self.max_eq)
        return self

    def config(self) -> dict[str, typing.Any]:
        """The NicConfig fields this section sets (the watchdog apart)."""
        return self.model_dump(exclude={"pfc_watchdog"})


class CpuSpec(Strict):
    """The host CPU's time for verbs calls (nicsim.host.host.CpuCosts), in ns."""

    post_send_ns: NsFloat = 80.0
    post_recv_ns: NsFloat = 30.0
    poll_empty_ns: NsFloat = 20.0
    poll_cqe_ns: NsFloat = 40.0
    syscall_ns: NsFloat = 700.0
    mmio_write_ns: NsFloat = 20.0
    odp_fault_ns: NsFloat = 4000.0  # the driver's page-fault handler, per fault
    odp_page_ns: NsFloat = 300.0  # ... and per page it makes present
    spread: Annotated[float, Field(ge=0, le=10, description="each CPU cost varies in "
                                   "[c, c*(1+spread)], seeded")] = 0.0
    # The socket path's cost model (nicsim.apps.echo): what a send() and a receive cost the
    # host beyond the wire. Assumed orders of magnitude for a current x86 server kernel, not
    # fitted to a measurement: a profile that knows better sets them.
    sock_syscall_ns: NsFloat = 300.0  # send()/recv() entry and exit
    sock_copy_gbps: Annotated[float, Field(gt=0)] = 80.0  # copy in/out of the kernel, ~10 GB/s
    tcp_tx_seg_ns: NsFloat = 700.0  # tcp_sendmsg .. driver xmit, per segment
    tcp_rx_seg_ns: NsFloat = 900.0  # NAPI poll, IP and TCP receive, socket queue, per segment
    irq_ns: NsFloat = 1000.0  # interrupt delivery, handler, softirq raise, per burst
    wakeup_ns: NsFloat = 2500.0  # waking the blocked reader: scheduler and context switch
