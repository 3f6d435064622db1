"""The simulation kernel (nicsim.sim.kernel): time, the event queue, and the fast paths that
need to know how SimPy keeps them."""

from nicsim.sim.kernel import NO_HORIZON, NORMAL, Entry, Sim, Tick, WakeFlag, Woken

__all__ = ["NORMAL", "NO_HORIZON", "Entry", "Sim", "Tick", "WakeFlag", "Woken"]
