"""nicsim: a RoCEv2 RDMA NIC you can run without the hardware (see README.md)."""
