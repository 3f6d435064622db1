"""The world a program under `nicsim exec` sees, as options and as NICSIM_WORLD.

NICSIM_WORLD is a comma-separated list of key=value pairs, e.g.
`hosts=2,mem_mib=1024,seed=0,rate_gbps=100,pcap=traces/exec,profile=cx5-100g,loss=0.01`
(and `host_profile=NAME`).
The default world is two hosts
on one cable, one device each (nsnic0 on the first host, nsnic1 on its peer): a program
that uses one device talks to itself by loopback inside the NIC, one that uses both talks
over the cable. More hosts hang off one switch (a star); one host has an unconnected port
(link down).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields, replace

ENV = "NICSIM_WORLD"


class SpecError(ValueError):
    """A bad world description; the message is one line naming the key."""


@dataclass(frozen=True)
class WorldSpec:
    hosts: int = 2
    mem_mib: int = 1024  # physical memory of each host
    seed: int = 0
    rate_gbps: float | None = None  # the link rate (none: the profile's, or 100)
    pcap: str | None = None  # directory for one capture per host port (none: no capture)
    profile: str | None = None  # the hardware (a profile's name or file; none: nsnic's)
    host_profile: str | None = None  # the host around it (none: the NIC profile's)
    loss: float = 0.0  # probability each cable drops a frame (nicsim run's --loss)

    def check(self) -> None:
        if not 1 <= self.hosts <= 64:
            raise SpecError(f"hosts: {self.hosts} is not between 1 and 64")
        if not 64 <= self.mem_mib <= 1 << 16:
            raise SpecError(f"mem_mib: {self.mem_mib} is not between 64 and 65536")
        if self.rate_gbps is not None and not 0 < self.rate_gbps <= 1600:
            raise SpecError(f"rate_gbps: {self.rate_gbps} is not in (0, 1600]")
        if not 0 <= self.loss <= 1:
            raise SpecError(f"loss: {self.loss} is not a probability in [0, 1]")
        if self.seed < 0:
            raise SpecError(f"seed: {self.seed} is negative")

    def to_env(self) -> str:
        parts = []
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                parts.append(f"{f.name}={v}")
        return ",".join(parts)

    def with_text(self, text: str) -> WorldSpec:
        """This spec with the key=value pairs of `text` applied."""
        types = {f.name: f.type for f in fields(self)}
        changes: dict[str, object] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, val = part.partition("=")
            key = key.strip()
            if not sep:
                raise SpecError(f"{part!r}: expected key=value")
            if key not in types:
                raise SpecError(f"{key}: unknown key (known: {', '.join(types)})")
            t = types[key]
            try:
                if "int" in str(t):
                    changes[key] = int(val)
                elif "float" in str(t):
                    changes[key] = float(val)
                else:
                    changes[key] = val or None
            except ValueError:
                raise SpecError(f"{key}: {val!r} is not a number") from None
        spec = replace(self, **changes)  # type: ignore[arg-type]
        spec.check()
        return spec


def from_env(environ: dict[str, str] | None = None) -> WorldSpec:
    env = os.environ if environ is None else environ
    return WorldSpec().with_text(env.get(ENV, ""))


SHIM_DIR_ENV = "NICSIM_SHIM_DIR"  # where the shims are, so `ip` can find the real one
HOSTS_ENV = "NICSIM_HOSTS"  # the world's host names (native/libibverbs/hostnames.c)
WORLD_FILE = "world.json"


@dataclass(frozen=True)
class Netdev:
    """One device's Ethernet side, as `ip` and `rdma link` show it."""

    device: str  # the RDMA device
    name: str  # the netdev
    ifindex: int
    mac: str
    ip: str
    mtu: int
    up: bool
    roce_v1: bool = True  # the device has RoCE v1 GIDs as well as v2 (hwif.gid_table)


def save(nds: list[Netdev], where: str) -> None:
    with open(os.path.join(where, WORLD_FILE), "w") as f:
        json.dump([asdict(n) for n in nds], f)
