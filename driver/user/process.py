"""The process a verbs program runs as, and the RDMA devices it can see.

A Linux process has one address space, shared by every device context it opens, and finds
devices by name in ibv_get_device_list. Here the program is one simulated process that may
hold memory on several hosts (a program under `nicsim exec` drives every device of the
simulated world, as rdma-core's tests drive a client and a server from one process): it has
one address space per host it has opened a device on, and its generic memory (mmap,
posix_memalign: pyverbs.mem_alloc) lives on its home host, the host of the first device.

Who builds the world is not the driver's business: `nicsim exec` (nicsim.exec.world)
installs a factory; a program that builds its own World passes `host=` to Context instead.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass, field

from nicsim.driver import sched

from nicsim.host.host import Host
from nicsim.host.memory import AddressSpace


class NoDevicesError(Exception):
    """There is no simulated world to find devices in."""

    errno = errno.ENODEV


@dataclass(frozen=True)
class DeviceEntry:
    """One RDMA device as ibv_get_device_list lists it: its name and the host it is on."""

    name: str
    host: Host
    index: int


@dataclass
class Process:
    devices: list[DeviceEntry]
    _aspaces: dict[int, AddressSpace] = field(default_factory=dict)
    # CAP_NET_RAW: what the kernel lets only privileged processes do (a controlled Q_Key on
    # a UD QP, IBA C3-32). Programs run unprivileged unless told otherwise.
    cap_net_raw: bool = False

    @property
    def home(self) -> Host:
        if not self.devices:
            raise NoDevicesError("the simulated world has no RDMA device")
        return self.devices[0].host

    def device(self, name: str) -> DeviceEntry | None:
        return next((d for d in self.devices if d.name == name), None)

    def aspace(self, host: Host) -> AddressSpace:
        """The process's address space on `host` (made at first use)."""
        a = self._aspaces.get(id(host))
        if a is None:
            a = self._aspaces[id(host)] = host.new_address_space()
        return a


_current: Process | None = None
_factory: Callable[[], Process] | None = None


def set_factory(factory: Callable[[], Process]) -> None:
    """Who builds the process's world on first use (nicsim exec's world, from its options)."""
    global _factory
    _factory = factory


def attach(process: Process | None) -> None:
    """Make `process` the current one (None: forget it; the factory builds the next)."""
    global _current
    _current = process


def current() -> Process:
    global _current
    if _current is None:
        if _factory is None:
            raise NoDevicesError("no simulated world: run the program under `nicsim exec`, or "
                                 "open devices with Context(name, host=...)")
        _current = _factory()
    return _current


def _hosts() -> list[Host]:
    """The hosts of the current process's devices (none before it has a world)."""
    return [d.host for d in _current.devices] if _current is not None else []


def privileged() -> bool:
    """Whether the current process (if any) has CAP_NET_RAW."""
    return _current is not None and _current.cap_net_raw


sched.program_hosts = _hosts
