"""`nicsim exec -- COMMAND`: run an unmodified program against the simulated world.

The command runs with nicsim's `pyverbs` package first on its import path (the public face of
nicsim.driver, in driver/facade) and with `rdma` and `ip` commands first on its PATH that
answer for the simulated devices. The world (hosts, devices, link rate, pcap directory) is
described by the NICSIM_WORLD environment variable, which the command's options set
(nicsim.exec.spec); every process that opens a device builds its own copy of that world
(nicsim.exec.world).
"""
