"""pyverbs.cq."""

from nicsim.driver.user.extended import CQEX
from nicsim.driver.user.unsupported import CqInitAttrEx, PollCqAttr, WcTmInfo
from nicsim.driver.user.verbs import CQ, WC, CompChannel

__all__ = ["CQ", "CQEX", "WC", "CompChannel", "CqInitAttrEx", "PollCqAttr", "WcTmInfo"]
