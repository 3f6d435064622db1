"""A `nicsim exec` world attached to this process, as a program under nicsim exec gets it
(tests of RDMA CM and of forked programs)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from nicsim.driver.user.process import Process, attach
from nicsim.exec.spec import WorldSpec
from nicsim.exec.world import build, devices
from nicsim.world import World


@contextmanager
def attached_world(spec: WorldSpec) -> Iterator[World]:
    """The world `spec` describes, its devices this process's until the block ends."""
    w = build(spec)
    attach(Process(devices(w)))
    try:
        yield w
    finally:
        attach(None)


def host_ips(w: World) -> tuple[str, str]:
    """The IP addresses of a two-host world's devices, in host order."""
    a, b = (h.kernel.devices[n].hw.fn.netdev.ip  # type: ignore[attr-defined]
            for h in w.hosts.values() for n in h.kernel.devices)  # type: ignore[attr-defined]
    return a, b
