"""The reaction-point algorithms the NIC can run, by CcAlgorithm."""

from __future__ import annotations

from collections.abc import Callable

from nicsim.nic.cc.config import CcAlgorithm, CcConfig
from nicsim.nic.cc.control import RateControl
from nicsim.nic.cc.dcqcn import Dcqcn
from nicsim.nic.qp import QpCtx
from nicsim.sim import Sim


def make_rate_control(env: Sim, cfg: CcConfig, line_gbps: Callable[[], float],
                      rate_changed: Callable[[QpCtx], None]) -> RateControl | None:
    """The reaction point `cfg` asks for (None: no congestion control)."""
    if cfg.algorithm is CcAlgorithm.NONE:
        return None
    return Dcqcn(env, cfg, line_gbps, rate_changed)
