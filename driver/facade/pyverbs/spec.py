"""pyverbs.spec: flow specifications (nsnic has no flow steering; they are data)."""

from nicsim.driver.user.unsupported import EthSpec, Ipv4ExtSpec, Ipv6Spec, Spec, TcpUdpSpec

__all__ = ["EthSpec", "Ipv4ExtSpec", "Ipv6Spec", "Spec", "TcpUdpSpec"]
