"""Congestion control in the NIC: the notification point (CNPs for CE-marked requests) and the
reaction point (a per-QP rate the send engine keeps), behind one small interface
(nicsim.nic.cc.control.RateControl) so that algorithms, built in (DCQCN, HPCC, TIMELY, DCTCP)
or a user's own from a Python file, plug in without touching the send engine
(docs/how-to/add-cc.md)."""

from nicsim.nic.cc.algorithms import (
    ALGORITHMS,
    PRESETS,
    cc_from_dict,
    load_module,
    make_rate_control,
)
from nicsim.nic.cc.config import (
    AlphaUpdate,
    CcAlgorithm,
    CcConfig,
    CcConfigError,
    CnpConfig,
    DcqcnParams,
)
from nicsim.nic.cc.control import RateControl, Signal
from nicsim.nic.cc.notify import NotificationPoint

__all__ = ["ALGORITHMS", "PRESETS", "AlphaUpdate", "CcAlgorithm", "CcConfig", "CcConfigError",
           "CnpConfig", "DcqcnParams", "NotificationPoint", "RateControl", "Signal",
           "cc_from_dict", "load_module", "make_rate_control"]
