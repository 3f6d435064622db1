"""nicsim: a RoCEv2 RDMA NIC you can run without the hardware (see README.md)."""

from nicsim import _compat_driver

_compat_driver.install()  # the old name `driver` for nicsim.driver, for code not yet moved
