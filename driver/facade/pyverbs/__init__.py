"""nicsim's pyverbs: rdma-core's pyverbs module layout over nicsim's verbs library
(nicsim.driver.user), for programs run under `nicsim exec`. Devices are those of the
simulated world NICSIM_WORLD describes (nicsim.exec.world), built when a program first looks
for one."""

from nicsim.exec.world import install as _install

__version__ = "nicsim"

_install()
