"""rdma_getaddrinfo (pyverbs.cmid.AddrInfo): the addresses and port space of a connection.

nicsim's world has no name service: nodes are numeric IPv4 or IPv6 addresses (the addresses
of the simulated netdevs, which `ip addr show` lists under `nicsim exec`); services are port
numbers. As librdmacm, a port space of 0 means RDMA_PS_TCP (an RC QP), RDMA_PS_UDP a UD QP.
"""

from __future__ import annotations

import errno
import ipaddress

from nicsim.driver.cm_enums import RAI_PASSIVE, rdma_port_space
from nicsim.driver.enums import ibv_qp_type
from nicsim.driver.user import errors
from nicsim.driver.user.base import PyverbsObject
from nicsim.driver.user.errors import PyverbsRDMAError

_QP_TYPE = {rdma_port_space.RDMA_PS_TCP: ibv_qp_type.IBV_QPT_RC,
            rdma_port_space.RDMA_PS_UDP: ibv_qp_type.IBV_QPT_UD}


def fail(what: str, why: str, code: int) -> PyverbsRDMAError:
    errors.last_errno = code
    return PyverbsRDMAError(f"{what}: {why}", code)


def _addr(node: object, what: str) -> str:
    if isinstance(node, bytes):
        node = node.decode()
    try:
        return str(ipaddress.ip_address(str(node)))
    except ValueError:
        raise fail(what, f"{node!r} is not a numeric address (the simulated world has no "
                   "name service)", errno.EADDRNOTAVAIL) from None


def _port(service: object, what: str) -> int:
    if service is None:
        return 0
    if isinstance(service, bytes):
        service = service.decode()
    try:
        port = int(str(service))
    except ValueError:
        raise fail(what, f"service {service!r} is not a port number", errno.EINVAL) from None
    if not 0 <= port <= 0xFFFF:
        raise fail(what, f"port {port} out of range", errno.EINVAL)
    return port


class AddrInfo(PyverbsObject):
    """AddrInfo(src=None, dst=None, src_service=None, dst_service=None, port_space=0,
    flags=0): as pyverbs, an AddrInfo with neither address nor service is empty."""

    def __init__(self, src: object = None, dst: object = None, src_service: object = None,
                 dst_service: object = None, port_space: int = 0, flags: int = 0) -> None:
        self.src_addr: str | None = None
        self.src_port = 0
        self.dst_addr: str | None = None
        self.dst_port = 0
        self.port_space = int(rdma_port_space.RDMA_PS_TCP)
        self.flags = 0
        if src or dst or src_service or dst_service:
            self.get_addrinfo(src, dst, src_service, dst_service, port_space, flags)

    @property
    def qp_type(self) -> int:
        return int(_QP_TYPE.get(self.port_space, ibv_qp_type.IBV_QPT_RC))

    def get_addrinfo(self, src: object = None, dst: object = None, src_service: object = None,
                     dst_service: object = None, port_space: int = 0, flags: int = 0) -> None:
        what = "Failed to get Address Info"
        ps = int(port_space) or int(rdma_port_space.RDMA_PS_TCP)
        if ps not in _QP_TYPE:
            raise fail(what, f"port space {ps} is not supported", errno.EPROTONOSUPPORT)
        self.port_space, self.flags = ps, int(flags)
        self.src_addr = None if src is None else _addr(src, what)
        if flags & RAI_PASSIVE:
            self.src_port = _port(src_service, what)
            self.dst_addr, self.dst_port = None, 0
            if self.src_addr is None:
                self.src_addr = "0.0.0.0"
            return
        if dst is None and self.src_addr is None:
            raise fail(what, "no address: neither a source nor a destination", errno.EINVAL)
        self.src_port = _port(src_service, what)
        # (a source alone, as pyverbs asks for a multicast group's address: no destination)
        self.dst_addr = None if dst is None else _addr(dst, what)
        self.dst_port = _port(dst_service, what)

    def close(self) -> None:
        """(rdma_freeaddrinfo: nothing to free)"""

    def __repr__(self) -> str:
        return (f"AddrInfo(src={self.src_addr}:{self.src_port}, dst={self.dst_addr}:"
                f"{self.dst_port}, port_space={self.port_space})")
