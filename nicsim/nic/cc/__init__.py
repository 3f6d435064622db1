"""Congestion control in the NIC: the notification point (CNPs for CE-marked requests) and the
reaction point (a per-QP rate the send engine keeps), behind one small interface
(nicsim.nic.cc.control.RateControl) so other algorithms can be added without touching the
send engine."""

from nicsim.nic.cc.algorithms import make_rate_control
from nicsim.nic.cc.config import (
    PRESETS,
    AlphaUpdate,
    CcAlgorithm,
    CcConfig,
    CnpConfig,
    DcqcnParams,
    cc_from_dict,
)
from nicsim.nic.cc.control import RateControl
from nicsim.nic.cc.notify import NotificationPoint

__all__ = ["PRESETS", "AlphaUpdate", "CcAlgorithm", "CcConfig", "CnpConfig", "DcqcnParams",
           "NotificationPoint", "RateControl", "cc_from_dict", "make_rate_control"]
